"""The incident state machine on its own (no database, no clock), and the keys it is given
back run after run by the state store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from alerts.deliveries import DELIVERY_STATES, delivery_state
from monitor.execution.results import RunResult
from monitor.store.incidents import (
    EVENT_KINDS,
    InvariantState,
    Observation,
    OpenIncident,
    decide,
    event_kind,
    toggle,
)
from monitor.store.state import StateStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def violated(*keys: str, complete: bool = True) -> Observation:
    return Observation("violated", len(keys), {k: {"id": k} for k in keys}, complete)


OK = Observation("ok", 0)
ERROR = Observation("error", None, error="relation does not exist")
STALE = Observation("stale", None)


def open_violation(*keys: str) -> OpenIncident:
    return OpenIncident(7, "violation", T0, frozenset(keys))


def test_a_first_violated_run_opens_an_incident_with_its_keys() -> None:
    decision = decide(InvariantState(), violated("a", "b"))
    assert decision.open_violation is True
    assert decision.keys_appeared == {"a": {"id": "a"}, "b": {"id": "b"}}
    assert [(e.kind, e.payload["keys"]) for e in decision.events] == [("opened", ["a", "b"])]


def test_for_n_waits_for_n_consecutive_violated_runs() -> None:
    first = decide(InvariantState(), violated("a"), for_runs=3)
    second = decide(first.state, violated("a"), for_runs=3)
    third = decide(second.state, violated("a"), for_runs=3)
    assert [d.open_violation for d in (first, second, third)] == [False, False, True]
    assert [len(d.events) for d in (first, second, third)] == [0, 0, 1]


def test_an_ok_run_between_violations_restarts_the_for_count() -> None:
    state = decide(InvariantState(), violated("a"), for_runs=2).state
    state = decide(state, OK, for_runs=2).state
    assert decide(state, violated("a"), for_runs=2).open_violation is False


def test_an_error_neither_opens_nor_resolves_nor_breaks_a_run_of_violations() -> None:
    state = decide(InvariantState(), violated("a"), for_runs=2).state
    after_error = decide(state, ERROR, for_runs=2)
    assert (after_error.open_violation, after_error.events) == (False, [])
    assert decide(after_error.state, violated("a"), for_runs=2).open_violation is True
    opened = InvariantState(consecutive_violations=1, violation=open_violation("a"))
    during = decide(opened, ERROR)
    assert (during.resolve_violation, during.events) == (False, [])


def test_a_stale_run_changes_nothing() -> None:
    state = InvariantState(consecutive_violations=1, violation=open_violation("a"))
    decision = decide(state, STALE)
    assert decision.state == state
    assert decision.events == []


def test_new_and_gone_keys_become_events_while_the_incident_stays_open() -> None:
    state = InvariantState(consecutive_violations=1, violation=open_violation("a", "b"))
    decision = decide(state, violated("b", "c"))
    assert decision.keys_appeared == {"c": {"id": "c"}}
    assert decision.keys_gone == frozenset({"a"})
    assert decision.keys_seen == {"b": {"id": "b"}}
    assert [(e.kind, e.payload["keys"]) for e in decision.events] == [
        ("keys_appeared", ["c"]),
        ("keys_gone", ["a"]),
    ]


def test_keys_are_not_called_gone_when_the_run_saw_only_some_of_them() -> None:
    state = InvariantState(consecutive_violations=1, violation=open_violation("a", "b"))
    decision = decide(state, violated("b", complete=False))
    assert decision.keys_gone == frozenset()
    assert decision.events == []


def test_the_first_ok_run_resolves() -> None:
    state = InvariantState(consecutive_violations=4, violation=open_violation("a"))
    decision = decide(state, OK)
    assert decision.resolve_violation is True
    assert decision.state.consecutive_violations == 0
    assert [e.kind for e in decision.events] == ["resolved"]


def test_consecutive_errors_open_a_cannot_evaluate_incident_once() -> None:
    state = InvariantState()
    opened = []
    for _ in range(5):
        decision = decide(state, ERROR, error_threshold=3)
        opened.append(decision.open_cannot_evaluate)
        state = decision.state
        if decision.open_cannot_evaluate:
            state = InvariantState(
                consecutive_errors=state.consecutive_errors,
                cannot_evaluate=OpenIncident(9, "cannot_evaluate", T0),
            )
    assert opened == [False, False, True, False, False]


def test_a_successful_run_recovers_a_cannot_evaluate_incident() -> None:
    state = InvariantState(
        consecutive_errors=3, cannot_evaluate=OpenIncident(9, "cannot_evaluate", T0)
    )
    decision = decide(state, violated("a"))
    assert decision.resolve_cannot_evaluate is True
    assert [e.kind for e in decision.events] == ["recovered", "opened"]


def test_on_off_conditions_open_once_and_close_once() -> None:
    incident = OpenIncident(3, "replica_stale", T0)
    assert toggle(None, True, "replica_stale", {}).kind == "replica_stale"  # type: ignore[union-attr]
    assert toggle(incident, True, "replica_stale", {}) is None
    assert toggle(incident, False, "replica_stale", {}).kind == "replica_fresh"  # type: ignore[union-attr]
    assert toggle(None, False, "replica_stale", {}) is None


def test_a_run_its_target_could_not_take_neither_opens_nor_resolves_nor_counts() -> None:
    """The unreachable rule lives in decide: an error that is the target not answering is
    covered by the target's own incident, so the invariant's state does not move at all."""
    unreachable = Observation("error", None, error="cannot connect", unreachable=True)
    open_state = InvariantState(consecutive_violations=2, violation=open_violation("a"))
    assert decide(open_state, unreachable) == decide(open_state, STALE)
    assert decide(open_state, unreachable).state == open_state
    assert decide(open_state, unreachable).events == []
    fresh = InvariantState(consecutive_errors=2)
    assert decide(fresh, unreachable, error_threshold=3).state == fresh
    # The same error from a target that answered is counted, and opens at the threshold.
    reachable = Observation("error", None, error="cannot connect")
    assert decide(fresh, reachable, error_threshold=3).open_cannot_evaluate is True


def test_an_event_kind_or_delivery_state_this_version_does_not_know_is_an_error() -> None:
    assert [event_kind(k) for k in EVENT_KINDS] == list(EVENT_KINDS)
    assert [delivery_state(s) for s in DELIVERY_STATES] == ["PENDING", "UNKNOWN", "SENT", "FAILED"]
    with pytest.raises(ValueError, match="unknown event kind 'reopened' in the state store"):
        event_kind("reopened")
    with pytest.raises(ValueError, match="unknown delivery state 'sent' in the state store"):
        delivery_state("sent")


def _told(store: StateStore, runs: list[RunResult]) -> list[list[tuple[str, object, object]]]:
    """The events each run that wrote any wrote, a minute apart: (kind, keys, complete)."""
    opened = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        [(e.kind, e.payload["keys"], e.payload["complete"]) for e in found]
        for n, run in enumerate(runs)
        if (found := store.record_run("jobs", run, opened + timedelta(minutes=n)))
    ]


def _keys_run(keys: list[int], count: int) -> RunResult:
    """A violated run that brought back the keys of its first `keys` rows, of `count`."""
    rows = [{"id": k} for k in keys]
    return RunResult.counted(
        "jobs",
        count,
        ["id"],
        rows,
        keys={f"[{k}]": row for k, row in zip(keys, rows, strict=True)},
        keys_complete=len(keys) == count,
    )


def test_a_row_untracked_through_an_incomplete_run_is_never_called_new(
    store: StateStore,
) -> None:
    """Two keys tracked. Rows 1 and 2 offend; then 1 and 2 go as 3, 4 and 5 arrive (3 and 4
    are tracked, and new); then 5 and 6 offend. Row 5 offended at the run before, beyond
    the tracked keys: it is not new, though the open keys (1 to 4, since the incomplete run
    could not say 1 and 2 went) outnumber the rows that run counted."""
    runs = [_keys_run([1, 2], 2), _keys_run([3, 4], 3), _keys_run([5, 6], 2)]
    assert _told(store, runs) == [
        [("opened", ["[1]", "[2]"], True)],
        [("keys_appeared", ["[3]", "[4]"], False)],
        [("keys_gone", ["[1]", "[2]", "[3]", "[4]"], False)],
    ]


def test_a_run_an_earlier_release_stored_leaves_the_keys_judged_by_the_counts(
    store: StateStore,
) -> None:
    """A rolling upgrade: a daemon of the previous release, sharing the migrated store,
    moves the incident's count on and leaves its record of a complete run as it was. Rows
    3 and 4 offended, untracked, at that daemon's run: they are not new."""
    opened = datetime(2026, 1, 1, tzinfo=UTC)
    store.record_run("jobs", _keys_run([1, 2], 2), opened)
    with store.storage.transaction() as tx:  # what the earlier release writes for its run
        tx.run("UPDATE incidents SET last_count = 5 WHERE invariant = 'jobs'")
    events = store.record_run("jobs", _keys_run([3, 4], 5), opened + timedelta(minutes=2))
    assert [(e.kind, e.payload["keys"]) for e in events] == []


