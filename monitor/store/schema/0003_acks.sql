-- Acknowledgement and snooze (alerts/interactions.py and `invmon ack`).
ALTER TABLE incidents ADD COLUMN acked_by TEXT;
ALTER TABLE incidents ADD COLUMN acked_by_name TEXT;
ALTER TABLE incidents ADD COLUMN acked_at TEXT;
ALTER TABLE incidents ADD COLUMN ack_mode TEXT;
ALTER TABLE incidents ADD COLUMN snoozed_until TEXT;
ALTER TABLE incidents ADD COLUMN snoozed_by TEXT;
CREATE TABLE incident_actions (
    id {pk},
    incident_id {bigint} NOT NULL REFERENCES incidents (id),
    action TEXT NOT NULL,
    actor TEXT NOT NULL,
    actor_name TEXT,
    detail TEXT,
    source TEXT NOT NULL,
    at TEXT NOT NULL
);
