"""The state store's writes inside one transaction: the subject's lock, its state and
open incidents, and the rows a transition writes (run, incident, keys, events). Functions of
`tx`, called by StateStore.record_run and its siblings, which own the transaction."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from monitor.clock import parse_stamp, stamp
from monitor.execution.results import RunResult
from monitor.store.claims import Claim
from monitor.store.context import IncidentContext
from monitor.store.incidents import (
    Decision,
    EndState,
    EventDraft,
    IncidentKind,
    InvariantState,
    OpenIncident,
    closes,
)
from monitor.store.records import StoredEvent
from monitor.store.storage import Tx
from monitor.store.stretches import CONTINUES, earliest_start


def maybe_clear_ack(tx: Tx, incident_id: int, draft: EventDraft) -> EventDraft:
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


def lock_subject(tx: Tx, subject: str, now: str) -> tuple[int, int, int | None]:
    """Serialise every transition of one subject (an invariant, or the replica):
    concurrent runs on a shared PostgreSQL store take turns on this row. Returns its
    consecutive violations and errors and its latest run's id."""
    tx.run(
        "INSERT INTO invariant_state (invariant, updated_at) VALUES (?, ?)"
        " ON CONFLICT (invariant) DO NOTHING",
        (subject, now),
    )
    [(violations, errors, last_run)] = tx.rows(
        "SELECT consecutive_violations, consecutive_errors, last_run_id FROM invariant_state"
        f" WHERE invariant = ?{tx.for_update}",
        (subject,),
    )
    return int(violations), int(errors), None if last_run is None else int(last_run)


def removed_since(tx: Tx, invariant: str, started_at: datetime | None) -> str | None:
    """When the invariant's file was found removed, if that was at or after `started_at`
    (a run that began before it ran the file that was removed); None otherwise."""
    if started_at is None:
        return None
    [(removed,)] = tx.rows(
        "SELECT removed_at FROM invariant_state WHERE invariant = ?", (invariant,)
    )
    return str(removed) if removed is not None and str(removed) >= stamp(started_at) else None


def load_state(tx: Tx, invariant: str, now: str) -> tuple[InvariantState, int | None]:
    """The invariant's state, locked, and its latest run's id."""
    violations, errors, last_run = lock_subject(tx, invariant, now)
    state = InvariantState(
        consecutive_violations=violations,
        consecutive_errors=errors,
        violation=open_incident(tx, invariant, "violation"),
        cannot_evaluate=open_incident(tx, invariant, "cannot_evaluate"),
    )
    return state, last_run


def open_incident(tx: Tx, invariant: str, kind: IncidentKind) -> OpenIncident | None:
    found = tx.rows(
        "SELECT id, opened_at, last_count, last_complete, complete_count, keyed_by"
        " FROM incidents"
        " WHERE invariant = ? AND kind = ? AND resolved_at IS NULL",
        (invariant, kind),
    )
    if not found:
        return None
    incident_id, opened_at, last_count, last_complete, complete_count, keyed_by = found[0]
    keys = tx.rows(
        "SELECT offending_key FROM incident_keys WHERE incident_id = ? AND gone_at IS NULL",
        (incident_id,),
    )
    return OpenIncident(
        int(incident_id),
        kind,
        parse_stamp(opened_at),
        frozenset(k for (k,) in keys),
        None if last_count is None else int(last_count),
        None if last_complete is None else bool(last_complete),
        None if complete_count is None else int(complete_count),
        None if keyed_by is None else str(keyed_by),
    )


def insert_run(
    tx: Tx,
    invariant: str,
    result: RunResult,
    finished_at: datetime,
    claim: Claim | None = None,
) -> int:
    started = result.started_at or finished_at
    [(run_id,)] = tx.rows(
        "INSERT INTO runs (invariant, started_at, finished_at, status, count, error,"
        " replica_lag_seconds, duration_ms, columns_json, sample_json, target, slot,"
        " listing_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            invariant,
            stamp(started),
            stamp(finished_at),
            result.status,
            result.count,
            result.error,
            result.replica_lag,
            result.duration_ms,
            json.dumps(result.columns),
            json.dumps(result.rows),
            result.target,
            stamp(claim.slot) if claim else None,
            result.listing_ms,
        ),
    )
    return int(run_id)


def extend_stretch(
    tx: Tx,
    last_run: int,
    result: RunResult,
    finished_at: datetime,
    claim: Claim | None = None,
) -> bool:
    """Add a run that held quietly to the invariant's latest row when that row is a held
    stretch it continues (stretches.CONTINUES); False, changing nothing, when it is not."""
    started = result.started_at or finished_at
    return bool(
        tx.rows(
            "UPDATE runs SET repeats = repeats + 1, last_started_at = ?, finished_at = ?,"
            " last_slot = ?, duration_ms = ?, replica_lag_seconds = ?, listing_ms = ?"
            f" WHERE {CONTINUES} RETURNING id",
            (
                stamp(started),
                stamp(finished_at),
                stamp(claim.slot) if claim else None,
                result.duration_ms,
                result.replica_lag,
                result.listing_ms,
                last_run,
                result.target,
                json.dumps(result.columns),
                earliest_start(started),
            ),
        )
    )


