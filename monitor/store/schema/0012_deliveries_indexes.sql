-- Digest joins and held thread replies (alerter.py) look deliveries up by incident,
-- channel and action, and by the root they are threaded under.
CREATE INDEX deliveries_incident ON deliveries (incident_id, channel, action);
CREATE INDEX deliveries_root ON deliveries (root_id);
