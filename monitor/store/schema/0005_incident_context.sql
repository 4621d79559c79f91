-- What an incident's messages need after its file is gone, and the rows that opened
-- it exactly as they were (duplicates kept): the CSV is built from these.
ALTER TABLE incidents ADD COLUMN context_json TEXT;
ALTER TABLE incidents ADD COLUMN opening_json TEXT;
