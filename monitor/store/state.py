"""The monitor's own data: runs, incidents, offending keys and the events outbox.

Never in the monitored database (a replica is read-only). SQLite by default, one file in
WAL mode; PostgreSQL when `state.dsn` is set, so several daemons can share it. One schema,
written in the SQL both understand; timestamps are ISO 8601 UTC text and documents JSON text
so the two stores behave identically.

Every state change and the events it causes are written in one transaction: an event
exists if and only if its transition happened (a transactional outbox).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from monitor.clock import parse_stamp, stamp
from monitor.execution.results import RunResult
from monitor.invariants.header import DEFAULT_TARGET
from monitor.store.acks import Action, Outcome, decide_action
from monitor.store.claims import Claim, LostClaim, finish
from monitor.store.context import IncidentContext
from monitor.store.incidents import (
    RETIRABLE,
    RETIRED_EVENT,
    EventDraft,
    IncidentKind,
    Observation,
    decide,
    retired_reason,
    toggle,
)
from monitor.store.records import Incident, Quarantine, StoredEvent
from monitor.store.state_queries import StateQueries
from monitor.store.storage import PostgresStorage, Storage, Tx, open_storage
from monitor.store.stretches import held_quietly
from monitor.store.writes import (
    apply,
    extend_stretch,
    insert_event,
    insert_incident,
    insert_run,
    load_state,
    lock_subject,
    maybe_clear_ack,
    open_incident,
    removed_since,
    resolve,
)

REPLICA_SUBJECT = "(replica)"


class RemovedWhileRunning(Exception):
    """The run's file was removed after the run began: the run is not stored."""


def replica_subject(target: str) -> str:
    """The subject of a target's replica-stale incident; the one-target form is unchanged."""
    return REPLICA_SUBJECT if target == "default" else f"(replica {target})"


def target_subject(target: str) -> str:
    return f"(target {target})"


