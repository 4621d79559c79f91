-- Planted: customers 7002 and 7004 each hold two active subscriptions to one product
-- (a signup retried after a timeout). Customer 7003 re-subscribed after cancelling,
-- which is fine and must not be reported.
INSERT INTO customers (customer_id, email) VALUES
    (7001, 'ada@example.com'),
    (7002, 'grace@example.com'),
    (7003, 'edsger@example.com'),
    (7004, 'barbara@example.com');

INSERT INTO subscriptions (subscription_id, customer_id, product, status, started_at) VALUES
    (8001, 7001, 'pro',  'active',    '2026-10-01 09:00+00'),
    (8002, 7002, 'pro',  'active',    '2026-10-02 10:00+00'),
    (8003, 7002, 'pro',  'active',    '2026-10-02 10:00:04+00'),
    (8004, 7003, 'team', 'cancelled', '2026-09-01 08:00+00'),
    (8005, 7003, 'team', 'active',    '2026-10-05 08:00+00'),
    (8006, 7004, 'team', 'active',    '2026-10-07 12:00+00'),
    (8007, 7004, 'team', 'active',    '2026-10-07 12:00:09+00');
