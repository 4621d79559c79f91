"""The monitor's own data: runs, incidents, offending keys and the events outbox.

Never in the monitored database (a replica is read-only). SQLite by default, one file in
WAL mode; PostgreSQL when `state.dsn` is set, so several daemons can share it. One schema,
written in the SQL both understand; timestamps are ISO 8601 UTC text and documents JSON text
so the two stores behave identically.

Every state change and the events it causes are written in one transaction: an event
exists if and only if its transition happened (a transactional outbox).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from monitor.acks import Action, Outcome, decide_action
from monitor.incidents import (
    CLOSE_EVENT,
    Decision,
    EventDraft,
    IncidentKind,
    InvariantState,
    Observation,
    OpenIncident,
    decide,
    toggle,
)
from monitor.results import RunResult

REPLICA_SUBJECT = "(replica)"
ACK_COLUMNS = ("acked_by", "acked_by_name", "acked_at", "ack_mode", "snoozed_until", "snoozed_by")


def ts(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _migrations(pk: str, bigint: str, real: str) -> list[str]:
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
    ]


class Tx(Protocol):
    for_update: str

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def run(self, sql: str, params: Sequence[Any] = ()) -> None: ...

    def script(self, sql: str) -> None: ...


class _SqliteTx:
    for_update = ""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql, tuple(params)).fetchall())

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._conn.execute(sql, tuple(params))

    def script(self, sql: str) -> None:
        for statement in filter(str.strip, sql.split(";")):
            self._conn.execute(statement)


class _PostgresTx:
    for_update = " FOR UPDATE"

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql.replace("?", "%s"), tuple(params)).fetchall())

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._conn.execute(sql.replace("?", "%s"), tuple(params))

    def script(self, sql: str) -> None:
        self._conn.execute(sql)


class _Backend(Protocol):
    migrations: list[str]

    def transaction(self) -> Any: ...

    def close(self) -> None: ...


class _SqliteBackend:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=30
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.execute("PRAGMA synchronous=FULL")
        # One connection shared by the daemon's threads; sqlite3 serialises access to it,
        # the lock makes each transaction atomic with respect to the others.
        self._lock = threading.RLock()
        self.migrations = _migrations("INTEGER PRIMARY KEY AUTOINCREMENT", "INTEGER", "REAL")

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteTx(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()


class _PostgresBackend:
    def __init__(self, dsn: str) -> None:
        from psycopg_pool import ConnectionPool

        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=4,
            open=True,
            name="invmon-state",
            kwargs={"application_name": "invmon-state"},
        )
        self.migrations = _migrations(
            "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "BIGINT", "DOUBLE PRECISION"
        )

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self._pool.connection() as conn, conn.transaction():
            yield _PostgresTx(conn)

    def close(self) -> None:
        self._pool.close()


@dataclass(frozen=True)
class StoredEvent:
    id: int
    incident_id: int
    invariant: str
    kind: str
    created_at: datetime
    payload: dict[str, Any]


class StateStore:
    """The daemon's memory. Open with `StateStore.open(path=..., dsn=...)`."""

    def __init__(self, backend: _Backend) -> None:
        self._db = backend

    @classmethod
    def open(cls, path: Path | None = None, dsn: str | None = None) -> StateStore:
        backend: _Backend = (
            _PostgresBackend(dsn) if dsn else _SqliteBackend(path or Path("invmon-state.db"))
        )
        store = cls(backend)
        store.migrate()
        return store

    def close(self) -> None:
        self._db.close()

    def transaction(self) -> Any:
        """One transaction on the store, for modules that own tables of their own (alerts)."""
        return self._db.transaction()

    def migrate(self) -> None:
        with self._db.transaction() as tx:
            tx.script(
                "CREATE TABLE IF NOT EXISTS invmon_schema (version INTEGER PRIMARY KEY,"
                " applied_at TEXT NOT NULL)"
            )
        for version, ddl in enumerate(self._db.migrations, start=1):
            with self._db.transaction() as tx:
                # Re-checked inside the transaction: two daemons may start together.
                tx.rows(f"SELECT version FROM invmon_schema{tx.for_update}")
                if tx.rows("SELECT 1 FROM invmon_schema WHERE version = ?", (version,)):
                    continue
                tx.script(ddl)
                tx.run(
                    "INSERT INTO invmon_schema (version, applied_at) VALUES (?, ?)",
                    (version, ts(datetime.now(UTC))),
                )

    # --- writing -----------------------------------------------------------------------

    def record_run(
        self,
        invariant: str,
        result: RunResult,
        finished_at: datetime,
        for_runs: int = 1,
        error_threshold: int = 3,
    ) -> list[StoredEvent]:
        """Store the run, move the incidents on, and write the events: all or nothing."""
        seen = Observation(
            status=result.status,
            count=result.count,
            keys=result.keys,
            keys_complete=result.keys_complete,
            error=result.error,
        )
        now = ts(finished_at)
        with self._db.transaction() as tx:
            state = self._load_state(tx, invariant, now)
            run_id = self._insert_run(tx, invariant, result, finished_at)
            decision = decide(state, seen, for_runs, error_threshold)
            tx.run(
                "UPDATE invariant_state SET consecutive_violations = ?, consecutive_errors = ?,"
                " last_run_id = ?, updated_at = ? WHERE invariant = ?",
                (
                    decision.state.consecutive_violations,
                    decision.state.consecutive_errors,
                    run_id,
                    now,
                    invariant,
                ),
            )
            incident_ids = self._apply(tx, invariant, state, decision, result, now)
            drafts = decision.events
            if decision.keys_appeared and state.violation is not None:
                drafts = [self._maybe_clear_ack(tx, state.violation.id, d) for d in drafts]
            return [
                self._insert_event(tx, incident_ids[draft.incident], invariant, draft, now, run_id)
                for draft in drafts
            ]

    def record_condition(
        self,
        kind: IncidentKind,
        subject: str,
        active: bool,
        at: datetime,
        detail: str | None = None,
    ) -> list[StoredEvent]:
        """Open or resolve an on/off incident: replica stale, or an invalid file."""
        now = ts(at)
        with self._db.transaction() as tx:
            self._lock_subject(tx, subject, now)
            current = self._open_incident(tx, subject, kind)
            draft = toggle(current, active, kind, {"detail": detail})
            if draft is None:
                if current is not None and active:
                    tx.run(
                        "UPDATE incidents SET last_seen_at = ?, detail = ? WHERE id = ?",
                        (now, detail, current.id),
                    )
                return []
            if current is None:
                incident_id = self._insert_incident(tx, subject, kind, now, None, detail)
            else:
                incident_id = current.id
                self._resolve(tx, incident_id, now, None)
            return [self._insert_event(tx, incident_id, subject, draft, now, None)]

    def apply_action(
        self,
        incident_id: int,
        action: Action,
        at: datetime,
        source: str,
        then: Callable[[Tx, int], object] | None = None,
    ) -> Outcome:
        """Acknowledge, unacknowledge or snooze: recorded durably before anything is shown.

        The incident's subject row is locked, so of two people clicking at once one acks
        and the other is told who did. `then(tx, action_id)` runs in the same transaction
        when something changed (alerting uses it to queue the message update)."""
        now = ts(at)
        with self._db.transaction() as tx:
            found = tx.rows("SELECT invariant FROM incidents WHERE id = ?", (incident_id,))
            if not found:
                return Outcome(False, f"There is no incident #{incident_id}.", {})
            self._lock_subject(tx, str(found[0][0]), now)
            [incident] = self._incidents_in(tx, "WHERE id = ?", (incident_id,))
            outcome = decide_action(incident, action, at, now)
            if not outcome.changed:
                return outcome
            assignments = ", ".join(f"{column} = ?" for column in outcome.updates)
            tx.run(
                f"UPDATE incidents SET {assignments} WHERE id = ?",
                (*outcome.updates.values(), incident_id),
            )
            detail = (
                action.mode
                if action.kind == "ack"
                else (str(outcome.updates.get("snoozed_until") or "") or None)
            )
            [(action_id,)] = tx.rows(
                "INSERT INTO incident_actions (incident_id, action, actor, actor_name, detail,"
                " source, at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (incident_id, action.kind, action.actor, action.actor_name, detail, source, now),
            )
            if then is not None:
                then(tx, int(action_id))
            return outcome

    def first_sighting(self, signature: str, at: datetime, forget_before: datetime) -> bool:
        """True the first time a request signature is seen; old ones are forgotten."""
        with self._db.transaction() as tx:
            tx.run("DELETE FROM slack_requests WHERE seen_at < ?", (ts(forget_before),))
            return bool(
                tx.rows(
                    "INSERT INTO slack_requests (signature, seen_at) VALUES (?, ?)"
                    " ON CONFLICT (signature) DO NOTHING RETURNING signature",
                    (signature, ts(at)),
                )
            )

    def retire(self, invariant: str, at: datetime) -> list[StoredEvent]:
        """The invariant's file was removed: close what it had open, with a reason, so no
        incident stays open forever for a check that no longer runs."""
        now = ts(at)
        events = []
        with self._db.transaction() as tx:
            self._lock_subject(tx, invariant, now)
            kinds: tuple[IncidentKind, ...] = ("violation", "cannot_evaluate")
            for kind in kinds:
                current = self._open_incident(tx, invariant, kind)
                if current is None:
                    continue
                self._resolve(tx, current.id, now, None)
                draft = EventDraft(
                    CLOSE_EVENT[current.kind], current.kind, {"reason": "the invariant was removed"}
                )
                events.append(self._insert_event(tx, current.id, invariant, draft, now, None))
        return events

    def mark_dispatched(self, event_ids: Sequence[int], at: datetime) -> None:
        with self._db.transaction() as tx:
            for event_id in event_ids:
                tx.run(
                    "UPDATE events SET dispatched_at = ? WHERE id = ? AND dispatched_at IS NULL",
                    (ts(at), event_id),
                )

    # --- reading -----------------------------------------------------------------------

    def pending_events(self, limit: int = 100) -> list[StoredEvent]:
        return self._events("WHERE dispatched_at IS NULL ORDER BY id LIMIT ?", (limit,))

    def events(self, invariant: str | None = None) -> list[StoredEvent]:
        if invariant is None:
            return self._events("ORDER BY id", ())
        return self._events("WHERE invariant = ? ORDER BY id", (invariant,))

    def open_incidents(self) -> list[dict[str, Any]]:
        return self._incidents("WHERE resolved_at IS NULL ORDER BY opened_at, id", ())

    def incident(self, incident_id: int) -> dict[str, Any] | None:
        found = self._incidents("WHERE id = ?", (incident_id,))
        return found[0] if found else None

    def incidents(self, invariant: str, limit: int = 20) -> list[dict[str, Any]]:
        return self._incidents("WHERE invariant = ? ORDER BY id DESC LIMIT ?", (invariant, limit))

    def incident_keys(self, incident_id: int) -> dict[str, dict[str, Any]]:
        with self._db.transaction() as tx:
            found = tx.rows(
                "SELECT offending_key, row_json, first_seen_at, last_seen_at, gone_at"
                " FROM incident_keys WHERE incident_id = ? ORDER BY offending_key",
                (incident_id,),
            )
        return {
            key: {
                "row": json.loads(row) if row else None,
                "first_seen_at": first,
                "last_seen_at": last,
                "gone_at": gone,
            }
            for key, row, first, last, gone in found
        }

    def latest_runs(self) -> list[dict[str, Any]]:
        return self._runs("JOIN invariant_state s ON s.last_run_id = r.id ORDER BY r.invariant", ())

    def runs(self, invariant: str, limit: int = 20) -> list[dict[str, Any]]:
        return self._runs("WHERE r.invariant = ? ORDER BY r.id DESC LIMIT ?", (invariant, limit))

    def counts(self) -> dict[str, int]:
        with self._db.transaction() as tx:
            [(pending,)] = tx.rows("SELECT count(*) FROM events WHERE dispatched_at IS NULL")
            [(open_,)] = tx.rows("SELECT count(*) FROM incidents WHERE resolved_at IS NULL")
        return {"events_pending": int(pending), "open_incidents": int(open_)}

    def prune_runs(self, before: datetime) -> int:
        """Drop old runs, keeping each invariant's latest; incidents and events stay."""
        with self._db.transaction() as tx:
            doomed = tx.rows(
                "SELECT count(*) FROM runs WHERE finished_at < ?"
                " AND id NOT IN (SELECT last_run_id FROM invariant_state"
                " WHERE last_run_id IS NOT NULL)",
                (ts(before),),
            )
            tx.run(
                "DELETE FROM runs WHERE finished_at < ? AND id NOT IN"
                " (SELECT last_run_id FROM invariant_state WHERE last_run_id IS NOT NULL)",
                (ts(before),),
            )
        return int(doomed[0][0])

    # --- internals ---------------------------------------------------------------------

    def _maybe_clear_ack(self, tx: Tx, incident_id: int, draft: EventDraft) -> EventDraft:
        """An ack "until new rows appear" ends when a new offending key appears."""
        if draft.kind != "keys_appeared":
            return draft
        cleared = tx.rows(
            "UPDATE incidents SET acked_by = NULL, acked_by_name = NULL, acked_at = NULL,"
            " ack_mode = NULL WHERE id = ? AND ack_mode = 'until_new_rows' RETURNING id",
            (incident_id,),
        )
        if not cleared:
            return draft
        return EventDraft(draft.kind, draft.incident, {**draft.payload, "ack_cleared": True})

    def _lock_subject(self, tx: Tx, subject: str, now: str) -> tuple[int, int]:
        """Serialise every transition of one subject (an invariant, or the replica):
        concurrent runs on a shared PostgreSQL store take turns on this row."""
        tx.run(
            "INSERT INTO invariant_state (invariant, updated_at) VALUES (?, ?)"
            " ON CONFLICT (invariant) DO NOTHING",
            (subject, now),
        )
        [(violations, errors)] = tx.rows(
            "SELECT consecutive_violations, consecutive_errors FROM invariant_state"
            f" WHERE invariant = ?{tx.for_update}",
            (subject,),
        )
        return int(violations), int(errors)

    def _load_state(self, tx: Tx, invariant: str, now: str) -> InvariantState:
        violations, errors = self._lock_subject(tx, invariant, now)
        return InvariantState(
            consecutive_violations=violations,
            consecutive_errors=errors,
            violation=self._open_incident(tx, invariant, "violation"),
            cannot_evaluate=self._open_incident(tx, invariant, "cannot_evaluate"),
        )

    def _open_incident(self, tx: Tx, invariant: str, kind: IncidentKind) -> OpenIncident | None:
        found = tx.rows(
            "SELECT id, opened_at FROM incidents"
            " WHERE invariant = ? AND kind = ? AND resolved_at IS NULL",
            (invariant, kind),
        )
        if not found:
            return None
        incident_id, opened_at = found[0]
        keys = tx.rows(
            "SELECT offending_key FROM incident_keys WHERE incident_id = ? AND gone_at IS NULL",
            (incident_id,),
        )
        return OpenIncident(
            int(incident_id), kind, parse_ts(opened_at), frozenset(k for (k,) in keys)
        )

    def _insert_run(self, tx: Tx, invariant: str, result: RunResult, finished_at: datetime) -> int:
        started = result.started_at or finished_at
        [(run_id,)] = tx.rows(
            "INSERT INTO runs (invariant, started_at, finished_at, status, count, error,"
            " replica_lag_seconds, duration_ms, columns_json, sample_json)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                invariant,
                ts(started),
                ts(finished_at),
                result.status,
                result.count,
                result.error,
                result.replica_lag,
                result.duration_ms,
                json.dumps(result.columns),
                json.dumps(result.rows),
            ),
        )
        return int(run_id)

    def _insert_incident(
        self,
        tx: Tx,
        invariant: str,
        kind: IncidentKind,
        now: str,
        count: int | None,
        detail: str | None,
    ) -> int:
        [(incident_id,)] = tx.rows(
            "INSERT INTO incidents (invariant, kind, opened_at, first_count, last_count,"
            " last_seen_at, detail) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (invariant, kind, now, count, count, now, detail),
        )
        return int(incident_id)

    def _resolve(self, tx: Tx, incident_id: int, now: str, count: int | None) -> None:
        tx.run(
            "UPDATE incidents SET resolved_at = ?, last_seen_at = ?, last_count = ? WHERE id = ?",
            (now, now, count, incident_id),
        )
        tx.run(
            "UPDATE incident_keys SET gone_at = ? WHERE incident_id = ? AND gone_at IS NULL",
            (now, incident_id),
        )

    def _apply(
        self,
        tx: Tx,
        invariant: str,
        state: InvariantState,
        decision: Decision,
        result: RunResult,
        now: str,
    ) -> dict[IncidentKind, int]:
        ids: dict[IncidentKind, int] = {}
        violation = state.violation
        if decision.open_violation:
            ids["violation"] = self._insert_incident(
                tx, invariant, "violation", now, result.count, None
            )
        elif violation is not None:
            ids["violation"] = violation.id
            if decision.resolve_violation:
                self._resolve(tx, violation.id, now, 0)
            else:
                tx.run(
                    "UPDATE incidents SET last_count = ?, last_seen_at = ? WHERE id = ?",
                    (result.count, now, violation.id),
                )
                for key in decision.keys_gone:
                    tx.run(
                        "UPDATE incident_keys SET gone_at = ? WHERE incident_id = ?"
                        " AND offending_key = ?",
                        (now, violation.id, key),
                    )
                for key in decision.keys_seen:
                    tx.run(
                        "UPDATE incident_keys SET last_seen_at = ? WHERE incident_id = ?"
                        " AND offending_key = ?",
                        (now, violation.id, key),
                    )
        for key, row in decision.keys_appeared.items():
            tx.run(
                "INSERT INTO incident_keys (incident_id, offending_key, row_json,"
                " first_seen_at, last_seen_at) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (incident_id, offending_key) DO UPDATE SET gone_at = NULL,"
                " last_seen_at = excluded.last_seen_at, row_json = excluded.row_json",
                (ids["violation"], key, json.dumps(row), now, now),
            )
        cannot = state.cannot_evaluate
        if decision.open_cannot_evaluate:
            ids["cannot_evaluate"] = self._insert_incident(
                tx, invariant, "cannot_evaluate", now, None, result.error
            )
        elif cannot is not None:
            ids["cannot_evaluate"] = cannot.id
            if decision.resolve_cannot_evaluate:
                self._resolve(tx, cannot.id, now, None)
            else:
                tx.run(
                    "UPDATE incidents SET last_seen_at = ?, detail = ? WHERE id = ?",
                    (now, result.error, cannot.id),
                )
        return ids

    def _insert_event(
        self,
        tx: Tx,
        incident_id: int,
        invariant: str,
        draft: EventDraft,
        now: str,
        run_id: int | None,
    ) -> StoredEvent:
        payload = dict(draft.payload)
        if draft.kind == CLOSE_EVENT[draft.incident]:
            [(opened_at,)] = tx.rows("SELECT opened_at FROM incidents WHERE id = ?", (incident_id,))
            payload.update(_lasted(parse_ts(opened_at), parse_ts(now)))
        [(event_id,)] = tx.rows(
            "INSERT INTO events (incident_id, invariant, kind, created_at, run_id, payload_json)"
            " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
            (incident_id, invariant, draft.kind, now, run_id, json.dumps(payload)),
        )
        return StoredEvent(
            int(event_id), incident_id, invariant, draft.kind, parse_ts(now), payload
        )

    def _events(self, where: str, params: Sequence[Any]) -> list[StoredEvent]:
        with self._db.transaction() as tx:
            found = tx.rows(
                "SELECT id, incident_id, invariant, kind, created_at, payload_json FROM events "
                + where,
                params,
            )
        return [
            StoredEvent(int(i), int(inc), inv, kind, parse_ts(at), json.loads(payload))
            for i, inc, inv, kind, at, payload in found
        ]

    def _incidents(self, where: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        with self._db.transaction() as tx:
            return self._incidents_in(tx, where, params)

    def _incidents_in(self, tx: Tx, where: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        columns = (
            "id",
            "invariant",
            "kind",
            "opened_at",
            "resolved_at",
            "first_count",
            "last_count",
            "last_seen_at",
            "detail",
            *ACK_COLUMNS,
        )
        found = tx.rows(f"SELECT {', '.join(columns)} FROM incidents {where}", params)
        return [dict(zip(columns, row, strict=True)) for row in found]

    def _runs(self, clause: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        columns = (
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
        )
        with self._db.transaction() as tx:
            found = tx.rows(
                f"SELECT {', '.join('r.' + c for c in columns)} FROM runs r {clause}", params
            )
        out = []
        for row in found:
            record = dict(zip(columns, row, strict=True))
            record["columns"] = json.loads(record.pop("columns_json"))
            record["sample"] = json.loads(record.pop("sample_json"))
            out.append(record)
        return out


def _lasted(opened_at: datetime, until: datetime) -> dict[str, Any]:
    return {"lasted_seconds": round((until - opened_at).total_seconds(), 3)}
