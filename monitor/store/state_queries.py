"""Reading the monitor's tables: runs, incidents, their keys and the events outbox, as
typed records. StateStore (state.py) adds what changes them."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any, TypeVar

from monitor.clock import maybe_parse, parse_stamp, stamp
from monitor.store.context import IncidentContext
from monitor.store.incidents import OPENING_EVENTS, IncidentState, event_kind
from monitor.store.key_order import key_order
from monitor.store.records import Incident, IncidentKey, Run, StoredEvent
from monitor.store.storage import Storage, Tx

T = TypeVar("T")
PRUNE_BATCH = 5000  # runs removed in one transaction by prune_runs

_INCIDENT_COLUMNS = (
    "id",
    "invariant",
    "kind",
    "opened_at",
    "resolved_at",
    "first_count",
    "last_count",
    "last_seen_at",
    "detail",
    "acked_by",
    "acked_by_name",
    "acked_at",
    "ack_mode",
    "snoozed_until",
    "snoozed_by",
    "context_json",
    "target",
    "ended_as",
)
_RUN_COLUMNS = (
    "id",
    "invariant",
    "started_at",
    "finished_at",
    "status",
    "count",
    "error",
    "replica_lag_seconds",
    "duration_ms",
    "columns_json",
    "sample_json",
    "target",
    "listing_ms",
    "repeats",
    "last_started_at",
)


class StateQueries:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._db = storage

    # --- reading -----------------------------------------------------------------------

    def pending_events(self, limit: int = 100) -> list[StoredEvent]:
        return self._events("WHERE dispatched_at IS NULL ORDER BY id LIMIT ?", (limit,))

    def events(self, invariant: str | None = None) -> list[StoredEvent]:
        if invariant is None:
            return self._events("ORDER BY id", ())
        return self._events("WHERE invariant = ? ORDER BY id", (invariant,))

    def read(self, reading: Callable[[Tx], T]) -> T:
        """`reading` in one transaction (self_checks.py's queries)."""
        with self._db.transaction() as tx:
            return reading(tx)

    def last_recorded(self) -> dict[str, datetime]:
        """When each invariant last had a run recorded, whatever its status."""
        with self._db.transaction() as tx:
            found = tx.rows("SELECT invariant, updated_at FROM invariant_state")
        return {str(name): parse_stamp(str(at)) for name, at in found}

    def opening_rows(self, incident_id: int) -> tuple[list[str], list[dict[str, Any]]] | None:
        """(columns, rows) of the run that opened a violation, as they were then, duplicates
        kept; None for incidents stored before these were kept."""
        with self._db.transaction() as tx:
            found = tx.rows("SELECT opening_json FROM incidents WHERE id = ?", (incident_id,))
        if not found or not found[0][0]:
            return None
        opening = json.loads(found[0][0])
        return list(opening["columns"]), list(opening["rows"])

    def closed_since(self, since: datetime) -> list[Incident]:
        """Incidents closed since then, resolved or retired: each says which in `state`."""
        return self._incidents("WHERE resolved_at >= ? ORDER BY id", (stamp(since),))

    resolved_since = closed_since  # the older name; it never meant "resolved" only

    def open_incidents(self) -> list[Incident]:
        return self._incidents("WHERE resolved_at IS NULL ORDER BY opened_at, id", ())

    def open_violation(self, invariant: str) -> tuple[int, int | None] | None:
        """The invariant's open violation: its id and its count at its last counted run."""
        with self._db.transaction() as tx:
            found = tx.rows(
                "SELECT id, last_count FROM incidents WHERE invariant = ? AND kind = 'violation'"
                " AND resolved_at IS NULL",
                (invariant,),
            )
        if not found:
            return None
        incident_id, count = found[0]
        return int(incident_id), None if count is None else int(count)

    def incident(self, incident_id: int) -> Incident | None:
        found = self._incidents("WHERE id = ?", (incident_id,))
        return found[0] if found else None

    def incidents_by_id(self, ids: Collection[int]) -> dict[int, Incident]:
        """Several incidents by id in one query (planning reads those of its pending events)."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        marks = ", ".join("?" for _ in wanted)
        return {i.id: i for i in self._incidents(f"WHERE id IN ({marks})", wanted)}

    def incidents(
        self, invariant: str | None = None, limit: int = 20, targets: Sequence[str] = ()
    ) -> list[Incident]:
        """The latest incidents, newest first, of one invariant and/or some targets."""
        where, params = _narrowed("", invariant, targets)
        return self._incidents(f"{where} ORDER BY id DESC LIMIT ?", (*params, limit))

    def incident_keys(self, incident_id: int) -> list[IncidentKey]:
        with self._db.transaction() as tx:
            found = tx.rows(
                "SELECT offending_key, row_json, first_seen_at, last_seen_at, gone_at"
                " FROM incident_keys WHERE incident_id = ?",
                (incident_id,),
            )
        # In the order the monitored database sorts them ([9] before [10]), not as the JSON
        # text the store holds, which put [10] first: every message shows the first rows.
        return [
            IncidentKey(
                key,
                json.loads(row) if row else None,
                parse_stamp(first),
                parse_stamp(last),
                maybe_parse(gone),
            )
            for key, row, first, last, gone in sorted(found, key=lambda f: key_order(f[0]))
        ]

    def latest_runs(self) -> list[Run]:
        return self._runs("JOIN invariant_state s ON s.last_run_id = r.id ORDER BY r.invariant", ())

    def retired(self) -> set[str]:
        """The invariants removed since their last run: their file was found gone
        (StateStore.retire marks `removed_at`), and nothing has run them since. On a store
        that retired some before it had that mark, a retired incident says so, as before."""
        with self._db.transaction() as tx:
            found = tx.rows(
                "SELECT s.invariant FROM invariant_state s"
                " LEFT JOIN runs r ON r.id = s.last_run_id"
                " WHERE s.removed_at IS NOT NULL"
                " AND (r.id IS NULL OR s.removed_at >= r.finished_at)"
                " UNION"
                " SELECT i.invariant FROM incidents i"
                " JOIN invariant_state s ON s.invariant = i.invariant"
                " JOIN runs r ON r.id = s.last_run_id"
                " WHERE i.ended_as = 'retired' AND i.resolved_at >= r.finished_at"
            )
        return {str(name) for (name,) in found}

    def runs(
        self, invariant: str | None = None, limit: int = 20, targets: Sequence[str] = ()
    ) -> list[Run]:
        """The latest runs, newest first, of one invariant and/or some targets."""
        where, params = _narrowed("r.", invariant, targets)
        return self._runs(f"{where} ORDER BY r.id DESC LIMIT ?", (*params, limit))

    def last_violated_run(self, invariant: str, since: datetime) -> Run | None:
        """The newest run of `invariant` that found rows and finished at `since` or later,
        with its sample: the offending rows as the database last returned them."""
        found = self._runs(
            "WHERE r.invariant = ? AND r.status = 'violated' AND r.finished_at >= ?"
            " ORDER BY r.id DESC LIMIT 1",
            (invariant, stamp(since)),
        )
        return found[0] if found else None

    def run(self, run_id: int) -> Run | None:
        """One run with its sample rows."""
        found = self._runs("WHERE r.id = ?", (run_id,))
        return found[0] if found else None

    def counts(self, now: datetime | None = None) -> dict[str, int]:
        """The store's gauges; with `now`, also the mutes active then."""
        with self._db.transaction() as tx:
            [(pending,)] = tx.rows("SELECT count(*) FROM events WHERE dispatched_at IS NULL")
            [(open_,)] = tx.rows("SELECT count(*) FROM incidents WHERE resolved_at IS NULL")
            # Closed before end states were kept and not migrated: resolved (records.py).
            ended = dict(
                tx.rows(
                    "SELECT COALESCE(ended_as, 'resolved'), count(*) FROM incidents"
                    " WHERE resolved_at IS NOT NULL GROUP BY COALESCE(ended_as, 'resolved')"
                )
            )
            counted = {
                "events_pending": int(pending),
                "open_incidents": int(open_),
                "resolved_incidents": int(ended.get("resolved", 0)),
                "retired_incidents": int(ended.get("retired", 0)),
            }
            if now is not None:
                at = stamp(now)
                [(muting,)] = tx.rows(
                    "SELECT count(*) FROM mutes WHERE starts_at <= ? AND ends_at > ?"
                    " AND (ended_early_at IS NULL OR ended_early_at > ?)",
                    (at, at, at),
                )
                counted["mutes_active"] = int(muting)
        return counted

    def prune_runs(self, before: datetime, go_on: Callable[[], bool] = lambda: True) -> int:
        """Drop old runs, keeping each invariant's latest; incidents and events stay. In
        batches, each its own transaction, so that a big backlog is worked off however many
        turns it takes, and no transaction holds the store for long. Stops between batches
        once `go_on` says so (a daemon stopping: the rest waits for the next turn)."""
        removed = 0
        while go_on():
            with self._db.transaction() as tx:
                gone = tx.rows(
                    "DELETE FROM runs WHERE id IN (SELECT id FROM runs WHERE finished_at < ?"
                    " AND id NOT IN (SELECT last_run_id FROM invariant_state"
                    " WHERE last_run_id IS NOT NULL) LIMIT ?) RETURNING id",
                    (stamp(before), PRUNE_BATCH),
                )
            removed += len(gone)
            if len(gone) < PRUNE_BATCH:
                break
        return removed

    def incident_in(self, tx: Tx, incident_id: int) -> Incident | None:
        """`incident` read inside the caller's transaction."""
        found = self._incidents_in(tx, "WHERE id = ?", (incident_id,))
        return found[0] if found else None

    def opening_event_in(self, tx: Tx, incident_id: int) -> StoredEvent | None:
        """The event that opened an incident (None once pruned), in the caller's
        transaction: a mute that held it plans it when it ends (alerts/muting.py)."""
        kinds = ", ".join(f"'{k}'" for k in sorted(OPENING_EVENTS))
        found = self._events_in(
            tx, f"WHERE incident_id = ? AND kind IN ({kinds}) ORDER BY id LIMIT 1", (incident_id,)
        )
        return found[0] if found else None

    def _events(self, where: str, params: Sequence[Any]) -> list[StoredEvent]:
        with self._db.transaction() as tx:
            return self._events_in(tx, where, params)

    def _events_in(self, tx: Tx, where: str, params: Sequence[Any]) -> list[StoredEvent]:
        found = tx.rows(
            "SELECT id, incident_id, invariant, kind, created_at, payload_json FROM events "
            + where,
            params,
        )
        return [
            StoredEvent(
                int(i), int(inc), inv, event_kind(kind), parse_stamp(at), json.loads(payload)
            )
            for i, inc, inv, kind, at, payload in found
        ]

    def _incidents(self, where: str, params: Sequence[Any]) -> list[Incident]:
        with self._db.transaction() as tx:
            return self._incidents_in(tx, where, params)

    def _incidents_in(self, tx: Tx, where: str, params: Sequence[Any]) -> list[Incident]:
        found = tx.rows(f"SELECT {', '.join(_INCIDENT_COLUMNS)} FROM incidents {where}", params)
        out = []
        for row in found:
            r = dict(zip(_INCIDENT_COLUMNS, row, strict=True))
            out.append(
                Incident(
                    id=int(r["id"]),
                    invariant=r["invariant"],
                    kind=r["kind"],
                    opened_at=parse_stamp(r["opened_at"]),
                    resolved_at=maybe_parse(r["resolved_at"]),
                    first_count=r["first_count"],
                    last_count=r["last_count"],
                    last_seen_at=parse_stamp(r["last_seen_at"]),
                    detail=r["detail"],
                    acked_by=r["acked_by"],
                    acked_by_name=r["acked_by_name"],
                    acked_at=maybe_parse(r["acked_at"]),
                    ack_mode=r["ack_mode"],
                    snoozed_until=maybe_parse(r["snoozed_until"]),
                    snoozed_by=r["snoozed_by"],
                    context=IncidentContext.from_json(r["context_json"]),
                    target=r["target"],
                    state=_state(r["resolved_at"], r["ended_as"]),
                )
            )
        return out

    def _runs(self, clause: str, params: Sequence[Any]) -> list[Run]:
        with self._db.transaction() as tx:
            found = tx.rows(
                f"SELECT {', '.join('r.' + c for c in _RUN_COLUMNS)} FROM runs r {clause}", params
            )
        out = []
        for row in found:
            r = dict(zip(_RUN_COLUMNS, row, strict=True))
            out.append(
                Run(
                    id=int(r["id"]),
                    invariant=r["invariant"],
                    started_at=parse_stamp(r["started_at"]),
                    finished_at=parse_stamp(r["finished_at"]),
                    status=r["status"],
                    count=r["count"],
                    error=r["error"],
                    replica_lag_seconds=r["replica_lag_seconds"],
                    duration_ms=r["duration_ms"],
                    columns=json.loads(r["columns_json"]),
                    sample=json.loads(r["sample_json"]),
                    target=r["target"],
                    listing_ms=r["listing_ms"],
                    repeats=int(r["repeats"]),
                    last_started_at=maybe_parse(r["last_started_at"]),
                )
            )
        return out


def _state(resolved_at: str | None, ended_as: str | None) -> IncidentState:
    if resolved_at is None:
        return "open"
    return "retired" if ended_as == "retired" else "resolved"


def _narrowed(
    prefix: str, invariant: str | None, targets: Sequence[str]
) -> tuple[str, tuple[Any, ...]]:
    """A WHERE clause for "this invariant" and "one of these targets", either optional."""
    terms, params = [], []
    if invariant is not None:
        terms.append(f"{prefix}invariant = ?")
        params.append(invariant)
    if targets:
        terms.append(f"{prefix}target IN ({', '.join('?' for _ in targets)})")
        params.extend(targets)
    return ("WHERE " + " AND ".join(terms) if terms else ""), tuple(params)
