-- The monitored database (target) each run ran on and each incident is about; what
-- was stored before targets existed was all the one target, `default`.
ALTER TABLE runs ADD COLUMN target TEXT NOT NULL DEFAULT 'default';
ALTER TABLE incidents ADD COLUMN target TEXT NOT NULL DEFAULT 'default';
