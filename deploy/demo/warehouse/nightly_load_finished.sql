-- description: Last night's warehouse load finished. In the demo this target's database is deliberately unreachable, to show that one database going away changes nothing for the others.
-- severity: warning
-- owner: "@data-platform"

SELECT load_id, started_at
FROM load_runs
WHERE started_at > now() - interval '1 day'
  AND finished_at IS NULL
