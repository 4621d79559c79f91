"""The daemon's evaluation path against a real PostgreSQL and both state stores: incidents
open, change and resolve over scripted data changes with exactly the expected events."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from builders import build_daemon, daemon_config
from helpers import PRIVILEGED, FakeClock, items_table, lock_waits, sql, wait_for

from monitor.clock import Clock, utc_now
from monitor.config import DaemonConfig
from monitor.daemon.daemon import Daemon
from monitor.store.state import REPLICA_SUBJECT, StateStore

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BAD_ROWS = """\
-- description: No row is marked bad.
-- key: [id]
-- schedule: every 1s
SELECT id, note FROM items WHERE bad
"""


@pytest.fixture
def monitored(database: str, tmp_path: Path) -> tuple[str, Path]:
    items_table(database, rows=5)
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "bad_rows.sql").write_text(BAD_ROWS)
    return database, folder


def make_daemon(
    dsn: str, folder: Path, store: StateStore, clock: Clock | None = None, **daemon: object
) -> Daemon:
    config = daemon_config(folder, daemon=daemon)
    return build_daemon(config, dsn, store, clock=clock or FakeClock(START))


@pytest.fixture
def daemon(monitored: tuple[str, Path], store: StateStore) -> Iterator[Daemon]:
    dsn, folder = monitored
    made = make_daemon(dsn, folder, store, FakeClock(START), cannot_evaluate_after=2)
    made.reload()
    yield made
    made.databases.close()


def kinds(store: StateStore, invariant: str = "bad_rows") -> list[tuple[str, object]]:
    return [(e.kind, e.payload.get("keys")) for e in store.events(invariant)]


def test_an_incident_opens_gains_and_loses_keys_and_resolves(
    daemon: Daemon, monitored: tuple[str, Path], store: StateStore
) -> None:
    dsn, _ = monitored
    clock = daemon.clock
    assert isinstance(clock, FakeClock)
    steps = [
        ("", "ok"),
        ("UPDATE items SET bad = true WHERE id IN (1, 2)", "violated"),
        ("UPDATE items SET bad = (id IN (2, 3))", "violated"),
        ("", "violated"),
        ("UPDATE items SET bad = false", "ok"),
        ("", "ok"),
    ]
    statuses = []
    for change, _expected in steps:
        if change:
            sql(dsn, change)
        clock.advance(60)
        result = daemon.evaluate("bad_rows")
        assert result is not None
        statuses.append(result.status)
    assert statuses == [expected for _, expected in steps]
    assert kinds(store) == [
        ("opened", ["[1]", "[2]"]),
        ("keys_appeared", ["[3]"]),
        ("keys_gone", ["[1]"]),
        ("resolved", None),
    ]
    resolved = store.events("bad_rows")[-1]
    assert resolved.payload["lasted_seconds"] == 180.0
    [incident] = store.incidents("bad_rows")
    assert (incident.kind, incident.first_count, incident.last_count) == (
        "violation",
        2,
        0,
    )
    keys = {k.key: k for k in store.incident_keys(incident.id)}
    assert set(keys) == {"[1]", "[2]", "[3]"}
    assert keys["[3]"].row == {"id": 3, "note": "item 3"}
    assert all(k.gone_at is not None for k in keys.values())
    assert store.open_incidents() == []
    # Six runs in five rows: the last ok run changed nothing, so it joined the run that
    # resolved the incident as one held stretch (monitor/store/stretches.py).
    runs = store.runs("bad_rows", limit=100)
    assert [(r.status, r.repeats) for r in runs] == [
        ("ok", 2),
        ("violated", 1),
        ("violated", 1),
        ("violated", 1),
        ("ok", 1),
    ]


def test_for_n_opens_only_after_n_consecutive_violated_runs(
    monitored: tuple[str, Path], store: StateStore
) -> None:
    dsn, folder = monitored
    (folder / "bad_rows.sql").write_text(BAD_ROWS.replace("-- schedule", "-- for: 3\n-- schedule"))
    daemon = make_daemon(dsn, folder, store)
    daemon.reload()
    sql(dsn, "UPDATE items SET bad = true WHERE id = 4")
    opened_after = [bool(daemon.evaluate("bad_rows") and store.open_incidents()) for _ in range(4)]
    daemon.databases.close()
    assert opened_after == [False, False, True, True]
    assert kinds(store) == [("opened", ["[4]"])]


def test_errors_do_not_resolve_and_open_a_cannot_evaluate_incident_after_the_threshold(
    daemon: Daemon, monitored: tuple[str, Path], store: StateStore
) -> None:
    dsn, _ = monitored
    sql(dsn, "UPDATE items SET bad = true WHERE id = 5")
    daemon.evaluate("bad_rows")
    sql(dsn, "ALTER TABLE items RENAME TO items_moved")
    errors = [daemon.evaluate("bad_rows") for _ in range(3)]
    assert [r.status for r in errors if r] == ["error", "error", "error"]
    assert [i.kind for i in store.open_incidents()] == ["violation", "cannot_evaluate"]
    sql(dsn, "ALTER TABLE items_moved RENAME TO items")
    assert daemon.evaluate("bad_rows").status == "violated"  # type: ignore[union-attr]
    assert [e.kind for e in store.events("bad_rows")] == ["opened", "cannot_evaluate", "recovered"]
    cannot = store.events("bad_rows")[1]
    assert cannot.payload == {
        "error": 'relation "items" does not exist: not in the database of target '
        "'default'; check the invariant's `target:` and that target's dsn; `invmon lint "
        "--schema FILE` checks its names against the schema offline",
        "consecutive_errors": 2,
    }
    assert [i.kind for i in store.open_incidents()] == ["violation"]


def test_every_event_is_planned_once(daemon: Daemon, monitored: tuple[str, Path]) -> None:
    dsn, _ = monitored
    sql(dsn, "UPDATE items SET bad = true WHERE id = 1")
    daemon.evaluate("bad_rows")
    # A lone opening, nothing else running: planned at once (alerts/bursts.py).
    assert [e.kind for e in daemon.pump.dispatch()] == ["opened"]
    assert daemon.pump.dispatch() == []
    assert daemon.store.pending_events() == []
    assert daemon.store.counts() == {
        "events_pending": 0,
        "open_incidents": 1,
        "resolved_incidents": 0,
        "retired_incidents": 0,
    }


def test_a_broken_file_keeps_the_previous_version_running_until_fixed(
    daemon: Daemon, monitored: tuple[str, Path], store: StateStore
) -> None:
    _dsn, folder = monitored
    good = daemon.invariants["bad_rows"]
    (folder / "bad_rows.sql").write_text(BAD_ROWS.replace("SELECT id", "SELEC id"))
    (folder / "typo.sql").write_text("-- descriptoin: x\nSELECT 1 WHERE false\n")
    (folder / "new.sql").write_text("-- description: new\nSELECT 1 AS one WHERE false\n")
    change = daemon.reload()
    assert change.added == ["new"]
    assert change.kept_previous == ["bad_rows"]
    assert sorted(change.invalid) == ["bad_rows", "typo"]
    assert [str(p) for p in change.invalid["typo"]] == [
        f"{folder}/typo.sql:1: unknown header key 'descriptoin'; did you mean 'description'? "
        "known keys are channel, "
        "description, for, key, max_cost, owner, redact, runbook, sample, schedule, severity, "
        "show, source, tags, target, timeout"
    ]
    assert daemon.invariants["bad_rows"] is good
    assert daemon.evaluate("bad_rows").status == "ok"  # type: ignore[union-attr]
    assert sorted((i.invariant, i.kind) for i in store.open_incidents()) == [
        ("bad_rows", "invalid_file"),
        ("typo", "invalid_file"),
    ]
    (folder / "bad_rows.sql").write_text(BAD_ROWS)
    (folder / "typo.sql").unlink()
    change = daemon.reload()
    assert (change.invalid, change.removed) == ({}, [])
    assert store.open_incidents() == []
    assert [e.kind for e in store.events("bad_rows")] == ["file_invalid", "file_fixed"]
    # Deleted while invalid: retired, never "fixed".
    assert [e.kind for e in store.events("typo")] == ["file_invalid", "retired"]
    (folder / "new.sql").unlink()
    assert daemon.reload().removed == ["new"]
    assert daemon.evaluate("new") is None


def test_the_state_survives_a_new_daemon_on_the_same_store(
    monitored: tuple[str, Path], store: StateStore
) -> None:
    dsn, folder = monitored
    sql(dsn, "UPDATE items SET bad = true WHERE id = 2")
    first = make_daemon(dsn, folder, store)
    first.reload()
    first.evaluate("bad_rows")
    first.databases.close()
    second = make_daemon(dsn, folder, store)
    second.reload()
    second.evaluate("bad_rows")
    sql(dsn, "UPDATE items SET bad = false")
    second.evaluate("bad_rows")
    second.databases.close()
    assert kinds(store) == [("opened", ["[2]"]), ("resolved", None)]


def test_scheduled_runs_fire_and_a_slow_run_never_overlaps_itself(
    monitored: tuple[str, Path], store: StateStore
) -> None:
    dsn, folder = monitored
    daemon = make_daemon(dsn, folder, store)
    config = daemon.config.model_copy(
        update={
            "database": daemon.config.database.model_copy(
                update={"lock_timeout": timedelta(milliseconds=1500)}
            )
        }
    )
    daemon = build_daemon(config, dsn, store)
    with psycopg.connect(dsn) as holder:
        # Every run waits 1.5s on this lock, longer than the 1s schedule.
        holder.execute("LOCK TABLE items IN ACCESS EXCLUSIVE MODE")
        daemon.start()
        try:
            wait_for(lambda: sum(r.repeats for r in store.runs("bad_rows")) >= 3, 15, "three runs")
        finally:
            daemon.request_stop()
            daemon.shutdown()
        holder.rollback()
    runs = sorted(store.runs("bad_rows", limit=100), key=lambda r: r.started_at)
    assert all(r.status == "error" for r in runs)
    assert {r.error for r in runs} == {
        "canceling statement due to lock timeout: another session held a lock the query "
        "needs for longer than the lock timeout, 1.5s (database.lock_timeout): a "
        "migration, or a transaction left open on the table (in a test, often the test's "
        "own, not yet committed)"
    }
    for earlier, later in itertools.pairwise(runs):
        assert earlier.finished_at <= later.started_at, (earlier, later)


def test_a_new_file_starts_running_after_reload_without_a_restart(
    monitored: tuple[str, Path], store: StateStore
) -> None:
    dsn, folder = monitored
    # Its threads turn on the wall clock (APScheduler's), so the daemon's clock is that too:
    # on a frozen clock the new file's second slot would never come.
    daemon = make_daemon(dsn, folder, store, clock=utc_now)
    daemon.start()
    try:
        wait_for(lambda: store.runs("bad_rows"), 10, "the first run at start-up")
        (folder / "later.sql").write_text(
            "-- description: added later\n-- schedule: every 1s\nSELECT 1 AS one WHERE false\n"
        )
        daemon.reload()
        # Runs that held one after another are one row (a held stretch): count its runs.
        wait_for(
            lambda: sum(r.repeats for r in store.runs("later")) >= 2, 10, "two runs of the new file"
        )
        (folder / "later.sql").unlink()
        daemon.reload()
        assert "later" not in daemon.scheduler.timetable
    finally:
        daemon.request_stop()
        daemon.shutdown()


def test_shutdown_cancels_queries_still_running_after_the_grace_period(
    monitored: tuple[str, Path], store: StateStore
) -> None:
    dsn, folder = monitored
    config = daemon_config(
        folder,
        daemon=DaemonConfig(shutdown_grace=timedelta(milliseconds=300)),
        database=PRIVILEGED.model_copy(update={"lock_timeout": timedelta(hours=1)}),
    )
    daemon = build_daemon(config, dsn, store)

    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE items IN ACCESS EXCLUSIVE MODE")
        daemon.start()
        wait_for(
            lambda: lock_waits(dsn, "invmon:bad_rows") == 1,
            10,
            "the first run to block on the lock",
        )
        # Without the cancel, this run would wait an hour for the lock.
        daemon.request_stop()
        daemon.shutdown()
        holder.rollback()
    [run] = store.runs("bad_rows")
    assert (run.status, run.error) == ("error", "canceling statement due to user request")


def test_concurrent_runs_share_one_replica_incident_and_lose_no_run(
    database: str, store: StateStore
) -> None:
    """Many invariants in flight at a stale/fresh transition, on both stores."""
    barrier = threading.Barrier(6)
    at = datetime(2026, 3, 1, tzinfo=UTC)

    def flip(active: bool) -> None:
        barrier.wait()
        store.record_condition("replica_stale", REPLICA_SUBJECT, active, at, "behind")

    for active in (True, False):
        threads = [threading.Thread(target=flip, args=(active,)) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert [e.kind for e in store.events(REPLICA_SUBJECT)] == ["replica_stale", "replica_fresh"]


def test_removing_a_file_closes_its_open_incident_with_a_reason(
    daemon: Daemon, monitored: tuple[str, Path], store: StateStore
) -> None:
    dsn, folder = monitored
    sql(dsn, "UPDATE items SET bad = true WHERE id = 3")
    daemon.evaluate("bad_rows")
    (folder / "bad_rows.sql").rename(folder / "renamed.sql")
    change = daemon.reload()
    assert (change.removed, change.added) == (["bad_rows"], ["renamed"])
    resolved = store.events("bad_rows")[-1]
    assert (resolved.kind, resolved.payload["reason"]) == (
        "retired",
        "the invariant was removed while 1 row still offended",
    )
    assert store.open_incidents() == []


def test_a_missing_or_empty_folder_on_reload_keeps_every_invariant_running(
    daemon: Daemon, monitored: tuple[str, Path]
) -> None:
    _, folder = monitored
    (folder / "bad_rows.sql").unlink()
    assert daemon.reload().kept_previous == ["bad_rows"]
    folder.rmdir()
    assert daemon.reload().kept_previous == ["bad_rows"]
    assert sorted(daemon.invariants) == ["bad_rows"]


def test_a_file_the_database_catalog_refuses_is_invalid_at_reload_and_never_runs(
    daemon: Daemon, monitored: tuple[str, Path], store: StateStore
) -> None:
    """Lint cannot know a function of the database; the daemon asks the database's own
    catalog when it loads the folder, and refuses it like any invalid file, at its line."""
    dsn, folder = monitored
    sql(dsn, "CREATE FUNCTION public.count_visit() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    (folder / "visits.sql").write_text(
        "-- description: visits\n-- key: [id]\n\nSELECT id FROM items\nWHERE id < count_visit()\n"
    )
    change = daemon.reload()
    assert [str(p) for p in change.invalid["visits"]] == [
        f"{folder}/visits.sql:5: function count_visit() is VOLATILE: PostgreSQL's catalog says "
        "it may change the database or act outside the query; not allowed"
    ]
    assert "visits" not in daemon.invariants
    assert daemon.evaluate("visits") is None
    assert [(i.invariant, i.kind) for i in store.open_incidents()] == [("visits", "invalid_file")]


def test_a_fault_inside_a_run_is_logged_and_the_next_run_goes_ahead(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A run goes on a target's worker whose future nobody reads: a fault there (injected
    here, once) was lost without a word. It is logged, and the invariant's slot is freed."""
    evaluate = daemon.evaluator.evaluate
    faults = iter([RuntimeError("injected")])

    def once_faulty(*args: object, **kwargs: object) -> object:
        fault = next(faults, None)
        if fault is not None:
            raise fault
        return evaluate(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(daemon.evaluator, "evaluate", once_faulty)
    assert daemon.evaluate("bad_rows") is None
    [record] = [r for r in caplog.records if r.name == "invmon.daemon" and r.exc_info]
    assert record.getMessage() == (
        "the run of bad_rows failed inside invmon; it runs again when due"
    )
    assert record.exc_info is not None and str(record.exc_info[1]) == "injected"
    daemon.clock.advance(60)  # type: ignore[attr-defined]
    after = daemon.evaluate("bad_rows")
    assert after is not None and after.status == "ok"


def test_an_unchanged_invalid_file_is_named_at_a_reload_not_logged_again_in_full(
    daemon: Daemon, monitored: tuple[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """An SRE's review: each SIGHUP logged every unchanged invalid file's problems again.
    A changed one is logged in full; an unchanged one is named in one line."""
    _, folder = monitored
    (folder / "broken.sql").write_text("-- description: x\nSELECT FROM\n")
    caplog.clear()
    daemon.reload()

    def said() -> list[tuple[str, str]]:
        found = [
            (r.levelname, r.getMessage())
            for r in caplog.records
            if r.name == "invmon.daemon"
            and (
                r.getMessage().startswith("invalid invariant file")
                or "still invalid" in r.getMessage()
            )
        ]
        caplog.clear()
        return found

    [(level, first)] = said()
    assert level == "ERROR" and first.startswith("invalid invariant file: ")
    daemon.reload()
    assert said() == [("WARNING", "1 file still invalid, as logged before: broken")]
    (folder / "broken.sql").write_text("-- description: x\n-- severty: high\nSELECT 1 AS a\n")
    daemon.reload()
    [(level, again)] = said()
    assert level == "ERROR" and again != first
