"""Held stretches: runs that held one after another, changing nothing, are kept as one row
(monitor/store/stretches.py), on both stores; and what the readers make of such a row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from monitor.clock import stamp
from monitor.execution.results import RunResult
from monitor.store import state_queries
from monitor.store.claims import Claim, Claims, Due
from monitor.store.incidents import Decision, EventDraft, InvariantState
from monitor.store.state import StateStore
from monitor.store.stretches import STRETCH, held_quietly
from monitor.web.reads import read_history

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def held(at: datetime, ms: float = 5.0, target: str = "default", **kw: object) -> RunResult:
    return RunResult.counted(
        "refunds", 0, ["id"], [], started_at=at, duration_ms=ms, target=target, **kw
    )


def violated(at: datetime) -> RunResult:
    return RunResult.counted("refunds", 1, ["id"], [{"id": 7}], started_at=at, duration_ms=9.0)


def record(store: StateStore, result: RunResult) -> None:
    assert result.started_at is not None
    store.record_run("refunds", result, result.started_at + timedelta(seconds=2))


def rows(store: StateStore) -> list[tuple[str, int | None, int, datetime, datetime | None]]:
    """Oldest first: status, count, repeats, first start, last start."""
    return [
        (r.status, r.count, r.repeats, r.started_at, r.last_started_at)
        for r in reversed(store.runs("refunds", limit=100))
    ]


def test_runs_that_hold_one_after_another_are_one_row_with_their_last_runs_figures(
    store: StateStore,
) -> None:
    for n in range(5):
        record(store, held(T0 + n * MINUTE, ms=10.0 + n, replica_lag=float(n)))
    [run] = store.runs("refunds", limit=100)
    assert (run.status, run.count, run.repeats) == ("ok", 0, 5)
    assert (run.started_at, run.last_started_at) == (T0, T0 + 4 * MINUTE)
    assert run.finished_at == T0 + 4 * MINUTE + timedelta(seconds=2)
    assert (run.duration_ms, run.replica_lag_seconds) == (14.0, 4.0)  # the last run's
    assert [r.id for r in store.latest_runs()] == [run.id]


def test_a_violation_an_error_or_a_stale_run_is_a_row_of_its_own_and_ends_the_stretch(
    store: StateStore,
) -> None:
    steps = [
        held(T0),
        held(T0 + MINUTE),
        violated(T0 + 2 * MINUTE),  # opens an incident
        held(T0 + 3 * MINUTE),  # resolves it: a row of its own, which the next extends
        held(T0 + 4 * MINUTE),
        RunResult.failed("refunds", "boom", started_at=T0 + 5 * MINUTE),
        held(T0 + 6 * MINUTE),
        RunResult(
            "refunds", "stale", None, ["id"], error="replica stale", started_at=T0 + 7 * MINUTE
        ),
        held(T0 + 8 * MINUTE),
        held(T0 + 9 * MINUTE),
    ]
    for step in steps:
        record(store, step)
    assert rows(store) == [
        ("ok", 0, 2, T0, T0 + MINUTE),
        ("violated", 1, 1, T0 + 2 * MINUTE, None),
        ("ok", 0, 2, T0 + 3 * MINUTE, T0 + 4 * MINUTE),
        ("error", None, 1, T0 + 5 * MINUTE, None),
        ("ok", 0, 1, T0 + 6 * MINUTE, None),
        ("stale", None, 1, T0 + 7 * MINUTE, None),
        ("ok", 0, 2, T0 + 8 * MINUTE, T0 + 9 * MINUTE),
    ]
    # The incident's events name the runs that caused them, which are rows of their own.
    with store.storage.transaction() as tx:
        found = tx.rows(
            "SELECT e.kind, r.status, r.repeats FROM events e JOIN runs r ON r.id = e.run_id"
            " ORDER BY e.id"
        )
    assert found == [("opened", "violated", 1), ("resolved", "ok", 2)]


def test_a_stretch_closes_an_hour_after_its_first_run_and_a_new_one_begins(
    store: StateStore,
) -> None:
    every = timedelta(minutes=10)
    for n in range(13):  # two hours of runs every ten minutes
        record(store, held(T0 + n * every))
    assert timedelta(hours=1) == STRETCH
    assert rows(store) == [
        ("ok", 0, 7, T0, T0 + 6 * every),  # the run at 60 minutes still joins
        ("ok", 0, 6, T0 + 7 * every, T0 + 12 * every),
    ]


def test_another_target_or_other_columns_begin_a_new_stretch(store: StateStore) -> None:
    record(store, held(T0))
    record(store, held(T0 + MINUTE, target="eu"))
    record(store, held(T0 + 2 * MINUTE, target="eu"))
    other = RunResult.counted(
        "refunds", 0, ["id", "amount"], [], started_at=T0 + 3 * MINUTE, target="eu"
    )
    record(store, other)
    assert [(r.target, r.columns, r.repeats) for r in reversed(store.runs("refunds"))] == [
        ("default", ["id"], 1),
        ("eu", ["id"], 2),
        ("eu", ["id", "amount"], 1),
    ]


def test_a_claimed_stretch_keeps_its_first_and_last_slot_and_each_slot_once(
    store: StateStore,
) -> None:
    claims = Claims(store.storage, "d1", timedelta(seconds=30))
    for n in range(3):
        slot = T0 + n * MINUTE
        assert claims.claim(Due("refunds", slot), slot) == "claimed"
        store.record_run("refunds", held(slot), slot, claim=Claim("refunds", slot, "d1"))
    with store.storage.transaction() as tx:
        found = tx.rows("SELECT slot, last_slot, repeats FROM runs")
    assert found == [(stamp(T0), stamp(T0 + 2 * MINUTE), 3)]


def test_pruning_keeps_the_latest_stretch_and_drops_older_rows_by_their_last_run(
    store: StateStore,
) -> None:
    record(store, held(T0))
    record(store, violated(T0 + MINUTE))
    for n in range(2, 5):
        record(store, held(T0 + n * MINUTE))
    # The stretch began at T0 + 2m and its last run ended at T0 + 4m + 2s: it is kept.
    assert store.prune_runs(T0 + 3 * MINUTE) == 2
    assert rows(store) == [("ok", 0, 3, T0 + 2 * MINUTE, T0 + 4 * MINUTE)]


def test_pruning_removes_a_backlog_in_batches_each_committed(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of PRUNE_BATCH runs, each its own (long) transaction: a backlog bigger than
    one transaction can remove in its bound is worked off over several."""
    monkeypatch.setattr(state_queries, "PRUNE_BATCH", 2)
    for n in range(6):
        record(store, violated(T0 + n * MINUTE))  # a row each: a violation is no stretch
    assert store.prune_runs(T0 + 10 * MINUTE) == 5  # the latest run is always kept
    assert [r[0] for r in rows(store)] == ["violated"]


