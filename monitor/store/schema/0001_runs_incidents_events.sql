-- The first schema: runs, each invariant's state, incidents, their keys and the events outbox.
CREATE TABLE runs (
    id {pk},
    invariant TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT NOT NULL,
    status TEXT NOT NULL,
    count {bigint},
    error TEXT,
    replica_lag_seconds {real},
    duration_ms {real},
    columns_json TEXT NOT NULL DEFAULT '[]',
    sample_json TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX runs_by_invariant ON runs (invariant, id);
CREATE TABLE invariant_state (
    invariant TEXT PRIMARY KEY,
    consecutive_violations INTEGER NOT NULL DEFAULT 0,
    consecutive_errors INTEGER NOT NULL DEFAULT 0,
    last_run_id {bigint},
    updated_at TEXT NOT NULL
);
CREATE TABLE incidents (
    id {pk},
    invariant TEXT NOT NULL,
    kind TEXT NOT NULL,
    opened_at TEXT NOT NULL,
    resolved_at TEXT,
    first_count {bigint},
    last_count {bigint},
    last_seen_at TEXT NOT NULL,
    detail TEXT
);
CREATE UNIQUE INDEX incidents_one_open ON incidents (invariant, kind)
    WHERE resolved_at IS NULL;
CREATE TABLE incident_keys (
    incident_id {bigint} NOT NULL REFERENCES incidents (id),
    offending_key TEXT NOT NULL,
    row_json TEXT,
    first_seen_at TEXT NOT NULL,
    last_seen_at TEXT NOT NULL,
    gone_at TEXT,
    PRIMARY KEY (incident_id, offending_key)
);
CREATE TABLE events (
    id {pk},
    incident_id {bigint} NOT NULL REFERENCES incidents (id),
    invariant TEXT NOT NULL,
    kind TEXT NOT NULL,
    created_at TEXT NOT NULL,
    run_id {bigint},
    payload_json TEXT NOT NULL,
    dispatched_at TEXT
);
CREATE INDEX events_pending ON events (id) WHERE dispatched_at IS NULL;