def test_keys_not_tracked_say_nothing_of_which_rows_are_new_or_gone(store: StateStore) -> None:
    """daemon.track_keys 0: a run brings back no keys, and is no complete run. When keys are
    tracked again, rows that offended all along are not announced as new."""
    opened = datetime(2026, 1, 1, tzinfo=UTC)
    untracked = RunResult.counted("jobs", 3, ["id"], [], keys={}, keys_complete=False)
    assert store.record_run("jobs", untracked, opened)[0].kind == "opened"
    events = store.record_run("jobs", _keys_run([1, 2, 3], 3), opened + timedelta(minutes=1))
    assert [(e.kind, e.payload["keys"]) for e in events] == []


def test_a_key_repeated_over_several_rows_still_tells_new_and_gone_rows(
    store: StateStore,
) -> None:
    """From the message-truth review: keyed on `k`, rows (1, a), (1, b) and (2, c) offend.
    Key 3 arrived and no reply said so; key 2 went and the reply blamed daemon.track_keys,
    since three rows outnumbered two keys though every row's key had been read."""

    def run(keys: list[int], count: int) -> RunResult:
        found = {f"[{k}]": {"k": k} for k in keys}
        return RunResult.counted("jobs", count, ["k"], [], keys=found, keys_complete=True)

    runs = [run([1, 2], 3), run([1, 2, 3], 4), run([1, 3], 3)]
    assert _told(store, runs) == [
        [("opened", ["[1]", "[2]"], True)],
        [("keys_appeared", ["[3]"], True)],
        [("keys_gone", ["[2]"], True)],
    ]
