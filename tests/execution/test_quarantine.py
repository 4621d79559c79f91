"""A run that overran its timeout quarantines its invariant: not scheduled again on any
daemon sharing the store until its file changes or an operator lifts it, with one alert.
The overrun is real: XPath evaluated by libxml2, which no statement timeout interrupts."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from builders import build_daemon, config_file, daemon_config
from helpers import FakeClock, active_runs, cli, invariant, require_libxml, wait_for

from monitor.authoring.pgtemp import scratch_database
from monitor.config import DaemonConfig, FenceConfig, StateConfig
from monitor.daemon.daemon import Daemon
from monitor.daemon.liveness import Liveness
from monitor.daemon.supervision import Notifier, Supervisor
from monitor.execution.deadlines import CAUSES
from monitor.execution.quarantine import overrun, still_running, version_of
from monitor.execution.runner import Runner
from monitor.fence.allowances import Allowances
from monitor.store.state import StateStore

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# Quadratic XPath over 14,000 elements: about 4-7 s in libxml2 on this kind of machine,
# under a 1 s statement timeout that cannot stop it. The document is built, not parsed.
UNSTOPPABLE = """\
-- description: a comparison libxml2 cannot be interrupted in
-- owner: "@xml-team"
-- timeout: 1s
-- schedule: every 1m
SELECT 1 AS x WHERE xpath('count(//a[. = //a])',
    (SELECT xmlelement(name r, xmlagg(xmlelement(name a, 'x'))) FROM generate_series(1, 14000))
)::text = ''
"""
QUICK = "-- description: quick\n-- schedule: every 1m\nSELECT 1 AS x WHERE false\n"


def test_an_overrun_is_past_the_longest_run_plus_the_margin() -> None:
    inv = invariant("slow", "SELECT 1", timeout=2)
    margin = timedelta(seconds=10)
    assert overrun(timedelta(seconds=12), inv, margin) is None
    assert overrun(timedelta(seconds=12.5), inv, margin) == (
        "a run took 12.5s, 10.5s past its timeout of 2s (the margin is 10s): "
        "the database did not stop it"
    )
    # An excess that tenths would round to the margin it went past is said to the ms.
    assert overrun(timedelta(seconds=12.002), inv, margin) == (
        "a run took 12.002s, 10.002s past its timeout of 2s (the margin is 10s): "
        "the database did not stop it"
    )
    assert overrun(timedelta(seconds=12.0004), inv, margin) == (
        "a run took 12.000400s, 10.000400s past its timeout of 2s (the margin is 10s): "
        "the database did not stop it"
    )
    # In flight, judged a margin later: at the first, invmon closes its connection.
    assert still_running(timedelta(seconds=22), inv, margin) is None
    assert still_running(timedelta(seconds=40), inv, margin) == (
        "a run has been going for 40s, 38s past its timeout of 2s (the margin is 10s), and "
        "did not end when invmon closed its connection: the database is not stopping it"
    )


def test_the_version_changes_with_what_runs_and_only_with_it() -> None:
    base = invariant("a", "SELECT 1", timeout=2)
    assert version_of(base) == version_of(invariant("a", "SELECT 1", timeout=2))
    assert version_of(base) != version_of(invariant("a", "SELECT 2", timeout=2))
    assert version_of(base) != version_of(invariant("a", "SELECT 1", timeout=3))


def make(
    folder: Path,
    store: StateStore,
    dsn: str,
    state: StateConfig | None = None,
    clock: FakeClock | None = None,
) -> Daemon:
    config = daemon_config(
        folder,
        state=state or StateConfig(),
        daemon=DaemonConfig(overrun_margin=timedelta(seconds=1)),
        fence=FenceConfig(allow_functions=["xpath"]),
    )
    daemon = build_daemon(config, dsn, store, clock=clock or FakeClock(START))
    daemon.reload()
    return daemon


@pytest.fixture
def folder(tmp_path: Path, database: str) -> Path:
    require_libxml(database)
    made = tmp_path / "invariants"
    made.mkdir()
    (made / "unstoppable.sql").write_text(UNSTOPPABLE)
    (made / "quick.sql").write_text(QUICK)
    return made


def runs_of(store: StateStore, name: str) -> int:
    return sum(r.repeats for r in store.runs(name, limit=100))


def later(minutes: int) -> datetime:
    """Half a minute into the minute `minutes` after START: past any slot's jitter (a tenth of
    the 1m period at most), on the same clock the daemons were built with, so which slots
    are due never depends on the wall clock or on how long the unstoppable run took."""
    return START + timedelta(minutes=minutes, seconds=30)


def test_one_overrun_quarantines_until_the_file_changes(
    database: str, folder: Path, store: StateStore
) -> None:
    daemon = make(folder, store, database)
    try:
        ran = {r.invariant: r for r in daemon.run_due(later(1))}
        assert sorted(ran) == ["quick", "unstoppable"]
        # Past the 1 s timeout and the 1 s margin: the server did not stop it in time.
        assert ran["unstoppable"].duration_ms > 2000
        [held] = store.quarantined().values()
        assert (held.invariant, held.version) == (
            "unstoppable",
            version_of(daemon.invariants["unstoppable"]),
        )
        assert held.reason.startswith("a run took ")
        # libxml2 went on; at the bound invmon closed the connection, which freed the run.
        assert held.reason.endswith(
            "past its timeout of 1s (the margin is 1s): the database did not stop it, and "
            f"invmon closed the connection ({CAUSES})"
        )
        [incident] = [i for i in store.open_incidents() if i.kind == "quarantined"]
        assert incident.context is not None
        assert (incident.invariant, incident.detail, incident.context.owner) == (
            "unstoppable",
            held.reason,
            "@xml-team",
        )
        assert [e.kind for e in store.events("unstoppable") if "quarantine" in e.kind] == [
            "quarantined"
        ]
        # Not scheduled again; the others are.
        assert [r.invariant for r in daemon.run_due(later(2))] == ["quick"]
        assert [r.invariant for r in daemon.run_due(later(3))] == ["quick"]
        assert runs_of(store, "unstoppable") == 1
        # Its file changes (here its timeout): lifted at the reload, scheduled again.
        (folder / "unstoppable.sql").write_text(UNSTOPPABLE.replace("timeout: 1s", "timeout: 30s"))
        daemon.reload()
        assert store.quarantined() == {}
        assert [e.kind for e in store.events("unstoppable") if "quarantine" in e.kind] == [
            "quarantined",
            "unquarantined",
        ]
        assert sorted(r.invariant for r in daemon.run_due(later(4))) == ["quick", "unstoppable"]
    finally:
        daemon.databases.close()


@pytest.fixture
def fleet(
    database: str, folder: Path, admin_dsn: str
) -> Iterator[tuple[list[Daemon], StateStore, str]]:
    with scratch_database(admin_dsn, prefix="invmon_state") as state_dsn:
        stores = [StateStore.open(dsn=state_dsn) for _ in range(3)]
        daemons = [make(folder, s, database, StateConfig(dsn=state_dsn)) for s in stores]
        try:
            yield daemons, stores[0], state_dsn
        finally:
            for daemon, opened in zip(daemons, stores, strict=True):
                daemon.databases.close()
                opened.close()


def test_a_quarantine_on_one_daemon_holds_on_all_three_until_an_operator_lifts_it(
    fleet: tuple[list[Daemon], StateStore, str], tmp_path: Path
) -> None:
    (a, b, c), store, state_dsn = fleet
    first = {r.invariant for r in a.run_due(later(1))}
    assert "unstoppable" in first
    assert sorted(store.quarantined()) == ["unstoppable"]
    # Every daemon of the fleet holds it out: the next slots run nothing but `quick`.
    for minutes, daemon in enumerate((b, c, a, b, c), start=2):
        assert {r.invariant for r in daemon.run_due(later(minutes))} <= {"quick"}
    assert runs_of(store, "unstoppable") == 1
    assert [e.kind for e in store.events("unstoppable") if "quarantine" in e.kind] == [
        "quarantined"
    ]  # one alert, however many daemons
    # An operator lifts it from the command line; every daemon runs it again.
    config = config_file(tmp_path, state={"dsn": state_dsn})
    lifted = cli("unquarantine", "unstoppable", "--config", str(config))
    assert (lifted.returncode, lifted.stdout) == (
        0,
        "unstoppable is scheduled again: every daemon sharing this store runs it.\n",
    )
    again = cli("unquarantine", "unstoppable", "--config", str(config))
    assert (again.returncode, again.stderr) == (
        2,
        "invmon: 'unstoppable' is not quarantined; `invmon status` lists open incidents\n",
    )
    [lift] = [e for e in store.events("unstoppable") if e.kind == "unquarantined"]
    assert str(lift.payload["reason"]).endswith("(command line)")
    assert store.quarantined() == {}


def test_a_run_waiting_on_the_store_is_no_overrun_of_its_query(
    tmp_path: Path, database: str, admin_dsn: str
) -> None:
    """The query took milliseconds; then storing its run waited on a lock another session
    held on the store, for minutes of the daemon's clock. Neither the tick's look at runs in
    flight nor the run's own end may call that the database failing to stop a query (a
    locked or unreachable store once quarantined every invariant it touched, for good)."""
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "quick.sql").write_text(QUICK.replace("every 1m", "every 1m\n-- timeout: 1s"))
    with scratch_database(admin_dsn, prefix="invmon_state") as state_dsn:
        store = StateStore.open(dsn=state_dsn)
        clock = FakeClock(START)
        daemon = make(folder, store, database, StateConfig(dsn=state_dsn), clock)
        locker = psycopg.connect(state_dsn)
        try:
            locker.execute("LOCK TABLE runs IN EXCLUSIVE MODE")
            with ThreadPoolExecutor(1) as pool:
                running = pool.submit(daemon.evaluate, "quick")
                wait_for(lambda: _waiting_on_a_lock(state_dsn), 30, "the run's store write")
                clock.advance(300)
                daemon.quarantine_overdue()
                locker.rollback()  # the store is free again
                result = running.result(timeout=60)
            assert result is not None and result.status == "ok"
            assert result.held_ms is not None and result.held_ms < 1000
            assert store.quarantined() == {}
            assert [e.kind for e in store.events("quick") if "quarantine" in e.kind] == []
        finally:
            locker.close()
            daemon.databases.close()
            store.close()


def _waiting_on_a_lock(dsn: str) -> bool | None:
    """Whether a session of the store waits on a lock of the runs table; None while not."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        waiting = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'runs'::regclass"
        ).fetchone()
    return True if waiting and waiting[0] else None


