-- The ledger's SENT deliveries, counted as rows become SENT and as they are pruned
-- (alerts/ledger.py): the metric read every alerts turn counted every delivery ever made.
-- The other states are counted where they are (deliveries_due), few by nature.
CREATE TABLE delivery_counts (
    state TEXT PRIMARY KEY,
    n {bigint} NOT NULL
);
INSERT INTO delivery_counts (state, n)
    SELECT 'SENT', count(*) FROM deliveries WHERE state = 'SENT';
-- Pruning finished deliveries asks which incidents' threads each one roots, and removing
-- one checks alert_roots' reference to it (PostgreSQL's foreign key).
CREATE INDEX alert_roots_by_delivery ON alert_roots (delivery_id);