def insert_incident(
    tx: Tx,
    invariant: str,
    kind: IncidentKind,
    now: str,
    count: int | None,
    detail: str | None,
    target: str,
    context: IncidentContext | None = None,
    opening: RunResult | None = None,
) -> int:
    rows = (
        json.dumps({"columns": opening.columns, "rows": opening.rows})
        if opening is not None
        else None
    )
    [(incident_id,)] = tx.rows(
        "INSERT INTO incidents (invariant, kind, opened_at, first_count, last_count,"
        " last_seen_at, detail, context_json, opening_json, target, last_complete,"
        " complete_count, keyed_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            invariant,
            kind,
            now,
            count,
            count,
            now,
            detail,
            context.as_json() if context else None,
            rows,
            target,
            None if opening is None else int(opening.keys_complete),
            None if opening is None else count,
            None if opening is None else opening.keyed_by,
        ),
    )
    return int(incident_id)


def resolve(
    tx: Tx,
    incident_id: int,
    now: str,
    count: int | None,
    ended_as: EndState = "resolved",
) -> None:
    """Close the incident: resolved_at is when it closed, `ended_as` how. A retired
    incident keeps when it was last seen and its keys stay not gone: nothing saw them
    go, the invariant stopped being evaluated while they offended."""
    if ended_as == "retired":
        tx.run(
            "UPDATE incidents SET resolved_at = ?, ended_as = ? WHERE id = ?",
            (now, ended_as, incident_id),
        )
        return
    tx.run(
        "UPDATE incidents SET resolved_at = ?, ended_as = ?, last_seen_at = ?,"
        " last_count = COALESCE(?, last_count) WHERE id = ?",
        (now, ended_as, now, count, incident_id),
    )
    tx.run(
        "UPDATE incident_keys SET gone_at = ? WHERE incident_id = ? AND gone_at IS NULL",
        (now, incident_id),
    )


def apply(
    tx: Tx,
    invariant: str,
    state: InvariantState,
    decision: Decision,
    result: RunResult,
    now: str,
    context: IncidentContext | None,
) -> dict[IncidentKind, int]:
    ids: dict[IncidentKind, int] = {}
    violation = state.violation
    if decision.open_violation:
        ids["violation"] = insert_incident(
            tx, invariant, "violation", now, result.count, None, result.target, context, result
        )
    elif violation is not None:
        ids["violation"] = violation.id
        if decision.resolve_violation:
            resolve(tx, violation.id, now, 0)
        elif result.count is not None:
            # Only a run that counted moves the figures on: an error or a stale run
            # evaluated nothing, so the last count and when it was seen stay.
            tx.run(
                "UPDATE incidents SET last_count = ?, last_seen_at = ?, last_complete = ?,"
                " complete_count = ?, keyed_by = COALESCE(?, keyed_by) WHERE id = ?",
                (
                    result.count,
                    now,
                    int(result.keys_complete),
                    result.count,
                    result.keyed_by,
                    violation.id,
                ),
            )
            if decision.rekeyed:  # made another way: made again below (keys_appeared)
                tx.run("DELETE FROM incident_keys WHERE incident_id = ?", (violation.id,))
            for key in decision.keys_gone:
                tx.run(
                    "UPDATE incident_keys SET gone_at = ? WHERE incident_id = ?"
                    " AND offending_key = ?",
                    (now, violation.id, key),
                )
            for key, row in decision.keys_seen.items():
                if row is None:  # beyond the sample: its key only, the stored row stays
                    tx.run(
                        "UPDATE incident_keys SET last_seen_at = ? WHERE incident_id = ?"
                        " AND offending_key = ?",
                        (now, violation.id, key),
                    )
                else:
                    tx.run(
                        "UPDATE incident_keys SET last_seen_at = ?, row_json = ?"
                        " WHERE incident_id = ? AND offending_key = ?",
                        (now, json.dumps(row), violation.id, key),
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
        ids["cannot_evaluate"] = insert_incident(
            tx, invariant, "cannot_evaluate", now, None, result.error, result.target, context
        )
    elif cannot is not None:
        ids["cannot_evaluate"] = cannot.id
        if decision.resolve_cannot_evaluate:
            resolve(tx, cannot.id, now, None)
        else:
            tx.run(
                "UPDATE incidents SET last_seen_at = ?, detail = ? WHERE id = ?",
                (now, result.error, cannot.id),
            )
    return ids


def insert_event(
    tx: Tx,
    incident_id: int,
    invariant: str,
    draft: EventDraft,
    now: str,
    run_id: int | None,
) -> StoredEvent:
    payload = dict(draft.payload)
    if closes(draft.kind, draft.incident):
        [(opened_at,)] = tx.rows("SELECT opened_at FROM incidents WHERE id = ?", (incident_id,))
        payload.update(lasted(parse_stamp(opened_at), parse_stamp(now)))
    [(event_id,)] = tx.rows(
        "INSERT INTO events (incident_id, invariant, kind, created_at, run_id, payload_json)"
        " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
        (incident_id, invariant, draft.kind, now, run_id, json.dumps(payload)),
    )
    return StoredEvent(int(event_id), incident_id, invariant, draft.kind, parse_stamp(now), payload)


def lasted(opened_at: datetime, until: datetime) -> dict[str, Any]:
    return {"lasted_seconds": round((until - opened_at).total_seconds(), 3)}
