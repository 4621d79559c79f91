-- description: Every dispute has at most one settled refund. A second settled refund means a retry paid the customer twice.
-- severity: critical
-- owner: "@payments-oncall"
-- runbook: https://example.com/runbooks/duplicate-refunds
-- schedule: every 15m
-- timeout: 30s
-- key: [dispute_id]
-- sample: 20
-- tags: [refunds, money]

-- One row per dispute that was paid back more than once. Failed and pending attempts are
-- ignored: a retry after a failure is normal, and only settled refunds move money.
SELECT
    r.dispute_id,
    d.account_id,
    count(*)                                             AS settled_refunds,
    d.amount_eur                                         AS disputed_eur,
    sum(r.amount_eur)                                    AS total_eur,
    array_agg(r.refund_id ORDER BY r.refund_id)          AS refund_ids,
    array_agg(r.provider_ref ORDER BY r.refund_id)       AS provider_refs,
    min(r.settled_at)                                    AS first_settled_at,
    max(r.settled_at)                                    AS last_settled_at
FROM refunds AS r
JOIN disputes AS d ON d.dispute_id = r.dispute_id
WHERE r.status = 'settled'
GROUP BY r.dispute_id, d.account_id, d.amount_eur
HAVING count(*) > 1
