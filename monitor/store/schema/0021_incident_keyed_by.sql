-- What an open violation's keys are made of (the file's `key:` columns, or the whole row's
-- columns without one), as its last counted run made them: a run that makes them another
-- way (the header's `key:` edited) says nothing of which rows came or went, and the keys
-- are made again (incidents.py, decide). NULL: recorded by an earlier release.
ALTER TABLE incidents ADD COLUMN keyed_by TEXT;
