-- Several daemons on one store (claims.py): each slot of an invariant is claimed by
-- one daemon and stored as one run at most; the daemons keep a heartbeat row.
CREATE TABLE slot_claims (
    invariant TEXT NOT NULL,
    slot TEXT NOT NULL,
    owner TEXT NOT NULL,
    claimed_at TEXT NOT NULL,
    lease_until TEXT NOT NULL,
    finished_at TEXT,
    outcome TEXT,
    takeovers INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (invariant, slot)
);
CREATE INDEX slot_claims_open ON slot_claims (lease_until) WHERE finished_at IS NULL;
CREATE TABLE daemons (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    seen_at TEXT NOT NULL
);
ALTER TABLE runs ADD COLUMN slot TEXT;
CREATE UNIQUE INDEX runs_one_per_slot ON runs (invariant, slot) WHERE slot IS NOT NULL;
