-- description: Receipt PDFs in the bucket and invoices match one to one. Every object belongs to exactly one invoice, and every invoice's receipt_key names an object that exists.
-- severity: warning
-- owner: "@billing-oncall"
-- runbook: https://example.com/runbooks/orphaned-receipts
-- schedule: "0 7 * * *"
-- timeout: 2m
-- key: [problem, subject]
-- sample: 50
-- tags: [receipts, storage]

-- One row per problem. subject is the object key for problems about an object, or the
-- invoice id as text for problems about an invoice, so (problem, subject) is unique and
-- never NULL:
--   unreferenced        an object in the bucket that no invoice points to
--   referenced_by_many  one receipt_key shared by several invoices, whether or not the
--                       object exists; one customer would see another's receipt
--   missing_object      an invoice whose receipt_key is not in the bucket listing
-- receipt_objects is a copy of the bucket's daily inventory, so it is older than the
-- invoices. An invoice counts as missing its object only if its receipt was uploaded
-- before that inventory was taken. The cutoff is the report date's midnight UTC, less one
-- hour, because an inventory can leave out objects written just before it was taken.
-- Until an inventory has been loaded, max() is NULL and no invoice is reported missing.
-- MATERIALIZED computes the cutoff once: inlined, the planner can put it inside a nested loop
-- and scan the whole listing again for every candidate invoice (8 s instead of 1 s on 300k
-- invoices in bench/).
WITH inventory AS MATERIALIZED (
    SELECT (max(inventory_date)::timestamp AT TIME ZONE 'UTC') - interval '1 hour' AS complete_before
    FROM receipt_objects
),
shared_keys AS (
    SELECT receipt_key, array_agg(invoice_id ORDER BY invoice_id) AS invoice_ids
    FROM invoices
    WHERE receipt_key IS NOT NULL
    GROUP BY receipt_key
    HAVING count(*) > 1
)
SELECT
    'unreferenced'              AS problem,
    o.object_key                AS subject,
    o.object_key,
    '{}'::bigint[]              AS invoice_ids,
    o.last_modified
FROM receipt_objects AS o
WHERE NOT EXISTS (SELECT 1 FROM invoices AS i WHERE i.receipt_key = o.object_key)

UNION ALL

SELECT
    'referenced_by_many',
    s.receipt_key,
    s.receipt_key,
    s.invoice_ids,
    o.last_modified
FROM shared_keys AS s
LEFT JOIN receipt_objects AS o ON o.object_key = s.receipt_key

UNION ALL

SELECT
    'missing_object',
    i.invoice_id::text,
    i.receipt_key,
    ARRAY[i.invoice_id],
    NULL::timestamptz
FROM invoices AS i
CROSS JOIN inventory
WHERE i.receipt_key IS NOT NULL
  AND i.receipt_uploaded_at < inventory.complete_before
  AND NOT EXISTS (SELECT 1 FROM receipt_objects AS o WHERE o.object_key = i.receipt_key)
