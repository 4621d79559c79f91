-- description: Each account's cached credit balance equals the sum of its credit_log entries. A difference means credit was granted or spent without a ledger entry, or the other way round.
-- severity: critical
-- owner: "@billing-oncall"
-- runbook: https://example.com/runbooks/credit-balance-drift
-- schedule: every 15m
-- timeout: 60s
-- key: [account_id]
-- sample: 20
-- tags: [credits, money, ledger]

-- The ledger is summed first and then LEFT JOINed, so an account with no ledger rows gets
-- 0 as its ledger total instead of vanishing from the join. Such an account is healthy
-- with a zero balance and drifted with any other balance.
-- The balance and its ledger entry are written in one transaction, and this query reads
-- one snapshot, so a write in flight on the primary cannot show up here as drift.
WITH ledger AS (
    SELECT account_id, sum(amount_eur) AS ledger_eur, count(*) AS entries
    FROM credit_log
    GROUP BY account_id
)
SELECT
    a.account_id,
    a.credit_balance_eur                               AS balance_eur,
    coalesce(l.ledger_eur, 0)                          AS ledger_eur,
    a.credit_balance_eur - coalesce(l.ledger_eur, 0)   AS drift_eur,
    coalesce(l.entries, 0)                             AS ledger_entries
FROM accounts AS a
LEFT JOIN ledger AS l ON l.account_id = a.account_id
WHERE a.credit_balance_eur <> coalesce(l.ledger_eur, 0)
