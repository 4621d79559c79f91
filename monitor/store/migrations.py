"""The state store's schema, as append-only migrations: a released migration is never
edited, a new one is added. Written in the SQL both SQLite and PostgreSQL understand, with
the few type names that differ passed in."""

from __future__ import annotations


def migrations(pk: str, bigint: str, real: str) -> list[str]:
    """Append-only: a released migration is never edited, a new one is added."""
    return [
        f"""
        CREATE TABLE runs (
            id {pk},
            invariant TEXT NOT NULL,
            started_at TEXT NOT NULL,
            finished_at TEXT NOT NULL,
            status TEXT NOT NULL,
            count {bigint},
            error TEXT,
            replica_lag_seconds {real},
            duration_ms {real},
            columns_json TEXT NOT NULL DEFAULT '[]',
            sample_json TEXT NOT NULL DEFAULT '[]'
        );
        CREATE INDEX runs_by_invariant ON runs (invariant, id);
        CREATE TABLE invariant_state (
            invariant TEXT PRIMARY KEY,
            consecutive_violations INTEGER NOT NULL DEFAULT 0,
            consecutive_errors INTEGER NOT NULL DEFAULT 0,
            last_run_id {bigint},
            updated_at TEXT NOT NULL
        );
        CREATE TABLE incidents (
            id {pk},
            invariant TEXT NOT NULL,
            kind TEXT NOT NULL,
            opened_at TEXT NOT NULL,
            resolved_at TEXT,
            first_count {bigint},
            last_count {bigint},
            last_seen_at TEXT NOT NULL,
            detail TEXT
        );
        CREATE UNIQUE INDEX incidents_one_open ON incidents (invariant, kind)
            WHERE resolved_at IS NULL;
        CREATE TABLE incident_keys (
            incident_id {bigint} NOT NULL REFERENCES incidents (id),
            offending_key TEXT NOT NULL,
            row_json TEXT,
            first_seen_at TEXT NOT NULL,
            last_seen_at TEXT NOT NULL,
            gone_at TEXT,
            PRIMARY KEY (incident_id, offending_key)
        );
        CREATE TABLE events (
            id {pk},
            incident_id {bigint} NOT NULL REFERENCES incidents (id),
            invariant TEXT NOT NULL,
            kind TEXT NOT NULL,
            created_at TEXT NOT NULL,
            run_id {bigint},
            payload_json TEXT NOT NULL,
            dispatched_at TEXT
        );
        CREATE INDEX events_pending ON events (id) WHERE dispatched_at IS NULL;
        """,
        # The delivery ledger (alerts/ledger.py): one row per logical message or file.
        f"""
        CREATE TABLE deliveries (
            id {pk},
            idem_key TEXT NOT NULL,
            event_id {bigint},
            incident_id {bigint},
            invariant TEXT NOT NULL,
            channel TEXT NOT NULL,
            action TEXT NOT NULL,
            root_id {bigint},
            state TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            next_attempt_at TEXT NOT NULL,
            lease_owner TEXT,
            lease_until TEXT,
            unknown_since TEXT,
            slack_channel TEXT,
            slack_ts TEXT,
            slack_file_id TEXT,
            payload_json TEXT NOT NULL DEFAULT '{{}}',
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE UNIQUE INDEX deliveries_idem_key ON deliveries (idem_key);
        CREATE INDEX deliveries_due ON deliveries (state, next_attempt_at);
        CREATE TABLE alert_roots (
            incident_id {bigint} NOT NULL,
            channel TEXT NOT NULL,
            delivery_id {bigint} NOT NULL REFERENCES deliveries (id),
            PRIMARY KEY (incident_id, channel)
        );
        """,
        # Acknowledgement and snooze (alerts/interactions.py and `invmon ack`).
        f"""
        ALTER TABLE incidents ADD COLUMN acked_by TEXT;
        ALTER TABLE incidents ADD COLUMN acked_by_name TEXT;
        ALTER TABLE incidents ADD COLUMN acked_at TEXT;
        ALTER TABLE incidents ADD COLUMN ack_mode TEXT;
        ALTER TABLE incidents ADD COLUMN snoozed_until TEXT;
        ALTER TABLE incidents ADD COLUMN snoozed_by TEXT;
        CREATE TABLE incident_actions (
            id {pk},
            incident_id {bigint} NOT NULL REFERENCES incidents (id),
            action TEXT NOT NULL,
            actor TEXT NOT NULL,
            actor_name TEXT,
            detail TEXT,
            source TEXT NOT NULL,
            at TEXT NOT NULL
        );
        """,
        # Signed Slack requests already seen: replays are refused across restarts too.
        """
        CREATE TABLE slack_requests (
            signature TEXT PRIMARY KEY,
            seen_at TEXT NOT NULL
        );
        """,
        # What an incident's messages need after its file is gone, and the rows that opened
        # it exactly as they were (duplicates kept): the CSV is built from these.
        """
        ALTER TABLE incidents ADD COLUMN context_json TEXT;
        ALTER TABLE incidents ADD COLUMN opening_json TEXT;
        """,
        # Values invmon makes once and keeps: the key that masks personal data in rows.
        """
        CREATE TABLE meta (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        """,
        # The monitored database (target) each run ran on and each incident is about; what
        # was stored before targets existed was all the one target, `default`.
        """
        ALTER TABLE runs ADD COLUMN target TEXT NOT NULL DEFAULT 'default';
        ALTER TABLE incidents ADD COLUMN target TEXT NOT NULL DEFAULT 'default';
        """,
        # Several daemons on one store (claims.py): each slot of an invariant is claimed by
        # one daemon and stored as one run at most; the daemons keep a heartbeat row.
        """
        CREATE TABLE slot_claims (
            invariant TEXT NOT NULL,
            slot TEXT NOT NULL,
            owner TEXT NOT NULL,
            claimed_at TEXT NOT NULL,
            lease_until TEXT NOT NULL,
            finished_at TEXT,
            outcome TEXT,
            takeovers INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (invariant, slot)
        );
        CREATE INDEX slot_claims_open ON slot_claims (lease_until) WHERE finished_at IS NULL;
        CREATE TABLE daemons (
            id TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started_at TEXT NOT NULL,
            seen_at TEXT NOT NULL
        );
        ALTER TABLE runs ADD COLUMN slot TEXT;
        CREATE UNIQUE INDEX runs_one_per_slot ON runs (invariant, slot) WHERE slot IS NOT NULL;
        """,
        # Sources: the listing's share of a run's time, kept apart from the query's. And
        # the status page's incident timeline reads events and actions by incident.
        f"""
        ALTER TABLE runs ADD COLUMN listing_ms {real};
        CREATE INDEX events_by_incident ON events (incident_id);
        CREATE INDEX incident_actions_by_incident ON incident_actions (incident_id);
        """,
        # Quarantine (quarantine.py): invariants held out of the schedule on every daemon
        # sharing the store, each at the version of its file that overran its timeout.
        """
        CREATE TABLE quarantines (
            invariant TEXT PRIMARY KEY,
            version TEXT NOT NULL,
            reason TEXT NOT NULL,
            since TEXT NOT NULL
        );
        """,
        # How each closed incident ended (incidents.py's EndState): `resolved`, or `retired`
        # when its invariant's file was removed while it was open. resolved_at stays the
        # time it closed, either way. Closed before this was kept: resolved, except those a
        # removal closed, which said so in their closing event's reason.
        """
        ALTER TABLE incidents ADD COLUMN ended_as TEXT;
        UPDATE incidents SET ended_as = 'resolved' WHERE resolved_at IS NOT NULL;
        UPDATE incidents SET ended_as = 'retired' WHERE resolved_at IS NOT NULL AND id IN (
            SELECT incident_id FROM events
            WHERE payload_json LIKE '%"reason": "the invariant was removed"%'
        );
        """,
        # Digest joins and held thread replies (alerter.py) look deliveries up by incident,
        # channel and action, and by the root they are threaded under.
        """
        CREATE INDEX deliveries_incident ON deliveries (incident_id, channel, action);
        CREATE INDEX deliveries_root ON deliveries (root_id);
        """,
    ]
