-- How each closed incident ended (incidents.py's EndState): `resolved`, or `retired`
-- when its invariant's file was removed while it was open. resolved_at stays the
-- time it closed, either way. Closed before this was kept: resolved, except those a
-- removal closed, which said so in their closing event's reason.
ALTER TABLE incidents ADD COLUMN ended_as TEXT;
UPDATE incidents SET ended_as = 'resolved' WHERE resolved_at IS NOT NULL;
UPDATE incidents SET ended_as = 'retired' WHERE resolved_at IS NOT NULL AND id IN (
    SELECT incident_id FROM events
    WHERE payload_json LIKE '%"reason": "the invariant was removed"%'
);
