-- Mutes (mutes.py): planned silences of notifications, honoured by every daemon sharing
-- the store. Runs and incidents are recorded as ever; the incidents a mute kept quiet are
-- listed in mute_holds, and what of them is still open posts once when it ends.
CREATE TABLE mutes (
    id {pk},
    selector TEXT,
    target TEXT,
    starts_at TEXT NOT NULL,
    ends_at TEXT NOT NULL,
    reason TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at TEXT NOT NULL,
    ended_early_at TEXT,
    released_at TEXT
);
CREATE INDEX mutes_by_end ON mutes (released_at, ends_at);
CREATE TABLE mute_holds (
    mute_id {bigint} NOT NULL,
    incident_id {bigint} NOT NULL,
    PRIMARY KEY (mute_id, incident_id)
);
