-- The count of the run that wrote an open violation's last_complete: the flag speaks for
-- that run only. Where a key repeats over several rows the count exceeds the keys, so a
-- flag could not be told fresh by comparing the two (incidents.py, knew_every_row). NULL
-- where a daemon of an earlier release wrote the flag (judged as before).
ALTER TABLE incidents ADD COLUMN complete_count {bigint};
