"""The delivery ledger's rows from planning's side: each written once (its key is unique),
a late thread's root announced first, a held reply released before the next message of its
thread, a reply not sent yet merged into, a digest joined. alerts/ledger.py takes them
from there. Not pure: reads and writes the state store, in the planner's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from alerts.ledger import BARE_ROOT_FAILED, held_by
from alerts.path_errors import fixed_by_the_path
from alerts.plans import Spec, delivery_key
from alerts.roots import Roots
from alerts.thread_batching import LastReply, is_churn
from monitor.clock import parse_stamp, stamp
from monitor.store.records import StoredEvent
from monitor.store.storage import Tx

_THREADED = frozenset({"post_reply", "post_detail", "upload_csv"})  # kept in order per thread


@dataclass(frozen=True)
class RecentOpenings:
    """One channel's latest planned opening and latest digest, each None when none is recent."""

    opening: datetime | None
    digest: datetime | None


class PlannedDeliveries:
    """Writes the `deliveries` rows that planning creates, and changes them while what they
    say may still change; the roots they open are linked through `Roots`."""

    def __init__(self, roots: Roots) -> None:
        self.roots = roots

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
                root_id = self.roots.root_id(tx, incident_id, channel)
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
                root_id = self.roots.root_id(tx, incident_id, channel)
            if root_id is not None and spec.not_before is None and spec.action in _THREADED:
                self._release_held(tx, root_id, now)
            # A thread whose root failed for good can never take this; say so now rather
            # than leave a row waiting forever.
            # (Its reason is the root's, so a repaired path tries both again: ledger.py.)
            root_failed = root_id is not None and tx.rows(
                "SELECT last_error FROM deliveries WHERE id = ? AND state = 'FAILED'", (root_id,)
            )
            # An earlier message of the thread waits for the path to be repaired: this one
            # waits with it, so the thread is never read out of order (ledger.failed).
            held = (
                [
                    str(error)
                    for (error,) in tx.rows(
                        "SELECT last_error FROM deliveries WHERE root_id = ? AND state = 'FAILED'"
                        " AND action IN ('post_reply', 'post_detail', 'upload_csv')",
                        (root_id,),
                    )
                    if fixed_by_the_path(str(error or ""))
                ]
                if root_id is not None and not root_failed and spec.action in _THREADED
                else []
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
                    "FAILED" if root_failed or held else "PENDING",
                    f"{BARE_ROOT_FAILED}: {root_failed[0][0]}"
                    if root_failed
                    else held_by(held[0])
                    if held
                    else None,
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
                assert incident_id is not None, "a root message is an incident's"
                self.roots.link(tx, incident_id, channel, delivery_id)
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
        Looked for among its last replies only: past those, it is long enough ago. One an
        ack or snooze silenced (SENT, never posted: worker.py) is no reply that went out."""
        found = tx.rows(
            "SELECT id, state, updated_at, payload_json FROM deliveries"
            " WHERE incident_id = ? AND channel = ? AND action = 'post_reply'"
            " AND NOT (state = 'SENT' AND slack_ts IS NULL)"
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

    def recent_openings(self, tx: Tx, since: datetime) -> dict[str, RecentOpenings]:
        """Per channel, when an opening was last planned there since `since` (a root, a
        digest, or an incident's own message in a digest's thread), and when its latest
        digest that did not fail was: what alerts/bursts.py needs to tell a burst arriving.
        Read by the time rows were planned (deliveries_created), so only recent rows."""
        found = tx.rows(
            "SELECT channel, action, state, max(created_at) FROM deliveries"
            " WHERE created_at >= ? AND action IN ('post_root', 'post_digest', 'post_detail')"
            " GROUP BY channel, action, state",
            (stamp(since),),
        )
        openings: dict[str, datetime] = {}
        digests: dict[str, datetime] = {}
        for channel, action, state, latest in found:
            at = parse_stamp(str(latest))
            openings[channel] = max(at, openings.get(channel, at))
            if action == "post_digest" and state != "FAILED":
                digests[channel] = max(at, digests.get(channel, at))
        return {c: RecentOpenings(at, digests.get(c)) for c, at in openings.items()}

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
            self.roots.link(tx, incident_id, channel, digest_id)
        return listed
