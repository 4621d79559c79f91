-- Planning asks, per channel, when an opening was last planned there (alerts/bursts.py:
-- a burst still arriving is held so it becomes one digest); the ledger is read by the
-- time its rows were planned, so only the recent ones are.
CREATE INDEX deliveries_created ON deliveries (created_at);