BOUNDED = "%invmon_n%"  # the bounded form of a query (query.py), not its plan or row description


class Monotonic:
    """A monotonic clock (or the process's CPU clock) the test moves."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("looked", ["before the run ends", "after the run ends"])
def test_a_query_answered_while_the_process_was_stopped_is_no_overrun(
    database: str, looked: str
) -> None:
    """The process is stopped (SIGSTOP, a host suspended) while a query is on the database,
    for ten minutes of every clock but its CPU's. The database answers at once; the run
    reads the answer on resuming. That is no overrun of the query: its time on the database
    counts from the resume, once the supervisor has looked (a run that ends first waits for
    that look). Counted whole, it quarantined the invariant as one the database could not
    stop, and the tick's look at runs in flight did the same."""
    mono, cpu, clock = Monotonic(1000.0), Monotonic(5.0), FakeClock(START)
    alive = Liveness(mono)
    exits: list[int] = []
    guard = Supervisor(alive, Notifier({}), exits.append, mono, cpu)
    guard.turn()  # the supervisor watches
    # pg_sleep is VOLATILE, which the fence refuses: a STABLE wrapper, trusted by name.
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION nap() RETURNS int LANGUAGE sql STABLE"
            " AS $$SELECT 1 FROM pg_sleep(0.5)$$"
        )
    slow = invariant("slow", "SELECT nap() AS x", timeout=5)
    runner = Runner(
        database,
        1,
        allow=Allowances(functions=frozenset({"nap"})),
        clock=clock,
        resumed=alive.resumed,
        monotonic=mono,
    )
    with runner, ThreadPoolExecutor(1) as pool:
        running = pool.submit(runner.run_one, slow)
        wait_for(lambda: active_runs(database, "slow", BOUNDED), 30, "the query under way")
        assert runner.held_for("slow") == timedelta(0)
        mono.now += 600  # stopped: every clock ran on but the CPU's
        clock.advance(600)
        if looked == "after the run ends":
            answered = lambda: not active_runs(database, "slow", BOUNDED)  # noqa: E731
            wait_for(answered, 30, "the database's answer")
        guard.turn()  # its first look after: a pause of 600 s
        held = runner.held_for("slow")
        result = running.result(timeout=30)
    assert exits == []
    assert (result.status, result.count, result.held_ms) == ("violated", 1, 0.0)
    assert held in (None, timedelta(0))  # None: off its connection when the supervisor looked


