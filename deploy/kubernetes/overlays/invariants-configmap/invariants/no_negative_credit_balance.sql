-- description: No account's cached credit balance is negative; credit can be spent, not overdrawn.
-- severity: warning
-- owner: "@billing-oncall"
-- key: [account_id]

SELECT account_id, credit_balance_eur
FROM accounts
WHERE credit_balance_eur < 0
