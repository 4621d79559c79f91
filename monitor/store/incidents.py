"""The incident state machine: given what an invariant's last runs looked like and what the
newest run saw, decide what changes and which events that produces. Pure: no I/O, no clock.

Rules:
- a violation incident opens after `for_runs` consecutive violated runs, stays open while
  violated (tracking which offending keys appeared and which are gone), and resolves on the
  first `ok` run;
- an `error` or `stale` run neither opens nor resolves a violation incident, and does not
  break a run of violations;
- after `error_threshold` consecutive errors a separate cannot-evaluate incident opens; the
  next successful run (ok or violated) resolves it;
- an incident open when its invariant's file is removed is retired, not resolved: it
  closed because nothing evaluates it any more, not because it held.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, get_args

from monitor.execution.results import Status
from monitor.store.key_order import key_order
from monitor.text import counted

IncidentKind = Literal[
    "violation",
    "cannot_evaluate",
    "replica_stale",
    "invalid_file",
    "target_unreachable",
    "quarantined",
]
# The incidents of one invariant that its file's removal closes as retired: what its file
# and its runs opened. A target's or a replica's belong to no file.
RETIRABLE: tuple[IncidentKind, ...] = (
    "violation",
    "cannot_evaluate",
    "quarantined",
    "invalid_file",
)
EventKind = Literal[
    "opened",
    "keys_appeared",
    "keys_gone",
    "resolved",
    "cannot_evaluate",
    "recovered",
    "replica_stale",
    "replica_fresh",
    "file_invalid",
    "file_fixed",
    "target_unreachable",
    "target_reachable",
    "quarantined",
    "unquarantined",
    "retired",
]
# How an incident stands: open, or closed one of two ways. `resolved` is the condition
# ending (the query held again, the replica caught up, ...); `retired` is the invariant's
# file being removed while the incident was open, which says nothing about the rows.
IncidentState = Literal["open", "resolved", "retired"]
EndState = Literal["resolved", "retired"]

# Shown in logs and (later) in alerts; the kinds of incident that are not violations have
# their own opening and closing event names so nobody mistakes an error for a violation.
OPEN_EVENT: dict[IncidentKind, EventKind] = {
    "violation": "opened",
    "cannot_evaluate": "cannot_evaluate",
    "replica_stale": "replica_stale",
    "invalid_file": "file_invalid",
    "target_unreachable": "target_unreachable",
    "quarantined": "quarantined",
}
CLOSE_EVENT: dict[IncidentKind, EventKind] = {
    "violation": "resolved",
    "cannot_evaluate": "recovered",
    "replica_stale": "replica_fresh",
    "invalid_file": "file_fixed",
    "target_unreachable": "target_reachable",
    "quarantined": "unquarantined",
}
# Closes any kind of incident whose invariant was removed (StateStore.retire).
RETIRED_EVENT: EventKind = "retired"
OPENING_EVENTS: frozenset[EventKind] = frozenset(OPEN_EVENT.values())
CLOSING_EVENTS: frozenset[EventKind] = frozenset(CLOSE_EVENT.values()) | {RETIRED_EVENT}
EVENT_KINDS: tuple[EventKind, ...] = get_args(EventKind)
# The events told in an open incident's thread: every kind but the openings.
FOLLOWING_EVENTS: frozenset[EventKind] = frozenset(EVENT_KINDS) - OPENING_EVENTS


def event_kind(text: str) -> EventKind:
    """A stored event's kind, read back: one this version does not know is an error, not a
    message worded by guess."""
    if text not in EVENT_KINDS:
        raise ValueError(f"unknown event kind {text!r} in the state store")
    return text


def closes(event: EventKind | str, incident: IncidentKind) -> bool:
    """Whether an event of this kind closes an incident of that kind."""
    return event == CLOSE_EVENT[incident] or event == RETIRED_EVENT


def while_open(kind: str, count: int | None) -> str:
    """What still stood when an incident was closed without being resolved: the words after
    "closed" in a retired incident's title, and after "removed" in its reply."""
    if kind == "violation":
        return f"while {counted(count, 'row')} still offended" if count else "while it was violated"
    return {
        "cannot_evaluate": "while it could not be evaluated",
        "quarantined": "while it was quarantined",
        "invalid_file": "while its file did not validate",
    }.get(kind, "while it was open")


