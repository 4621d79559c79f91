-- Whether an open violation's latest counted run brought back every offending row's key
-- (1) or only the first daemon.track_keys of them (0): only after a complete run are its
-- open keys every row that offended, so that a key not among them is new. NULL on an
-- incident opened before this step, judged as before, by its counts (incidents.py).
ALTER TABLE incidents ADD COLUMN last_complete INTEGER;
