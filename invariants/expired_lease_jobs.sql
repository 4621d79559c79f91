-- description: A job in progress is held by a live worker, so it has an owner and a lease that has not run out. Otherwise the job is stuck, and nobody runs it or retries it.
-- severity: warning
-- owner: "@platform-oncall"
-- runbook: https://example.com/runbooks/stuck-jobs
-- schedule: every 5m
-- timeout: 30s
-- key: [job_id]
-- sample: 20
-- tags: [jobs, queue]
-- for: 2

-- The lease has to be expired by more than two minutes. This query runs on a replica, and
-- a worker renews its lease on the primary. A renewal that has not replicated yet leaves
-- an old lease_until here that may already be in the past. The grace period absorbs that
-- replication lag, and the clock skew between the worker and the database, so a healthy
-- job is not reported.
-- A claim with no lease or no owner can never expire and never be reaped, so it is
-- reported at once, with no grace period.
-- The header's 'for: 2' gives the reaper one more run to reclaim a dead worker's job before anyone is paged.
SELECT
    job_id,
    kind,
    CASE
        WHEN lease_until IS NULL OR owner IS NULL THEN 'no_lease'
        ELSE 'lease_expired'
    END                     AS problem,
    owner,
    lease_until,
    now() - lease_until     AS overdue_by,
    attempts,
    updated_at
FROM jobs
WHERE state = 'in_progress'
  AND (
        lease_until IS NULL
     OR owner IS NULL
     OR lease_until < now() - interval '2 minutes'
  )
