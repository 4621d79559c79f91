-- Demo data for schema.sql: a handful of healthy rows, plus violations planted on purpose
-- so that each shipped invariant has something to find. planted.yaml lists them as data,
-- and tests/invariants/test_shipped_invariants.py checks this file against it, so change the three
-- together.
--
-- Every timestamp is relative to now(), so the seed gives the same results whenever it is
-- loaded.
--
-- PLANTED VIOLATIONS (count, then the key of each offending row)
--
--   duplicate_settled_refunds    2 rows, key dispute_id
--     2003   two settled refunds (3004, 3005): a retry that timed out and then paid again
--     2005   three settled refunds (3007, 3009, 3010), plus one failed attempt (3008)
--
--   balance_ledger_drift         3 rows, key account_id
--     1004   balance 40.00, ledger 30.00  (drift +10.00: a goodwill credit with no ledger entry)
--     1005   balance 15.00, no ledger rows at all  (drift +15.00)
--     1006   balance  5.00, ledger 10.00  (drift -5.00: a purchase deducted twice from the balance)
--
--   expired_lease_jobs           2 rows, key job_id
--     4004   in_progress, lease ran out 20 minutes ago  (problem 'lease_expired')
--     4005   in_progress, no owner and no lease          (problem 'no_lease')
--
--   orphaned_receipts            4 rows, key (problem, subject)
--     ('unreferenced',       'receipts/inv-5008.pdf')  the object invoice 5008 should point to
--     ('referenced_by_many', 'receipts/inv-5004.pdf')  shared by invoices 5004 and 5005
--     ('missing_object',     '5006')  its receipt_key names an object the bucket does not have
--     ('missing_object',     '5008')  its receipt_key ends in '.PDF'; keys are case-sensitive
--
-- HEALTHY EDGE CASES that must NOT be reported
--   dispute 2002: one failed and one settled refund; dispute 2004: one pending refund only
--   account 1002: zero balance and no ledger rows; account 1007: entries that sum to zero
--   job 4003: in_progress, lease ran out 30 seconds ago (inside the 2-minute grace)
--   jobs 4001, 4006, 4008: done, failed, abandoned, with leases long past; job 4007: accepted, no lease
--   invoice 5003: no receipt yet (NULL receipt_key)
--   invoice 5007: receipt uploaded 2 hours ago, after the last inventory, so not listed yet

INSERT INTO accounts (account_id, email, credit_balance_eur, created_at) VALUES
    (1001, 'ada@example.com',     25.00, now() - interval '400 days'),
    (1002, 'grace@example.com',    0.00, now() - interval '300 days'),
    (1003, 'linus@example.com',   10.00, now() - interval '200 days'),
    (1004, 'barbara@example.com', 40.00, now() - interval '120 days'),
    (1005, 'edsger@example.com',  15.00, now() - interval '90 days'),
    (1006, 'margaret@example.com', 5.00, now() - interval '60 days'),
    (1007, 'ken@example.com',      0.00, now() - interval '30 days');

INSERT INTO credit_log (account_id, amount_eur, reason, created_at) VALUES
    (1001,  50.00, 'refund as store credit, dispute 2001', now() - interval '40 days'),
    (1001, -25.00, 'spent at checkout, order 88121',        now() - interval '20 days'),
    (1003,  10.00, 'referral bonus',                        now() - interval '150 days'),
    -- 1004: two entries totalling 30.00, but the balance says 40.00
    (1004,  20.00, 'refund as store credit, dispute 2003', now() - interval '15 days'),
    (1004,  10.00, 'delivery delay compensation',          now() - interval '10 days'),
    -- 1005 has no entries, but its balance is 15.00
    -- 1006: the entries total 10.00, but the balance says 5.00
    (1006,  20.00, 'refund as store credit, dispute 2005', now() - interval '12 days'),
    (1006, -10.00, 'spent at checkout, order 90412',        now() - interval '3 days'),
    (1007,  12.50, 'promotion SPRING',                      now() - interval '25 days'),
    (1007, -12.50, 'spent at checkout, order 89007',        now() - interval '24 days');

INSERT INTO disputes (dispute_id, account_id, reason, amount_eur, opened_at, closed_at) VALUES
    (2001, 1001, 'item not received',     50.00, now() - interval '45 days', now() - interval '40 days'),
    (2002, 1003, 'damaged on arrival',    19.90, now() - interval '20 days', now() - interval '17 days'),
    (2003, 1004, 'charged twice',         20.00, now() - interval '16 days', now() - interval '15 days'),
    (2004, 1002, 'wrong size',            34.50, now() - interval '2 days',  NULL),
    (2005, 1006, 'subscription cancelled', 20.00, now() - interval '14 days', now() - interval '12 days'),
    (2006, 1007, 'item not as described', 12.00, now() - interval '1 day',   NULL);

