-- The delivery ledger (alerts/ledger.py): one row per logical message or file.
CREATE TABLE deliveries (
    id {pk},
    idem_key TEXT NOT NULL,
    event_id {bigint},
    incident_id {bigint},
    invariant TEXT NOT NULL,
    channel TEXT NOT NULL,
    action TEXT NOT NULL,
    root_id {bigint},
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    next_attempt_at TEXT NOT NULL,
    lease_owner TEXT,
    lease_until TEXT,
    unknown_since TEXT,
    slack_channel TEXT,
    slack_ts TEXT,
    slack_file_id TEXT,
    payload_json TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX deliveries_idem_key ON deliveries (idem_key);
CREATE INDEX deliveries_due ON deliveries (state, next_attempt_at);
CREATE TABLE alert_roots (
    incident_id {bigint} NOT NULL,
    channel TEXT NOT NULL,
    delivery_id {bigint} NOT NULL REFERENCES deliveries (id),
    PRIMARY KEY (incident_id, channel)
);
