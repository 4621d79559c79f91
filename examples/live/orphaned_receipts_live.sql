-- description: Receipt PDFs in the bucket and invoices match one to one, checked against the bucket itself, listed live at each run. Every object belongs to exactly one invoice, and every invoice's receipt_key names an object that exists.
-- severity: warning
-- owner: "@billing-oncall"
-- runbook: https://example.com/runbooks/orphaned-receipts
-- schedule: every 1h
-- timeout: 2m
-- key: [problem, subject]
-- sample: 50
-- tags: [receipts, storage]
-- source:
--   receipt_objects:
--     s3: "s3://receipts-prod/receipts/"
--     columns: [key, size, last_modified]
--     min_age: 10m
--     max_objects: 1000000
--     timeout: 20m

-- The second form of invariants/orphaned_receipts.sql: the same three problems, but
-- receipt_objects is the bucket's listing taken by invmon just before the query (a CTE it
-- prepends, which wins over the receipt_objects table of the inventory form), so no loader
-- and no day-old inventory. Keys are whole object keys, as receipt_key stores them.
--
-- A listing and a replica are not one snapshot, so both ends get a grace:
--   unreferenced    an object uploaded just before the listing whose invoice row the
--                   replica has not replayed yet would be reported; `min_age: 10m` drops
--                   objects younger than ten minutes from the listing (more than the
--                   daemon's max_replica_lag, 5m by default, plus an upload's commit).
--   missing_object  an invoice whose object was dropped by min_age, or uploaded after the
--                   listing, would be reported; only invoices whose receipt was uploaded
--                   more than 15 minutes before the query are judged (min_age plus five
--                   minutes for the listing itself and clock skew between the store and
--                   the database).
WITH shared_keys AS (
    SELECT receipt_key, array_agg(invoice_id ORDER BY invoice_id) AS invoice_ids
    FROM invoices
    WHERE receipt_key IS NOT NULL
    GROUP BY receipt_key
    HAVING count(*) > 1
)
SELECT
    'unreferenced'              AS problem,
    o.key                       AS subject,
    o.key                       AS object_key,
    '{}'::bigint[]              AS invoice_ids,
    o.last_modified
FROM receipt_objects AS o
WHERE NOT EXISTS (SELECT 1 FROM invoices AS i WHERE i.receipt_key = o.key)

UNION ALL

SELECT
    'referenced_by_many',
    s.receipt_key,
    s.receipt_key,
    s.invoice_ids,
    o.last_modified
FROM shared_keys AS s
LEFT JOIN receipt_objects AS o ON o.key = s.receipt_key

UNION ALL

SELECT
    'missing_object',
    i.invoice_id::text,
    i.receipt_key,
    ARRAY[i.invoice_id],
    NULL::timestamptz
FROM invoices AS i
WHERE i.receipt_key IS NOT NULL
  AND i.receipt_uploaded_at < now() - interval '15 minutes'
  AND NOT EXISTS (SELECT 1 FROM receipt_objects AS o WHERE o.key = i.receipt_key)
