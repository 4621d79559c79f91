-- Quarantine (quarantine.py): invariants held out of the schedule on every daemon
-- sharing the store, each at the version of its file that overran its timeout.
CREATE TABLE quarantines (
    invariant TEXT PRIMARY KEY,
    version TEXT NOT NULL,
    reason TEXT NOT NULL,
    since TEXT NOT NULL
);
