-- Sources: the listing's share of a run's time, kept apart from the query's. And
-- the status page's incident timeline reads events and actions by incident.
ALTER TABLE runs ADD COLUMN listing_ms {real};
CREATE INDEX events_by_incident ON events (incident_id);
CREATE INDEX incident_actions_by_incident ON incident_actions (incident_id);
