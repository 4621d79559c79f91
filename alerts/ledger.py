"""The delivery ledger: one row per logical Slack effect (a message, an update, a file).

Each row's idempotency key comes from what is being delivered (invariant, incident, event,
action, channel), never from an attempt, and a UNIQUE index on it makes planning the same
event twice harmless. Rows move through four states:

    PENDING  --claim-->  UNKNOWN (leased: the call is in flight, its fate not yet known)
    UNKNOWN  --answer--> SENT | PENDING (certainly not done: retry later) | FAILED
    UNKNOWN  (lease expired: the worker died, or the call was ambiguous)
             --reconcile with Slack--> SENT (found it) | PENDING (Slack shows it absent)

A row is marked UNKNOWN *before* its call is made, so a worker killed mid-call leaves
exactly the state that forces a look at Slack before any retry.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from alerts.deliveries import COLUMNS, Delivery, DeliveryState, delivery_of
from alerts.plans import Spec, delivery_key
from alerts.thread_batching import LastReply, is_churn
from monitor.clock import parse_stamp, stamp
from monitor.store.records import StoredEvent
from monitor.store.storage import Storage, Tx

log = logging.getLogger("invmon.alerts")


# The one statement of when a row could be taken, leaving out time and leases: UNKNOWN
# (to be reconciled), or PENDING with its root message sent and no earlier row of its thread
# still pending or in doubt (a thread's messages go out in order). `claim` adds "due and
# unleased"; `next_due` asks when the earliest such row becomes due.
# Actions that are chat.postMessage calls, limited by Slack per channel; the first three
# are top-level messages, the others replies in a thread.
_TOP_LEVEL = "('post_root', 'post_digest', 'post_summary')"


_POSTS = "('post_root', 'post_digest', 'post_summary', 'post_reply', 'post_detail')"


POST_ACTIONS = frozenset({"post_root", "post_digest", "post_summary", "post_reply", "post_detail"})


_THREADED = frozenset({"post_reply", "post_detail", "upload_csv"})  # kept in order per thread


_READY = (
    "(d.state = 'UNKNOWN' OR (d.state = 'PENDING' AND ("
    "   d.root_id IS NULL OR EXISTS (SELECT 1 FROM deliveries r"
    "     WHERE r.id = d.root_id AND r.state = 'SENT'))"
    "   AND NOT EXISTS (SELECT 1 FROM deliveries e WHERE e.root_id = d.root_id"
    "     AND d.root_id IS NOT NULL AND e.id < d.id"
    "     AND e.action IN ('post_reply', 'post_detail', 'upload_csv')"
    "     AND e.state IN ('PENDING', 'UNKNOWN'))))"
)


class Ledger:
    """Owns the `deliveries` and `alert_roots` tables."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    # --- planning ------------------------------------------------------------------------

    def enqueue(
        self,
        tx: Tx,
        event: StoredEvent | None,
        invariant: str,
        incident_id: int | None,
        channel: str,
        specs: Sequence[Spec],
        now: datetime,
    ) -> list[int]:
        """Insert the rows (once: the key is unique) and link roots to their incident."""
        created = []
        for spec in specs:
            root_id = None
            if spec.needs_root:
                assert incident_id is not None, "only an incident's messages have a root"
                root_id = self._root_id(tx, incident_id, channel)
            if spec.needs_root and root_id is None:
                assert incident_id is not None
                # An event about an incident whose opening was never announced here (Slack
                # was configured later, or the route changed): announce it first.
                opening = Spec(
                    "post_root",
                    delivery_key(invariant, incident_id, channel, "late-root"),
                    False,
                    {"kind": "opened"},
                )
                self.enqueue(tx, None, invariant, incident_id, channel, [opening], now)
                root_id = self._root_id(tx, incident_id, channel)
            if root_id is not None and spec.not_before is None and spec.action in _THREADED:
                self._release_held(tx, root_id, now)
            # A thread whose root failed for good can never take this; say so now rather
            # than leave a row waiting forever.
            root_failed = root_id is not None and tx.rows(
                "SELECT 1 FROM deliveries WHERE id = ? AND state = 'FAILED'", (root_id,)
            )
            inserted = tx.rows(
                "INSERT INTO deliveries (idem_key, event_id, incident_id, invariant, channel,"
                " action, root_id, state, last_error, next_attempt_at, payload_json,"
                " created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (idem_key) DO NOTHING RETURNING id",
                (
                    spec.key,
                    event.id if event else None,
                    incident_id,
                    invariant,
                    channel,
                    spec.action,
                    root_id,
                    "FAILED" if root_failed else "PENDING",
                    "its root message failed" if root_failed else None,
                    stamp(spec.not_before or now),
                    json.dumps(spec.payload),
                    stamp(now),
                    stamp(now),
                ),
            )
            if not inserted:
                continue
            delivery_id = int(inserted[0][0])
            created.append(delivery_id)
            if spec.action in ("post_root", "post_digest"):
                tx.run(
                    "INSERT INTO alert_roots (incident_id, channel, delivery_id) VALUES (?, ?, ?)"
                    " ON CONFLICT (incident_id, channel) DO UPDATE"
                    " SET delivery_id = excluded.delivery_id",
                    (incident_id, channel, delivery_id),
                )
        return created

    def _release_held(self, tx: Tx, root_id: int, now: datetime) -> None:
        """A held (batched) reply goes before the next message of its thread, which the
        thread's ordering would otherwise keep waiting behind it for up to an interval."""
        found = tx.rows(
            "SELECT id, payload_json FROM deliveries WHERE root_id = ? AND state = 'PENDING'"
            " AND action = 'post_reply' AND attempts = 0 AND next_attempt_at > ?",
            (root_id, stamp(now)),
        )
        for delivery_id, payload in found:
            # Only holds: a row waiting out a backoff or Retry-After keeps waiting.
            if json.loads(payload).get("held"):
                tx.run(
                    "UPDATE deliveries SET next_attempt_at = ? WHERE id = ? AND state = 'PENDING'",
                    (stamp(now), delivery_id),
                )

    def last_churn_reply(self, tx: Tx, incident_id: int, channel: str) -> LastReply | None:
        """The latest reply about rows appearing and going in the incident's thread here.
        Looked for among its last replies only: past those, it is long enough ago."""
        found = tx.rows(
            "SELECT id, state, updated_at, payload_json FROM deliveries"
            " WHERE incident_id = ? AND channel = ? AND action = 'post_reply'"
            " ORDER BY id DESC LIMIT 20",
            (incident_id, channel),
        )
        for delivery_id, state, updated_at, payload in found:
            if is_churn(json.loads(payload)):
                return LastReply(int(delivery_id), str(state), parse_stamp(str(updated_at)))
        return None

    def merge_pending(
        self,
        tx: Tx,
        delivery_id: int,
        merge: Callable[[dict[str, Any]], dict[str, Any]],
        now: datetime,
    ) -> bool:
        """Rewrite a row's payload while it is certainly unsent (PENDING); False when a
        worker took it meanwhile. The conditional UPDATE takes the row's lock first, so the
        payload merged is the latest committed one, whoever else merges or claims."""
        locked = tx.rows(
            "UPDATE deliveries SET updated_at = ? WHERE id = ? AND state = 'PENDING'"
            " RETURNING payload_json",
            (stamp(now), delivery_id),
        )
        if not locked:
            return False
        tx.run(
            "UPDATE deliveries SET payload_json = ? WHERE id = ?",
            (json.dumps(merge(json.loads(locked[0][0]))), delivery_id),
        )
        return True

    def recent_digest(self, tx: Tx, channel: str, since: datetime) -> int | None:
        """The channel's latest digest planned at or after `since`, unless it failed."""
        found = tx.rows(
            "SELECT id FROM deliveries WHERE channel = ? AND action = 'post_digest'"
            " AND state <> 'FAILED' AND created_at >= ? ORDER BY id DESC LIMIT 1",
            (channel, stamp(since)),
        )
        return int(found[0][0]) if found else None

    def join_digest(
        self, tx: Tx, digest_id: int, channel: str, incident_ids: Sequence[int]
    ) -> list[int]:
        """Add incidents to a digest: listed in its payload (which every rendering of it
        reads), their roots linked to it (their messages go in its thread). Returns the
        incidents it lists now. Under the row's lock: two planners joining at once both
        land."""
        [(payload,)] = tx.rows(
            f"SELECT payload_json FROM deliveries WHERE id = ?{tx.for_update}", (digest_id,)
        )
        document = json.loads(payload)
        listed = sorted({*(int(i) for i in document.get("incidents", [])), *incident_ids})
        document["incidents"] = listed
        tx.run(
            "UPDATE deliveries SET payload_json = ? WHERE id = ?", (json.dumps(document), digest_id)
        )
        for incident_id in incident_ids:
            self.link_root(tx, incident_id, channel, digest_id)
        return listed

    def link_root(self, tx: Tx, incident_id: int, channel: str, delivery_id: int) -> None:
        tx.run(
            "INSERT INTO alert_roots (incident_id, channel, delivery_id) VALUES (?, ?, ?)"
            " ON CONFLICT (incident_id, channel) DO UPDATE SET delivery_id = excluded.delivery_id",
            (incident_id, channel, delivery_id),
        )

    def root_channels(self, tx: Tx, incident_id: int) -> list[str]:
        """Every channel in which the incident has a root message."""
        found = tx.rows("SELECT channel FROM alert_roots WHERE incident_id = ?", (incident_id,))
        return [str(channel) for (channel,) in found]

    def _root_id(self, tx: Tx, incident_id: int, channel: str) -> int | None:
        found = tx.rows(
            "SELECT delivery_id FROM alert_roots WHERE incident_id = ? AND channel = ?",
            (incident_id, channel),
        )
        return int(found[0][0]) if found else None

    def detail_of(self, incident_id: int, digest_id: int) -> Delivery | None:
        """The incident's own message inside a digest's thread."""
        with self.storage.transaction() as tx:
            found = tx.rows(
                "SELECT id FROM deliveries WHERE incident_id = ? AND root_id = ?"
                " AND action = 'post_detail' AND state = 'SENT'",
                (incident_id, digest_id),
            )
            return self._get(tx, int(found[0][0])) if found else None

    def root_of(self, incident_id: int, channel: str) -> Delivery | None:
        with self.storage.transaction() as tx:
            root_id = self._root_id(tx, incident_id, channel)
            if root_id is None:
                return None
            return self._get(tx, root_id)

    # --- claiming and recording ----------------------------------------------------------

    def claim(self, owner: str, now: datetime, lease: timedelta) -> tuple[Delivery, str] | None:
        """Take one due row under a lease. Returns it with the state it had before."""
        with self.storage.transaction() as tx:
            candidates = tx.rows(
                "SELECT d.id, d.state FROM deliveries d"
                " WHERE d.next_attempt_at <= ? AND (d.lease_until IS NULL OR d.lease_until < ?)"
                # Top-level posts first: under a rate limit, every incident is in the
                # channel (with its own root or in a digest) before the threads fill in.
                f" AND {_READY} ORDER BY CASE WHEN d.action IN {_TOP_LEVEL} THEN 0 ELSE 1 END,"
                " d.id LIMIT 5",
                (stamp(now), stamp(now)),
            )
            for delivery_id, state in candidates:
                # The conditional UPDATE is the claim: of two workers, one matches the row.
                claimed = tx.rows(
                    "UPDATE deliveries SET lease_owner = ?, lease_until = ?,"
                    " attempts = attempts + 1, updated_at = ?,"
                    " unknown_since = CASE WHEN state = 'PENDING' THEN ? ELSE unknown_since END,"
                    " state = 'UNKNOWN'"
                    " WHERE id = ? AND state = ? AND (lease_until IS NULL OR lease_until < ?)"
                    " RETURNING id",
                    (
                        owner,
                        stamp(now + lease),
                        stamp(now),
                        stamp(now),
                        delivery_id,
                        state,
                        stamp(now),
                    ),
                )
                if claimed:
                    return self._get(tx, delivery_id), str(state)
        return None

    def sent(
        self,
        delivery: Delivery,
        now: datetime,
        channel: str | None = None,
        slack_ts: str | None = None,
    ) -> None:
        self._finish(delivery, now, "SENT", None, now, channel=channel, slack_ts=slack_ts)

    def hold_posts(self, channel: str, until: datetime) -> int:
        """Slack rate-limited posting to `channel`: no pending post to it is tried before
        `until` (else each row would draw its own 429). Returns how many were held."""
        with self.storage.transaction() as tx:
            held = tx.rows(
                "UPDATE deliveries SET next_attempt_at = ?"
                f" WHERE channel = ? AND state = 'PENDING' AND action IN {_POSTS}"
                " AND next_attempt_at < ? RETURNING id",
                (stamp(until), channel, stamp(until)),
            )
        return len(held)

    def retry_at(self, delivery: Delivery, now: datetime, when: datetime, error: str) -> None:
        """Certainly not done: back to PENDING, due at `when`."""
        self._finish(delivery, now, "PENDING", error, when, clear_unknown=True)

    def unknown(
        self,
        delivery: Delivery,
        now: datetime,
        when: datetime,
        error: str,
        since: datetime | None = None,
    ) -> None:
        """Fate unknown: stays UNKNOWN, to be reconciled from `when` on."""
        self._finish(delivery, now, "UNKNOWN", error, when, unknown_since=since or now)

    def failed(self, delivery: Delivery, now: datetime, error: str) -> None:
        self._finish(delivery, now, "FAILED", error, now)
        if delivery.action in ("post_root", "post_digest"):
            # Nothing can go into a thread that does not exist; say why instead of waiting.
            with self.storage.transaction() as tx:
                tx.run(
                    "UPDATE deliveries SET state = 'FAILED', last_error = ?, updated_at = ?"
                    " WHERE root_id = ? AND state = 'PENDING'",
                    (f"its root message failed: {error}", stamp(now), delivery.id),
                )

    def record_file(self, delivery: Delivery, file_id: str | None) -> bool:
        with self.storage.transaction() as tx:
            return bool(
                tx.rows(
                    "UPDATE deliveries SET slack_file_id = ? WHERE id = ? AND lease_owner = ?"
                    " RETURNING id",
                    (file_id, delivery.id, delivery.lease_owner),
                )
            )

    def renew(self, delivery: Delivery, until: datetime) -> bool:
        """Extend the lease while its holder is still working; False when it was lost."""
        with self.storage.transaction() as tx:
            return bool(
                tx.rows(
                    "UPDATE deliveries SET lease_until = ? WHERE id = ? AND lease_owner = ?"
                    " RETURNING id",
                    (stamp(until), delivery.id, delivery.lease_owner),
                )
            )

    def still_held(self, delivery: Delivery, at_least_until: datetime, extend_to: datetime) -> bool:
        """Asked immediately before a Slack call that creates something: does the claimer
        still hold the row's lease, running at least until `at_least_until`? If so the
        lease is extended to `extend_to` in the same statement (one round trip), so the
        call starts with a whole lease ahead of it. False when the row was taken over,
        finished by another worker, or its lease is about to run out: then the caller must
        not send (Slack has no idempotency key; whoever holds the row now decides)."""
        with self.storage.transaction() as tx:
            return bool(
                tx.rows(
                    "UPDATE deliveries SET lease_until = ?"
                    " WHERE id = ? AND lease_owner = ? AND state = 'UNKNOWN'"
                    " AND lease_until >= ? RETURNING id",
                    (stamp(extend_to), delivery.id, delivery.lease_owner, stamp(at_least_until)),
                )
            )

    def _finish(
        self,
        delivery: Delivery,
        now: datetime,
        state: DeliveryState,
        error: str | None,
        next_attempt: datetime,
        channel: str | None = None,
        slack_ts: str | None = None,
        unknown_since: datetime | None = None,
        clear_unknown: bool = False,
    ) -> None:
        # Fenced by the lease: a worker that lost its lease (another one took the row over)
        # must not overwrite what the new holder found or did.
        with self.storage.transaction() as tx:
            written = tx.rows(
                "UPDATE deliveries SET state = ?, last_error = ?, next_attempt_at = ?,"
                " lease_owner = NULL, lease_until = NULL, updated_at = ?,"
                " slack_channel = COALESCE(?, slack_channel), slack_ts = COALESCE(?, slack_ts),"
                " unknown_since = CASE WHEN ? THEN NULL ELSE COALESCE(?, unknown_since) END"
                " WHERE id = ? AND lease_owner = ? RETURNING id",
                (
                    state,
                    error,
                    stamp(next_attempt),
                    stamp(now),
                    channel,
                    slack_ts,
                    clear_unknown,
                    stamp(unknown_since) if unknown_since else None,
                    delivery.id,
                    delivery.lease_owner,
                ),
            )
        if not written:
            log.warning(
                "lost the lease on delivery %s before recording %s; the new holder's result stands",
                delivery.id,
                state,
            )

    # --- reading -------------------------------------------------------------------------

    def get(self, delivery_id: int) -> Delivery:
        with self.storage.transaction() as tx:
            return self._get(tx, delivery_id)

    def _get(self, tx: Tx, delivery_id: int) -> Delivery:
        [row] = tx.rows(f"SELECT {', '.join(COLUMNS)} FROM deliveries WHERE id = ?", (delivery_id,))
        return delivery_of(row)

    def all(self) -> list[Delivery]:
        with self.storage.transaction() as tx:
            rows = tx.rows(f"SELECT {', '.join(COLUMNS)} FROM deliveries ORDER BY id")
        return [delivery_of(r) for r in rows]

    def counts(self) -> dict[str, int]:
        with self.storage.transaction() as tx:
            rows = tx.rows("SELECT state, count(*) FROM deliveries GROUP BY state")
        return {str(state): int(n) for state, n in rows}

    def next_due(self) -> datetime | None:
        """When the earliest row a worker could claim becomes due (its lease included)."""
        with self.storage.transaction() as tx:
            rows = tx.rows(
                "SELECT min(CASE WHEN d.lease_until > d.next_attempt_at THEN d.lease_until"
                f" ELSE d.next_attempt_at END) FROM deliveries d WHERE {_READY}"
            )
        return parse_stamp(rows[0][0]) if rows and rows[0][0] else None
