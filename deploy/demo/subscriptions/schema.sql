-- The demo's second database: a subscriptions service, separate from payments, with its
-- own replica and owners. A customer may hold one active subscription per product; the
-- signup endpoint checks that before it inserts, which a retried request can race past.
-- There is no partial unique index on purpose: the demo shows the monitor finding what
-- such an index would have refused.

CREATE TABLE customers (
    customer_id bigint PRIMARY KEY,
    email       text NOT NULL UNIQUE
);

CREATE TABLE subscriptions (
    subscription_id bigint PRIMARY KEY,
    customer_id     bigint NOT NULL REFERENCES customers,
    product         text NOT NULL,
    status          text NOT NULL CHECK (status IN ('active', 'cancelled')),
    started_at      timestamptz NOT NULL
);
