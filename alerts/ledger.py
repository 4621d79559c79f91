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

Here, the rows from the worker's side: taken under a lease, their outcome recorded, read
back. Planning writes them (alerts/planned.py); alerts/roots.py says which row is an
incident's root message in a channel. Not pure: reads and writes the state store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from alerts.deliveries import COLUMNS, Delivery, DeliveryState, delivery_of
from alerts.path_errors import fixed_by_the_path
from monitor.clock import parse_stamp, stamp
from monitor.store.storage import Storage, Tx

log = logging.getLogger("invmon.alerts")


# Actions that are chat.postMessage calls, limited by Slack per channel; the first three
# are top-level messages, the others replies in a thread.
_TOP_LEVEL = "('post_root', 'post_digest', 'post_summary')"


_POSTS = "('post_root', 'post_digest', 'post_summary', 'post_reply', 'post_detail')"


POST_ACTIONS = frozenset({"post_root", "post_digest", "post_summary", "post_reply", "post_detail"})

# Rows set PENDING again by one statement of retry_failed (a statement's parameters are
# bounded; so many failed deliveries at once are a broken path's whole backlog).
RETRY_BATCH = 500


# What reconcile.py says of a row whose fate it could not learn from Slack (its call may
# have landed): tried again, such a row is reconciled first, never sent blindly.
OUTCOME_UNCHECKED = "its outcome cannot be checked: "
# What planning said of a row under a failed root before it named the root's reason.
BARE_ROOT_FAILED = "its root message failed"
# A thread's messages, sent in order (_READY).
_THREAD = "('post_reply', 'post_detail', 'upload_csv')"
EARLIER_FAILED = "an earlier message of its thread failed"


def held_by(error: str) -> str:
    """What a thread's later message says while an earlier one that failed with `error`
    (for the path) waits to be tried again."""
    reason = error.split(f"{EARLIER_FAILED}: ", 1)[-1]
    return f"{EARLIER_FAILED}: {reason}"


def to_retry(failed: Sequence[Sequence[Any]], worth: Callable[[str, str], bool]) -> list[int]:
    """Which FAILED rows to try again, of `failed` (id, channel, last_error, root_id, the
    root's state, whether its incident is open): those that `worth` says a repaired path
    carries, of open incidents or of threads that went out, with the roots their threads
    need. Pure."""
    rows = {int(row[0]): row for row in failed}
    worthy = {i for i, row in rows.items() if worth(str(row[1]), row[2] or "")}
    # An open incident's, and what completes a thread that went out (its resolution, say)
    # even when its incident has closed since; a closed incident is not announced late.
    chosen = {i for i in worthy if rows[i][5] or rows[i][4] == "SENT"}
    # The root of a thread goes with what goes into it, even a digest whose row names an
    # incident closed since.
    chosen |= {int(rows[i][3]) for i in chosen if rows[i][3] in worthy}
    # A row planned under a failed root before the reason was written down goes with it.
    chosen |= {
        i
        for i, row in rows.items()
        if row[2] == BARE_ROOT_FAILED and row[5] and row[3] is not None and int(row[3]) in chosen
    }
    # A reply goes only into a thread that exists or is tried again with it: one whose root
    # stays FAILED would wait for it forever.
    return sorted(
        i for i in chosen if rows[i][3] is None or rows[i][4] == "SENT" or int(rows[i][3]) in chosen
    )


# Slack's documented rate for chat.postMessage: about one message a second per channel,
# with short bursts allowed. After a 429 the channel's held posts go out this far apart.
POST_SPACING = timedelta(seconds=1)


# The one statement of when a row could be taken, leaving out time and leases: UNKNOWN
# (to be reconciled), or PENDING with its root message sent and, for a message of the
# thread, no earlier one of its thread still pending or in doubt (a thread's messages go out
# in order). An edit of the root is no message of the thread: it shows the incident as it
# is when sent, so it never waits behind a reply held for the thread's update interval.
# `claim` adds "due and unleased"; `next_due` asks when the earliest such row becomes due.
_READY = (
    "(d.state = 'UNKNOWN' OR (d.state = 'PENDING' AND ("
    "   d.root_id IS NULL OR EXISTS (SELECT 1 FROM deliveries r"
    "     WHERE r.id = d.root_id AND r.state = 'SENT'))"
    f"   AND (d.action NOT IN {_THREAD}"
    "     OR NOT EXISTS (SELECT 1 FROM deliveries e WHERE e.root_id = d.root_id"
    "     AND d.root_id IS NOT NULL AND e.id < d.id"
    f"     AND e.action IN {_THREAD}"
    "     AND e.state IN ('PENDING', 'UNKNOWN')))))"
)


