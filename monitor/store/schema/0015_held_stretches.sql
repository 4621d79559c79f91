-- Held stretches (stretches.py): consecutive runs that all held, on one target with the
-- same columns, are kept as one row. `repeats` is how many runs the row stands for;
-- started_at and slot are its first run's, finished_at, last_started_at and last_slot
-- its last run's. A day of runs every minute was 1,440 rows per invariant; a stretch
-- closes after an hour, so it is at most 24 while the invariant holds.
ALTER TABLE runs ADD COLUMN repeats INTEGER NOT NULL DEFAULT 1;
ALTER TABLE runs ADD COLUMN last_started_at TEXT;
ALTER TABLE runs ADD COLUMN last_slot TEXT;