class StateStore(StateQueries):
    """Runs, incidents, their keys, acknowledgements and the events outbox: what changes
    them is here, in transactions that also write the events they cause; what reads them is
    in StateQueries. Open with `StateStore.open(path=..., dsn=...)`; `storage` is shared
    with alerting's tables."""

    def __init__(self, storage: Storage) -> None:
        super().__init__(storage)

    @classmethod
    def open(
        cls,
        path: Path | None = None,
        dsn: str | None = None,
        read_only: bool = False,
        connect_timeout: float = 10,
    ) -> StateStore:
        return cls(open_storage(path, dsn, read_only, connect_timeout))

    @property
    def shared(self) -> bool:
        """Several daemons may use this store at once (PostgreSQL)."""
        return isinstance(self.storage, PostgresStorage)

    def close(self) -> None:
        self.storage.close()

    # --- writing -----------------------------------------------------------------------

    def record_run(
        self,
        invariant: str,
        result: RunResult,
        finished_at: datetime,
        for_runs: int = 1,
        error_threshold: int = 3,
        context: IncidentContext | None = None,
        claim: Claim | None = None,
    ) -> list[StoredEvent]:
        """Store the run, move the incidents on, and write the events: all or nothing.
        `context` is kept with any incident this run opens. With a `claim` (the daemon's
        scheduled runs) the claim is closed in the same transaction, and LostClaim is
        raised, storing nothing, when this daemon no longer holds it.

        A run that started before its file was last found removed (`retire`) is not
        stored: RemovedWhileRunning is raised once its claim is closed. Stored, it opened an
        incident, with its Slack message, for an invariant that no longer exists."""
        seen = Observation(
            status=result.status,
            count=result.count,
            keys=result.keys,
            keys_complete=result.keys_complete,
            error=result.error,
            unreachable=result.unreachable,
            keyed_by=result.keyed_by,
        )
        now = stamp(finished_at)
        with self._db.transaction() as tx:
            if claim is not None and not finish(tx, claim, finished_at):
                raise LostClaim(f"{invariant} at {stamp(claim.slot)} was taken over")
            state, last_run = load_state(tx, invariant, now)
            removed = removed_since(tx, invariant, result.started_at)
            if removed is None:
                decision = decide(state, seen, for_runs, error_threshold)
                if (
                    last_run is not None
                    and held_quietly(result, decision)
                    and extend_stretch(tx, last_run, result, finished_at, claim)
                ):
                    run_id = last_run
                else:
                    run_id = insert_run(tx, invariant, result, finished_at, claim)
                tx.run(
                    "UPDATE invariant_state SET consecutive_violations = ?,"
                    " consecutive_errors = ?, last_run_id = ?, updated_at = ? WHERE invariant = ?",
                    (
                        decision.state.consecutive_violations,
                        decision.state.consecutive_errors,
                        run_id,
                        now,
                        invariant,
                    ),
                )
                incident_ids = apply(tx, invariant, state, decision, result, now, context)
                drafts = decision.events
                if decision.keys_appeared and state.violation is not None:
                    drafts = [maybe_clear_ack(tx, state.violation.id, d) for d in drafts]
                return [
                    insert_event(tx, incident_ids[draft.incident], invariant, draft, now, run_id)
                    for draft in drafts
                ]
        # Committed: the claim closed, nothing else written.
        raise RemovedWhileRunning(f"its file was removed at {removed}, while it ran")

    def record_condition(
        self,
        kind: IncidentKind,
        subject: str,
        active: bool,
        at: datetime,
        detail: str | None = None,
        context: IncidentContext | None = None,
    ) -> list[StoredEvent]:
        """Open or resolve an on/off incident: replica stale, a target that does not
        answer, or an invalid file. `context` is kept with an incident it opens."""
        with self._db.transaction() as tx:
            return self._condition(tx, kind, subject, active, stamp(at), detail, context)

    def _condition(
        self,
        tx: Tx,
        kind: IncidentKind,
        subject: str,
        active: bool,
        now: str,
        detail: str | None,
        context: IncidentContext | None,
        closing: dict[str, Any] | None = None,
    ) -> list[StoredEvent]:
        lock_subject(tx, subject, now)
        current = open_incident(tx, subject, kind)
        draft = toggle(
            current, active, kind, {"detail": detail} if active else closing or {"detail": detail}
        )
        if draft is None:
            if current is not None and active:
                tx.run(
                    "UPDATE incidents SET last_seen_at = ?, detail = ? WHERE id = ?",
                    (now, detail, current.id),
                )
            return []
        if current is None:
            target = context.target if context else DEFAULT_TARGET
            incident_id = insert_incident(tx, subject, kind, now, None, detail, target, context)
        else:
            incident_id = current.id
            resolve(tx, incident_id, now, None)
        return [insert_event(tx, incident_id, subject, draft, now, None)]

    # --- quarantine (quarantine.py decides; this keeps it for every daemon of a fleet) ---

    def quarantine(
        self, invariant: str, version: str, reason: str, at: datetime, context: IncidentContext
    ) -> list[StoredEvent]:
        """Keep `invariant` (at this version of its file) from being scheduled again, and open
        its `quarantined` incident, which alerts its owner: one transaction."""
        now = stamp(at)
        with self._db.transaction() as tx:
            tx.run(
                "INSERT INTO quarantines (invariant, version, reason, since) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (invariant) DO UPDATE SET version = excluded.version,"
                " reason = excluded.reason, since = excluded.since",
                (invariant, version, reason, now),
            )
            return self._condition(tx, "quarantined", invariant, True, now, reason, context)

    def lift_quarantine(self, invariant: str, why: str, at: datetime) -> list[StoredEvent] | None:
        """Schedule `invariant` again (its file changed, or an operator said so); None when it
        was not quarantined."""
        now = stamp(at)
        with self._db.transaction() as tx:
            gone = tx.rows(
                "DELETE FROM quarantines WHERE invariant = ? RETURNING invariant", (invariant,)
            )
            if not gone:
                return None
            return self._condition(
                tx, "quarantined", invariant, False, now, None, None, {"reason": why}
            )

    def quarantined(self) -> dict[str, Quarantine]:
        """Every invariant held out of the schedule, with the version of its file and why."""
        with self._db.transaction() as tx:
            rows = tx.rows("SELECT invariant, version, reason, since FROM quarantines")
        return {
            str(name): Quarantine(str(name), str(version), str(reason), parse_stamp(str(since)))
            for name, version, reason, since in rows
        }

    def apply_action(
        self,
        incident_id: int,
        action: Action,
        at: datetime,
        source: str,
        then: Callable[[Tx, Incident, int], object] | None = None,
    ) -> Outcome:
        """Acknowledge, unacknowledge or snooze: recorded durably before anything is shown.

        The incident's subject row is locked, so of two people clicking at once one acks
        and the other is told who did. `then(tx, incident, action_id)` runs in the same transaction
        when something changed (alerting uses it to queue the message update)."""
        now = stamp(at)
        with self._db.transaction() as tx:
            found = tx.rows("SELECT invariant FROM incidents WHERE id = ?", (incident_id,))
            if not found:
                return Outcome(False, f"There is no incident #{incident_id}.", {})
            lock_subject(tx, str(found[0][0]), now)
            [incident] = self._incidents_in(tx, "WHERE id = ?", (incident_id,))
            outcome = decide_action(incident, action, at)
            if not outcome.changed:
                return outcome
            values = {
                column: stamp(value) if isinstance(value, datetime) else value
                for column, value in outcome.updates.items()
            }
            assignments = ", ".join(f"{column} = ?" for column in values)
            tx.run(
                f"UPDATE incidents SET {assignments} WHERE id = ?",
                (*values.values(), incident_id),
            )
            detail = action.mode if action.kind == "ack" else values.get("snoozed_until")
            [(action_id,)] = tx.rows(
                "INSERT INTO incident_actions (incident_id, action, actor, actor_name, detail,"
                " source, at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (incident_id, action.kind, action.actor, action.actor_name, detail, source, now),
            )
            if then is not None:
                then(tx, incident, int(action_id))
            return outcome

    def retire(self, invariant: str, at: datetime) -> list[StoredEvent]:
        """The invariant's file was removed: marked so (`removed_at`: a run in flight is
        then not stored, and `status` leaves it out), and what it had open closed so no
        incident stays open forever for a check that no longer runs. Closed as `retired`,
        never resolved: nothing was fixed, it stopped being looked at, and its messages say
        what still stood (the rows still offending, or that it could not be evaluated)."""
        now = stamp(at)
        events = []
        with self._db.transaction() as tx:
            lock_subject(tx, invariant, now)
            tx.run(
                "UPDATE invariant_state SET removed_at = ? WHERE invariant = ?", (now, invariant)
            )
            tx.run("DELETE FROM quarantines WHERE invariant = ?", (invariant,))
            for kind in RETIRABLE:
                current = open_incident(tx, invariant, kind)
                if current is None:
                    continue
                [(count,)] = tx.rows("SELECT last_count FROM incidents WHERE id = ?", (current.id,))
                resolve(tx, current.id, now, None, ended_as="retired")
                payload = {
                    "reason": retired_reason(kind, count),
                    "incident_kind": kind,
                    "count": count,
                }
                draft = EventDraft(RETIRED_EVENT, kind, payload)
                events.append(insert_event(tx, current.id, invariant, draft, now, None))
        return events

    def kept_value(self, name: str, make: Callable[[], str]) -> str:
        """A value made once and kept (the same for every daemon sharing this store)."""
        with self._db.transaction() as tx:
            tx.run(
                "INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                (name, make()),
            )
            [(value,)] = tx.rows("SELECT value FROM meta WHERE name = ?", (name,))
        return str(value)

    def claim_event(self, tx: Tx, event_id: int, at: datetime) -> bool:
        """Mark an event planned, once: of two daemons planning it, one gets True. Called
        by alerting in the transaction that writes the event's deliveries."""
        return bool(
            tx.rows(
                "UPDATE events SET dispatched_at = ? WHERE id = ? AND dispatched_at IS NULL"
                " RETURNING id",
                (stamp(at), event_id),
            )
        )