def retired_reason(kind: str, count: int | None) -> str:
    """Why a retired incident closed, as its `retired` event says it."""
    return f"the invariant was removed {while_open(kind, count)}"


@dataclass(frozen=True)
class Observation:
    """What one run saw, as far as incidents are concerned."""

    status: Status
    count: int | None
    keys: Mapping[str, Any] = field(default_factory=dict)  # offending key -> its row (or None)
    keys_complete: bool = True  # False when more rows offend than were tracked
    error: str | None = None
    unreachable: bool = False  # its target could not take the run (the target's incident)
    keyed_by: str | None = None  # what its keys are made of; None: not said


@dataclass(frozen=True)
class OpenIncident:
    id: int
    kind: IncidentKind
    opened_at: datetime
    keys: frozenset[str] = frozenset()  # offending keys currently known to be open
    count: int | None = None  # offending rows at its last run; more than `keys` past tracking
    # Whether its last run brought back every offending row's key; None: not recorded (an
    # incident opened before schema step 18).
    complete: bool | None = None
    # The count of the run that wrote `complete`; None: written by an earlier release.
    complete_count: int | None = None
    keyed_by: str | None = None  # what its keys are made of; None: not recorded

    def knew_every_row(self) -> bool:
        """Whether its open keys are exactly the rows that offended at its last run: only
        then is a key not among them new, and are the keys that go all the rows that went.
        A run that saw only some keys cannot say which of the rest went, so they stay open
        and may include rows long gone; no count can tell that apart."""
        if self.complete is not None and self.complete_count is not None:
            # The flag of the run that wrote the count (a daemon of an earlier release
            # sharing the store moves the count on, not this): trusted as it is. Comparing
            # the count with the keys said no wherever a key repeats over several rows.
            return self.complete and self.complete_count == self.count
        counts_agree = self.count is None or self.count <= len(self.keys)
        # Both must say so when both are known: a daemon of an earlier release sharing the
        # store (a rolling upgrade) moves the count on and leaves the flag as it was.
        return counts_agree if self.complete is None else self.complete and counts_agree


@dataclass(frozen=True)
class InvariantState:
    consecutive_violations: int = 0
    consecutive_errors: int = 0
    violation: OpenIncident | None = None
    cannot_evaluate: OpenIncident | None = None


@dataclass(frozen=True)
class EventDraft:
    kind: EventKind
    incident: IncidentKind
    payload: dict[str, Any]


@dataclass(frozen=True)
class Decision:
    state: InvariantState  # counters updated; incident ids are the shell's to fill in
    open_violation: bool = False
    resolve_violation: bool = False
    keys_appeared: dict[str, Any] = field(default_factory=dict)
    keys_gone: frozenset[str] = frozenset()
    # Still offending: their last_seen moves on, and a key this run fetched whole gets its
    # row as it is now (a message shows a key's stored row; it was the first run's forever).
    keys_seen: dict[str, Any] = field(default_factory=dict)  # key -> its row now, or None
    # The keys are made another way than the open ones were: those are dropped, and
    # `keys_appeared` holds the keys made anew (no row is said to come or go).
    rekeyed: bool = False
    open_cannot_evaluate: bool = False
    resolve_cannot_evaluate: bool = False
    events: list[EventDraft] = field(default_factory=list)