# Pruning, after state.retention. A finished row (SENT or FAILED) may go once it finished
# before the cutoff and is of no incident (a daily summary) or of one that closed before the
# cutoff with no event still to plan: nothing will be planned about it again, so none of its
# idempotency keys can come back (an open incident's reminders are keyed by their number,
# and its thread needs its root). Each `?` is the cutoff.
def _done(row: str) -> str:
    # `state || ''`: an expression, so that no planner reads the state off deliveries_due
    # (nearly every row is SENT: that index would be read whole, for a batch of 500).
    return (
        f"({row}.state || '') IN ('SENT', 'FAILED') AND {row}.updated_at < ?"
        f" AND ({row}.incident_id IS NULL OR EXISTS ("
        f"SELECT 1 FROM incidents i WHERE i.id = {row}.incident_id AND i.resolved_at < ?"
        " AND NOT EXISTS (SELECT 1 FROM events e WHERE e.incident_id = i.id"
        " AND e.dispatched_at IS NULL)))"
    )


# The next rows, in id order from where the last batch stopped, then which of them may go:
# each row is looked at once however many batches a prune takes, and a batch reads only its
# own rows by their key. Asked in one statement, the planners (SQLite's and PostgreSQL's)
# read `state IN (…)` off deliveries_due and sorted every finished row by id for each batch:
# the first prune after an upgrade from a release that never pruned (2M rows) took hours,
# holding a SQLite store's one connection.
_NEXT_IDS = "SELECT id FROM deliveries WHERE id > ? ORDER BY id LIMIT ?"
_CANDIDATES = f"SELECT d.id, d.state FROM deliveries d WHERE d.id BETWEEN ? AND ? AND {_done('d')}"
# Of the candidates (`{ids}`), those something kept still needs: a row threaded under them
# that is not done, or an incident open (or closed after the cutoff) whose thread they root
# (a digest roots each incident it lists). Looked up by root, one candidate at a time
# (deliveries_root, alert_roots_by_delivery), not over the whole ledger.
_STILL_ROOTS = (
    "SELECT c.root_id FROM deliveries c WHERE c.root_id IN ({ids})"
    f" AND NOT ({_done('c')})"
    " UNION SELECT r.delivery_id FROM alert_roots r JOIN incidents i ON i.id = r.incident_id"
    " WHERE r.delivery_id IN ({ids}) AND (i.resolved_at IS NULL OR i.resolved_at >= ?)"
)


def count_sent(tx: Tx, change: int) -> None:
    """Rows became SENT, or SENT rows were pruned: the count `counts` reads, changed in the
    same transaction. Taken last in it, after any deliveries row, as every writer does, so
    two transactions never wait on each other for it."""
    tx.run("UPDATE delivery_counts SET n = n + ? WHERE state = 'SENT'", (change,))


def read_delivery(tx: Tx, delivery_id: int) -> Delivery:
    """One row, read in the caller's transaction."""
    [row] = tx.rows(f"SELECT {', '.join(COLUMNS)} FROM deliveries WHERE id = ?", (delivery_id,))
    return delivery_of(row)