INSERT INTO refunds (refund_id, dispute_id, amount_eur, status, provider_ref, created_at, settled_at) VALUES
    (3001, 2001, 50.00, 'settled', 'rf_9KQ2a1', now() - interval '41 days', now() - interval '40 days'),
    -- 2002: the first attempt failed, the retry settled. That is healthy.
    (3002, 2002, 19.90, 'failed',  'rf_9KQ7c4', now() - interval '18 days', NULL),
    (3003, 2002, 19.90, 'settled', 'rf_9KQ7d8', now() - interval '17 days', now() - interval '17 days' + interval '2 hours'),
    -- 2003: the first request timed out on our side but went through at the provider; the retry paid again
    (3004, 2003, 20.00, 'settled', 'rf_A01b3e', now() - interval '15 days', now() - interval '15 days' + interval '5 minutes'),
    (3005, 2003, 20.00, 'settled', 'rf_A01b9f', now() - interval '15 days' + interval '1 minute', now() - interval '15 days' + interval '6 minutes'),
    -- 2004: still waiting for the provider
    (3006, 2004, 34.50, 'pending', NULL,        now() - interval '1 hour',  NULL),
    -- 2005: three settled refunds, with a failed attempt in between
    (3007, 2005, 20.00, 'settled', 'rf_B77e10', now() - interval '13 days', now() - interval '13 days' + interval '1 hour'),
    (3008, 2005, 20.00, 'failed',  'rf_B77e22', now() - interval '13 days' + interval '2 hours', NULL),
    (3009, 2005, 20.00, 'settled', 'rf_B77e31', now() - interval '13 days' + interval '3 hours', now() - interval '13 days' + interval '4 hours'),
    (3010, 2005, 20.00, 'settled', 'rf_B77e47', now() - interval '12 days', now() - interval '12 days' + interval '1 hour');

INSERT INTO jobs (job_id, kind, state, owner, lease_until, attempts, payload, created_at, updated_at) VALUES
    (4001, 'render_receipt', 'done',        'worker-a', now() - interval '3 days',    1, '{"invoice_id": 5001}', now() - interval '3 days',   now() - interval '3 days'),
    (4002, 'settle_refund',  'in_progress', 'worker-b', now() + interval '5 minutes', 1, '{"refund_id": 3006}',  now() - interval '1 hour',   now() - interval '10 seconds'),
    -- 4003's lease ran out 30 seconds ago. That is inside the grace period, since the renewal may not have replicated yet.
    (4003, 'render_receipt', 'in_progress', 'worker-c', now() - interval '30 seconds', 1, '{"invoice_id": 5007}', now() - interval '2 hours', now() - interval '90 seconds'),
    -- 4004's worker died 20 minutes ago
    (4004, 'export_ledger',  'in_progress', 'worker-d', now() - interval '20 minutes', 2, '{"account_id": 1004}', now() - interval '1 hour',  now() - interval '25 minutes'),
    -- 4005 was claimed by an old worker version that set no owner or lease
    (4005, 'send_receipt',   'in_progress', NULL,       NULL,                          1, '{"invoice_id": 5002}', now() - interval '6 hours', now() - interval '6 hours'),
    (4006, 'settle_refund',  'failed',      'worker-b', now() - interval '2 days',     5, '{"refund_id": 3002}',  now() - interval '18 days', now() - interval '2 days'),
    (4007, 'send_receipt',   'accepted',    NULL,       NULL,                          0, '{"invoice_id": 5003}', now() - interval '5 minutes', now() - interval '5 minutes'),
    (4008, 'export_ledger',  'abandoned',   'worker-a', now() - interval '9 days',     3, '{"account_id": 1005}', now() - interval '10 days', now() - interval '9 days');

INSERT INTO invoices (invoice_id, account_id, amount_eur, issued_at, receipt_key, receipt_uploaded_at) VALUES
    (5001, 1001, 89.00, now() - interval '30 days', 'receipts/inv-5001.pdf', now() - interval '30 days' + interval '1 minute'),
    (5002, 1003, 19.90, now() - interval '21 days', 'receipts/inv-5002.pdf', now() - interval '21 days' + interval '1 minute'),
    -- 5003: the receipt has not been rendered yet
    (5003, 1002, 34.50, now() - interval '10 minutes', NULL, NULL),
    -- 5004 and 5005 point to the same object; 5005's own receipt was never written
    (5004, 1004, 20.00, now() - interval '16 days', 'receipts/inv-5004.pdf', now() - interval '16 days' + interval '1 minute'),
    (5005, 1006, 20.00, now() - interval '14 days', 'receipts/inv-5004.pdf', now() - interval '14 days' + interval '1 minute'),
    -- 5006: uploaded long before the inventory, yet the bucket does not have it
    (5006, 1005, 15.00, now() - interval '9 days',  'receipts/inv-5006.pdf', now() - interval '9 days' + interval '1 minute'),
    -- 5007: uploaded after the inventory was taken, so it is not listed yet. That is healthy.
    (5007, 1007, 12.00, now() - interval '2 hours', 'receipts/inv-5007.pdf', now() - interval '2 hours' + interval '1 minute'),
    -- 5008: the key's case does not match the object that was uploaded
    (5008, 1001, 42.00, now() - interval '6 days',  'receipts/inv-5008.PDF', now() - interval '6 days' + interval '1 minute');

-- The listing comes from yesterday's (UTC) inventory report, because reports cover the
-- day before they arrive.
INSERT INTO receipt_objects (object_key, size_bytes, last_modified, inventory_date)
SELECT object_key, size_bytes, now() - age_of_object, (now() AT TIME ZONE 'UTC' - interval '1 day')::date
FROM (VALUES
    ('receipts/inv-5001.pdf', 48211, interval '30 days'),
    ('receipts/inv-5002.pdf', 47980, interval '21 days'),
    ('receipts/inv-5004.pdf', 48002, interval '16 days'),
    ('receipts/inv-5008.pdf', 51377, interval '6 days')
) AS listing (object_key, size_bytes, age_of_object);