def test_the_daemons_runners_count_a_hold_from_the_daemons_last_pause(
    database: str, tmp_path: Path
) -> None:
    """The wiring: the liveness the daemon's supervisor records pauses in is the one its
    runners judge their holds by."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION nap() RETURNS int LANGUAGE sql STABLE AS $$SELECT 1 FROM pg_sleep(3)$$"
        )
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "slow.sql").write_text("-- description: naps\nSELECT nap() AS x\n")
    config = daemon_config(folder, fence=FenceConfig(allow_functions=["nap"]))
    store = StateStore.open(tmp_path / "state.db")
    daemon = build_daemon(config, database, store, clock=FakeClock(START))
    try:
        daemon.reload()
        runner = daemon.databases["default"].runner
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(runner.run_one, daemon.invariants["slow"])
            wait_for(lambda: active_runs(database, "slow", BOUNDED), 30, "the query under way")
            half = timedelta(seconds=0.5)
            wait_for(lambda: (runner.held_for("slow") or half) > half, 30, "time on the database")
            daemon.liveness.shift(0)  # a pause that ends now, after the hold began
            daemon.liveness.looked()
            held = runner.held_for("slow")
            assert running.result(timeout=30).status == "violated"
        assert held is not None and held < half  # counted from the pause
    finally:
        daemon.databases.close()
        store.close()