class Ledger:
    """Owns the `deliveries` rows once planned: claiming them, recording what their calls
    did, and reading them back."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

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
                    return read_delivery(tx, delivery_id), str(state)
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
        """Slack rate-limited posting to `channel`: its pending posts are due from `until`
        on, POST_SPACING apart in the order they were planned (the one that drew the 429
        among them), and none earlier than it already was. Released all at once at
        `until`, each after the first drew a 429 of its own: 189 where a burst of 200
        incidents needed 100 (bench/delivery.py). Returns how many were held."""
        with self.storage.transaction() as tx:
            waiting = tx.rows(
                "SELECT id FROM deliveries"
                f" WHERE channel = ? AND state = 'PENDING' AND action IN {_POSTS} ORDER BY id",
                (channel,),
            )
            for n, (row_id,) in enumerate(waiting):
                due = stamp(until + POST_SPACING * n)
                tx.run(
                    "UPDATE deliveries SET next_attempt_at = ? WHERE id = ?"
                    " AND next_attempt_at < ?",
                    (due, row_id, due),
                )
        return len(waiting)

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
        def hold_the_thread(tx: Tx) -> None:
            # In the transaction that marks `delivery` FAILED, and only if this worker still
            # held it: a crash between the two would leave a thread waiting on a root that
            # failed, and a worker that lost the lease must not touch the new holder's thread.
            if delivery.action in ("post_root", "post_digest"):
                # Nothing can go into a thread that does not exist; say why instead of waiting.
                tx.run(
                    "UPDATE deliveries SET state = 'FAILED', last_error = ?, updated_at = ?"
                    " WHERE root_id = ? AND state = 'PENDING'",
                    (f"{BARE_ROOT_FAILED}: {error}", stamp(now), delivery.id),
                )
            elif delivery.root_id is not None and fixed_by_the_path(error):
                # A message of a thread failed for the path: it is tried again once the
                # path works, so what comes after it in its thread waits with it (sent now,
                # it would read before it, and the thread's last word would be an older one).
                tx.run(
                    "UPDATE deliveries SET state = 'FAILED', last_error = ?, updated_at = ?"
                    f" WHERE root_id = ? AND id > ? AND state = 'PENDING' AND action IN {_THREAD}",
                    (held_by(error), stamp(now), delivery.root_id, delivery.id),
                )

        self._finish(delivery, now, "FAILED", error, now, and_then=hold_the_thread)

    def retry_failed(
        self,
        now: datetime,
        worth: Callable[[str, str], bool],
        fewer_attempts_than: int | None = None,
    ) -> int:
        """The FAILED rows of incidents still open that `worth(channel, last_error)` says a
        repaired path will carry: PENDING again, due now (a thread's replies wait for their
        root as ever, and fail with it again if it does). A row Slack refused is certainly
        not done, so it is simply due; one whose outcome could not be checked goes back to
        UNKNOWN, to be looked for in Slack before anything is sent. Rows tried `fewer_attempts_than`
        times or more are left, when given. Returns how many."""
        with self.storage.transaction() as tx:
            failed = tx.rows(
                "SELECT d.id, d.channel, d.last_error, d.root_id, r.state,"
                " i.id IS NOT NULL AND i.resolved_at IS NULL FROM deliveries d"
                " LEFT JOIN incidents i ON i.id = d.incident_id"
                " LEFT JOIN deliveries r ON r.id = d.root_id WHERE d.state = 'FAILED'"
                " AND d.attempts < ?",
                (fewer_attempts_than if fewer_attempts_than is not None else 2**31 - 1,),
            )
            again = to_retry(failed, worth)
            # A call that may have landed is reconciled with Slack first (UNKNOWN, as it was
            # when its check failed); the others were refused, so they are simply due.
            in_doubt = {int(r[0]) for r in failed if str(r[2] or "").startswith(OUTCOME_UNCHECKED)}
            for state in ("UNKNOWN", "PENDING"):
                rows = [i for i in again if (i in in_doubt) == (state == "UNKNOWN")]
                for start in range(0, len(rows), RETRY_BATCH):
                    batch = rows[start : start + RETRY_BATCH]
                    marks = ", ".join("?" for _ in batch)
                    tx.run(
                        "UPDATE deliveries SET state = ?, next_attempt_at = ?, updated_at = ?,"
                        " unknown_since = CASE WHEN ? THEN unknown_since END"
                        f" WHERE state = 'FAILED' AND id IN ({marks})",
                        [state, stamp(now), stamp(now), state == "UNKNOWN", *batch],
                    )
        return len(again)

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
        and_then: Callable[[Tx], None] | None = None,
    ) -> None:
        # Fenced by the lease: a worker that lost its lease (another one took the row over)
        # must not overwrite what the new holder found or did. `and_then` runs in the same
        # transaction, once the row was written, and before count_sent: that counter's lock
        # is taken last, after any deliveries row (count_sent). It must not open a
        # transaction of its own (SQLite's is the storage's one connection).
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
            if written and and_then is not None:
                and_then(tx)
            if written and state == "SENT":
                # A row this worker holds is UNKNOWN (claim): it becomes SENT once, here.
                count_sent(tx, 1)
        if not written:
            log.warning(
                "lost the lease on delivery %s before recording %s; the new holder's result stands",
                delivery.id,
                state,
            )

    # --- reading -------------------------------------------------------------------------

    def get(self, delivery_id: int) -> Delivery:
        with self.storage.transaction() as tx:
            return read_delivery(tx, delivery_id)

    def thread_root(self, delivery: Delivery) -> Delivery:
        """The message in whose thread `delivery` goes."""
        if delivery.root_id is None:
            raise LookupError(f"delivery #{delivery.id} has no root message")
        return self.get(delivery.root_id)

    def detail_of(self, incident_id: int, digest_id: int) -> Delivery | None:
        """The incident's own message inside a digest's thread."""
        with self.storage.transaction() as tx:
            found = tx.rows(
                "SELECT id FROM deliveries WHERE incident_id = ? AND root_id = ?"
                " AND action = 'post_detail' AND state = 'SENT'",
                (incident_id, digest_id),
            )
            return read_delivery(tx, int(found[0][0])) if found else None

    def all(self) -> list[Delivery]:
        with self.storage.transaction() as tx:
            rows = tx.rows(f"SELECT {', '.join(COLUMNS)} FROM deliveries ORDER BY id")
        return [delivery_of(r) for r in rows]

    def undelivered(self, now: datetime) -> int:
        """Rows that should have gone by `now` and have not: tried and refused, of unknown
        fate, or due and not yet tried. A row planned for later (a held reply, the root's
        update when a snooze ends) is not one."""
        with self.storage.transaction() as tx:
            [(n,)] = tx.rows(
                "SELECT count(*) FROM deliveries WHERE state = 'UNKNOWN' OR (state = 'PENDING'"
                " AND (attempts > 0 OR next_attempt_at <= ?))",
                (stamp(now),),
            )
        return int(n)

    def counts(self) -> dict[str, int]:
        """The ledger's rows by state (states with none left out), for the metric read
        every alerts turn: SENT, nearly every row, from its count kept as rows become SENT
        and are pruned; the others, few, from deliveries_due."""
        with self.storage.transaction() as tx:
            rows = tx.rows(
                "SELECT state, count(*) FROM deliveries"
                " WHERE state IN ('PENDING', 'UNKNOWN', 'FAILED') GROUP BY state"
            )
            sent = tx.rows("SELECT n FROM delivery_counts WHERE state = 'SENT'")
        found = {str(state): int(n) for state, n in rows}
        if sent and int(sent[0][0]):
            found["SENT"] = int(sent[0][0])
        return found

    # --- pruning (alerts/alerter.py's prune, with alert_roots) ----------------------------

    def prunable(
        self, tx: Tx, before: datetime, after: int, limit: int
    ) -> tuple[list[tuple[int, str]], int | None]:
        """Of the next `limit` rows past id `after`, those that may go (finished: see _done)
        and that nothing kept still needs, as (id, state); and the last id looked at, None
        when no row is left past it."""
        cutoff = stamp(before)
        looked = [int(i) for (i,) in tx.rows(_NEXT_IDS, [after, limit])]
        if not looked:
            return [], None
        last = looked[-1] if len(looked) == limit else None
        found = tx.rows(_CANDIDATES, [looked[0], looked[-1], cutoff, cutoff])
        if not found:
            return [], last
        ids = [int(i) for i, _ in found]
        marks = ", ".join("?" for _ in ids)
        needed = tx.rows(_STILL_ROOTS.format(ids=marks), [*ids, cutoff, cutoff, *ids, cutoff])
        kept = {int(i) for (i,) in needed}
        doomed = [(int(i), str(state)) for i, state in sorted(found) if int(i) not in kept]
        return doomed, last

    def delete(self, tx: Tx, rows: list[tuple[int, str]]) -> None:
        """Remove these rows (their alert_roots rows gone first), and their count."""
        if not rows:
            return
        marks = ", ".join("?" for _ in rows)
        tx.run(f"DELETE FROM deliveries WHERE id IN ({marks})", [i for i, _ in rows])
        sent = sum(state == "SENT" for _, state in rows)
        if sent:
            count_sent(tx, -sent)

    def recount_sent(self) -> None:
        """The SENT count made again from the rows. A daemon of the previous release,
        running beside this one on a migrated store through a rolling upgrade, marks rows
        SENT without counting them, and this one's pruning then took them off: the metric
        drifted, and went below zero. The counter's row is locked first, and counted after:
        a writer changes it last in its transaction, so every change to a SENT row is
        either committed and counted here, or not yet and counted by its writer after."""
        with self.storage.transaction() as tx:
            tx.rows("SELECT n FROM delivery_counts WHERE state = 'SENT'" + self._for_update())
            [(sent,)] = tx.rows("SELECT count(*) FROM deliveries WHERE state = 'SENT'")
            tx.run("UPDATE delivery_counts SET n = ? WHERE state = 'SENT'", (int(sent),))

    def _for_update(self) -> str:
        # SQLite's transactions are one at a time (BEGIN IMMEDIATE); it knows no FOR UPDATE.
        return " FOR UPDATE" if self.storage.kind == "postgresql" else ""

    def next_due(self) -> datetime | None:
        """When the earliest row a worker could claim becomes due (its lease included)."""
        with self.storage.transaction() as tx:
            rows = tx.rows(
                "SELECT min(CASE WHEN d.lease_until > d.next_attempt_at THEN d.lease_until"
                f" ELSE d.next_attempt_at END) FROM deliveries d WHERE {_READY}"
            )
        return parse_stamp(rows[0][0]) if rows and rows[0][0] else None