def decide(
    state: InvariantState, seen: Observation, for_runs: int = 1, error_threshold: int = 3
) -> Decision:
    # A stale replica, or a target that could not take the run: for the invariant's own
    # incidents nothing was seen, so nothing opens or resolves (the target's incident says it).
    if seen.status == "stale" or seen.unreachable:
        return Decision(state)
    if seen.status == "error":
        return _after_error(state, seen, error_threshold)

    events: list[EventDraft] = []
    resolve_cannot = state.cannot_evaluate is not None
    if resolve_cannot:
        events.append(EventDraft("recovered", "cannot_evaluate", {"status": seen.status}))
    state = replace(state, consecutive_errors=0)

    if seen.status == "ok":
        resolve = state.violation is not None
        if resolve:
            events.append(EventDraft("resolved", "violation", {"count": 0}))
        return Decision(
            replace(state, consecutive_violations=0),
            resolve_violation=resolve,
            resolve_cannot_evaluate=resolve_cannot,
            events=events,
        )

    violations = state.consecutive_violations + 1
    state = replace(state, consecutive_violations=violations)
    if state.violation is None:
        if violations < for_runs:
            return Decision(state, resolve_cannot_evaluate=resolve_cannot, events=events)
        events.append(
            EventDraft(
                "opened",
                "violation",
                {
                    "count": seen.count,
                    "keys": sorted(seen.keys, key=key_order),
                    "complete": seen.keys_complete,
                },
            )
        )
        return Decision(
            state,
            open_violation=True,
            keys_appeared=dict(seen.keys),
            resolve_cannot_evaluate=resolve_cannot,
            events=events,
        )

    if None not in (seen.keyed_by, state.violation.keyed_by) and (
        seen.keyed_by != state.violation.keyed_by
    ):
        # The file's `key:` changed (or, without one, its columns): keys made one way say
        # nothing of keys made the other, so no row is new or gone; said as "2 new, 2 gone"
        # for rows that never changed. The keys are made again, silently.
        return Decision(
            state,
            keys_appeared=dict(seen.keys),
            rekeyed=True,
            resolve_cannot_evaluate=resolve_cannot,
            events=events,
        )
    known = state.violation.keys
    appeared = {k: v for k, v in seen.keys.items() if k not in known}
    # Keys beyond the tracked window may still offend, so "gone" is only claimed when the
    # run saw every offending key.
    gone = frozenset(known - seen.keys.keys()) if seen.keys_complete else frozenset()
    # Past daemon.track_keys the keys compared are the first ones only, so the numbers of
    # rows that came and went are lower bounds (`complete`: False), and messages say so.
    # And "new" only when every row that offended before was known: otherwise a key not
    # known may have offended all along (untracked), and none can be called new. It is
    # tracked from now on all the same (keys_appeared below), so it can be seen to go.
    knew_all = state.violation.knew_every_row()
    if appeared and knew_all:
        events.append(
            EventDraft(
                "keys_appeared",
                "violation",
                {
                    "count": seen.count,
                    "keys": sorted(appeared, key=key_order),
                    "complete": seen.keys_complete,
                },
            )
        )
    if gone:
        events.append(
            EventDraft(
                "keys_gone",
                "violation",
                {
                    "count": seen.count,
                    "keys": sorted(gone, key=key_order),
                    "complete": knew_all,
                },
            )
        )
    return Decision(
        state,
        keys_appeared=appeared,
        keys_gone=gone,
        keys_seen={k: row for k, row in seen.keys.items() if k in known},
        resolve_cannot_evaluate=resolve_cannot,
        events=events,
    )


def _after_error(state: InvariantState, seen: Observation, threshold: int) -> Decision:
    errors = state.consecutive_errors + 1
    state = replace(state, consecutive_errors=errors)
    if state.cannot_evaluate is None and errors >= threshold:
        event = EventDraft(
            "cannot_evaluate",
            "cannot_evaluate",
            {"error": seen.error, "consecutive_errors": errors},
        )
        return Decision(state, open_cannot_evaluate=True, events=[event])
    return Decision(state)


def toggle(
    open_incident: OpenIncident | None, active: bool, kind: IncidentKind, payload: dict[str, Any]
) -> EventDraft | None:
    """For conditions that are simply on or off (replica stale, invalid file)."""
    if active and open_incident is None:
        return EventDraft(OPEN_EVENT[kind], kind, payload)
    if not active and open_incident is not None:
        return EventDraft(CLOSE_EVENT[kind], kind, payload)
    return None
