"""The front page's read of the store (reads.read_overview), on a real SQLite file and a
real PostgreSQL store: exactly the runs it must show, whatever statement reads them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from monitor.clock import stamp
from monitor.store.state import StateStore
from monitor.store.storage import Tx
from monitor.web.reads import SPARK_RUNS, Overview, RunPoint, read_overview

START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
HOSTILE = 'o\'brien ✓ "q"; DROP TABLE runs --'

# (invariant, status, count, error, lag, listing_ms, target), in the order they are stored:
# interleaved, so a read that mixed invariants up or took the wrong end would show it.
Planned = tuple[str, str, int | None, str | None, float | None, float | None, str]


def planned() -> list[Planned]:
    runs: list[Planned] = []
    for k in range(45):
        count = None if k % 11 == 5 else k % 4
        status = "error" if count is None else "violated" if count else "ok"
        error = "timeout after 30s" if count is None else None
        lag = None if k % 7 == 3 else k / 10
        listing = 12.5 + k if k % 3 == 0 else None
        runs.append(("alpha", status, count, error, lag, listing, "default"))
        if k % 15 == 0:
            runs.append(("beta", "ok", 0, None, 0.0, None, "billing"))
        if k < 31:
            runs.append((HOSTILE, "violated", k + 1, None, 0.5, None, "default"))
        if k < 2:
            runs.append(("state_only", "ok", 0, None, None, None, "default"))
            runs.append(("orphan", "ok", 0, None, None, None, "default"))
            runs.append(("runs_no_state", "violated", 3, None, 1.0, None, "default"))
    return runs


def fill(store: StateStore, runs: list[Planned]) -> list[RunPoint]:
    """Store `runs`, one a minute ("beta"'s as held stretches of 60), and the state rows the
    daemon would leave (and one for a subject such as "(replica)", which has no runs); the
    points as they were stored."""

    def stretch(name: str, i: int) -> tuple[int, datetime | None]:
        return (60, START + timedelta(minutes=i + 59)) if name == "beta" else (1, None)

    def writing(tx: Tx) -> list[int]:
        for i, (name, status, count, error, lag, listing, target) in enumerate(runs):
            at = START + timedelta(minutes=i)
            repeats, last = stretch(name, i)
            tx.run(
                "INSERT INTO runs (invariant, started_at, finished_at, status, count, error,"
                " duration_ms, replica_lag_seconds, target, listing_ms, repeats,"
                " last_started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    name,
                    stamp(at),
                    stamp(at + timedelta(seconds=2)),
                    status,
                    count,
                    error,
                    100.0 + i,
                    lag,
                    target,
                    listing,
                    repeats,
                    None if last is None else stamp(last),
                ),
            )
        for name in ("alpha", "beta", HOSTILE, "state_only", "(replica)"):
            tx.run(
                "INSERT INTO invariant_state (invariant, last_run_id, updated_at)"
                " VALUES (?, (SELECT max(id) FROM runs WHERE invariant = ?), ?)",
                (name, name, stamp(START)),
            )
        return [int(i) for (i,) in tx.rows("SELECT id FROM runs ORDER BY id")]

    ids = store.read(writing)
    assert len(ids) == len(runs)
    return [
        RunPoint(
            run_id,
            name,
            START + timedelta(minutes=i),
            START + timedelta(minutes=i, seconds=2),
            status,
            count,
            100.0 + i,
            lag,
            error,
            target,
            listing,
            *stretch(name, i),
        )
        for i, (run_id, (name, status, count, error, lag, listing, target)) in enumerate(
            zip(ids, runs, strict=True)
        )
    ]


def test_the_overview_reads_each_invariants_last_runs_and_nothing_else(
    store: StateStore,
) -> None:
    stored = fill(store, planned())

    def last(name: str) -> list[RunPoint]:
        return [p for p in stored if p.invariant == name][-SPARK_RUNS:]

    shown = ("alpha", "beta", HOSTILE, "state_only", "runs_no_state")
    expected = Overview(
        latest={name: last(name)[-1] for name in shown},
        counts={name: [p.count for p in last(name)] for name in shown},
        open_incidents=[],
        mutes=[],
        # beta's three rows are held stretches of 60 runs each: the sparkline says 180.
        runs={"beta": 180},
    )
    # Loaded by the daemon or known to the store; "orphan" is neither, "never_ran" and
    # "(replica)" have no run to show.
    loaded = ["alpha", "never_ran", "runs_no_state", HOSTILE]
    assert read_overview(store, loaded) == expected
    assert [len(expected.counts[n]) for n in shown] == [SPARK_RUNS, 3, SPARK_RUNS, 2, 2]
    assert None in expected.counts["alpha"]  # runs that counted nothing are kept as such


def test_the_overview_of_an_empty_store_is_empty(store: StateStore) -> None:
    assert read_overview(store, ["alpha"]) == Overview({}, {}, [], [])
    assert read_overview(store, []) == Overview({}, {}, [], [])