def test_a_prune_stops_between_batches_once_told(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon stopping mid-prune: the prune ran on into the store's closing, and logged
    "the state store failed … Cannot operate on a closed database" after "stopped"."""
    monkeypatch.setattr(state_queries, "PRUNE_BATCH", 2)
    for n in range(6):
        record(store, violated(T0 + n * MINUTE))
    asked: list[int] = []

    def go_on() -> bool:
        asked.append(len(asked))
        return len(asked) <= 2  # two batches, then the daemon stops

    assert store.prune_runs(T0 + 10 * MINUTE, go_on) == 4
    assert len(asked) == 3
    assert len(rows(store)) == 2
    assert store.prune_runs(T0 + 10 * MINUTE) == 1  # the next turn takes the rest


# Refuses to delete a run once only two are left: the third batch of a 5-run backlog fails.
FAIL_THIRD_BATCH = {
    "sqlite": [
        "CREATE TRIGGER third_batch_fails BEFORE DELETE ON runs"
        " WHEN (SELECT count(*) FROM runs) <= 2"
        " BEGIN SELECT RAISE(ABORT, 'the third batch fails'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION third_batch_fails() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN IF (SELECT count(*) FROM runs) <= 2 THEN"
        " RAISE EXCEPTION 'the third batch fails'; END IF; RETURN OLD; END $$",
        "CREATE TRIGGER third_batch_fails BEFORE DELETE ON runs"
        " FOR EACH ROW EXECUTE FUNCTION third_batch_fails()",
    ],
}


def test_a_failed_batch_of_the_prune_keeps_what_the_batches_before_it_removed(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch is committed on its own: a prune that fails at its third batch (a store
    that went away, a bound met) has still removed the first two batches' runs for good."""
    monkeypatch.setattr(state_queries, "PRUNE_BATCH", 2)
    for n in range(6):
        record(store, violated(T0 + n * MINUTE))
    with store.storage.transaction() as tx:
        for statement in FAIL_THIRD_BATCH[store.storage.kind]:
            tx.run(statement)
    with pytest.raises(Exception, match="the third batch fails"):
        store.prune_runs(T0 + 10 * MINUTE)
    assert len(rows(store)) == 2  # 6 runs less two committed batches of two


def test_the_history_draws_a_stretch_from_its_first_run_to_its_last_and_counts_its_runs(
    store: StateStore,
) -> None:
    for n in range(30):
        record(store, held(T0 + n * MINUTE))
    record(store, violated(T0 + 30 * MINUTE))
    whole = read_history(store, "refunds", T0 - MINUTE)
    assert whole.runs == [(T0 + 30 * MINUTE, 1), (T0 + 29 * MINUTE, 0), (T0, 0)]
    assert (whole.repeats, whole.truncated, whole.reaches_back) == (31, False, False)
    # A window that begins inside the stretch: drawn from the window's start, and every
    # run of the stretch counted, saying so (when each of them ran was not kept).
    since = T0 + 10 * MINUTE
    part = read_history(store, "refunds", since)
    assert part.runs == [(T0 + 30 * MINUTE, 1), (T0 + 29 * MINUTE, 0), (since, 0)]
    assert (part.repeats, part.truncated, part.reaches_back) == (31, False, True)
    # A window after the stretch's last run: the violated run alone.
    late = read_history(store, "refunds", T0 + 29 * MINUTE + timedelta(seconds=1))
    assert (late.runs, late.repeats) == ([(T0 + 30 * MINUTE, 1)], 1)
    # A limit that cuts through the stretch's two points: it is left out, said truncated.
    cut = read_history(store, "refunds", T0 - MINUTE, limit=2)
    assert (cut.runs, cut.truncated) == ([(T0 + 30 * MINUTE, 1)], True)


def decision(**changes: object) -> Decision:
    return Decision(InvariantState(), **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("result", "made", "quiet"),
    [
        (held(T0), decision(), True),
        (violated(T0), decision(), False),
        (RunResult.failed("refunds", "boom"), decision(), False),
        (held(T0), decision(resolve_violation=True), False),
        (held(T0), decision(resolve_cannot_evaluate=True), False),
        (held(T0), decision(events=[EventDraft("recovered", "cannot_evaluate", {})]), False),
        (held(T0), decision(keys_gone=frozenset({"[1]"})), False),
        (RunResult("refunds", "ok", None), decision(), False),  # ok but counted nothing
    ],
)
def test_only_a_run_that_held_and_changed_nothing_may_extend_a_stretch(
    result: RunResult, made: Decision, quiet: bool
) -> None:
    assert held_quietly(result, made) is quiet
