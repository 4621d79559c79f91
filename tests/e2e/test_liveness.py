"""A monitor that cannot stop while looking alive: claims refused mid-stop or mid-reload are
handed back (the lock wedge), every part of the daemon reports progress, a frozen part
turns /healthz red and stops systemd's watchdog pings, and a wedge ends the process."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from builders import build_daemon, config_file, daemon_config, process_config
from helpers import FakeClock, active_runs, require_libxml, start_daemon, wait_for
from helpers import http_get as get

from monitor.config import DaemonConfig, FenceConfig
from monitor.daemon.daemon import Daemon
from monitor.daemon.liveness import Liveness, Stall
from monitor.daemon.supervision import EXIT_WEDGED, Notifier, Supervisor
from monitor.store.claims import Claim
from monitor.store.state import StateStore

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SLEEPER = "-- description: sleeps {seconds}s\n-- schedule: {schedule}\n" + (
    "SELECT 1 AS x WHERE (SELECT pg_sleep({seconds})::text) IS NULL\n"
)


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def finish_within(seconds: float, work: object, what: str) -> object:
    """Run `work()` on a thread; fail (instead of hanging the suite) if it wedges."""
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(work()), daemon=True)  # type: ignore[operator]
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{what} did not return within {seconds}s: a wedge"
    return outcome[0]


def lease_of(store: StateStore, claim: Claim) -> str:
    with store.storage.transaction() as tx:
        rows = tx.rows(
            "SELECT lease_until FROM slot_claims WHERE invariant = ? AND owner = ?",
            (claim.invariant, claim.owner),
        )
    assert len(rows) == 1
    return str(rows[0][0])


@pytest.fixture
def sleepers(tmp_path: Path) -> Path:
    folder = tmp_path / "invariants"
    folder.mkdir()
    for name in ("a", "b", "c"):
        (folder / f"{name}.sql").write_text(SLEEPER.format(seconds=2, schedule="every 8s"))
    return folder


@pytest.fixture
def daemon(database: str, sleepers: Path, store: StateStore) -> Iterator[Daemon]:
    config = daemon_config(
        sleepers,
        daemon=DaemonConfig(jitter=timedelta(seconds=0.001)),
        fence=FenceConfig(allow_functions=["pg_sleep"]),
    )
    made = build_daemon(config, database, store, clock=FakeClock(START))
    made.reload()
    yield made
    made.databases.close()


def test_a_claim_refused_because_the_daemon_is_stopping_is_handed_back(
    daemon: Daemon, store: StateStore
) -> None:
    claims = daemon.scheduler.tick(datetime.now(UTC) + timedelta(minutes=1))
    assert sorted(c.invariant for c in claims) == ["a", "b", "c"]
    daemon.request_stop()
    for claim in claims:
        result = finish_within(10, lambda c=claim: daemon.evaluate(c.invariant, c), "evaluate")
        assert result is None
        # Handed back: its lease ends now, so another daemon takes the slot at once.
        assert lease_of(store, claim) == "2026-03-01T12:00:00.000000Z"
    assert daemon.scheduler.holding() == {}


def test_a_claim_whose_invariant_was_unloaded_is_handed_back(
    daemon: Daemon, store: StateStore, sleepers: Path
) -> None:
    due = daemon.scheduler.tick(datetime.now(UTC) + timedelta(minutes=1))
    claims = {c.invariant: c for c in due}
    (sleepers / "b.sql").unlink()
    finish_within(30, daemon.reload, "the reload")
    result = finish_within(10, lambda: daemon.evaluate("b", claims["b"]), "evaluate")
    assert result is None
    assert lease_of(store, claims["b"]) == "2026-03-01T12:00:00.000000Z"
    assert sorted(daemon.scheduler.holding()) == ["a", "c"]


def test_a_refused_later_slot_does_not_stop_the_running_claims_renewal(daemon: Daemon) -> None:
    running = daemon.scheduler.tick(datetime.now(UTC) + timedelta(minutes=1))[0]
    later = Claim(running.invariant, running.slot + timedelta(seconds=8), running.owner)
    assert daemon.scheduler.begin(running.invariant, START, refuse=False) is not None
    assert finish_within(10, lambda: daemon.evaluate(later.invariant, later), "evaluate") is None
    assert daemon.scheduler.holding()[running.invariant] == running


# --- liveness, pure --------------------------------------------------------------------------


def test_a_periodic_part_is_stalled_only_past_its_bound_since_its_last_beat() -> None:
    clock = Clock()
    alive = Liveness(clock)
    alive.expect("the tick", 15)
    clock.now += 15
    assert alive.problem() is None
    clock.now += 0.5
    assert alive.stalls() == [Stall("the tick", 15.5, 15)]
    assert alive.problem() == "the tick has not moved for 16s (its bound is 15s)"
    alive.beat("the tick")
    assert alive.problem() is None
    alive.forget("the tick")
    clock.now += 1000
    assert alive.problem() is None


def test_an_activity_is_stalled_when_it_lasts_past_its_bound_and_forgotten_when_done() -> None:
    clock = Clock()
    alive = Liveness(clock)
    with alive.busy("the run of a", 60):
        clock.now += 59
        assert alive.stalls() == []
        with alive.busy("the run of a", 10):
            clock.now += 11
            # The most overdue first: the inner one is 1s past, the outer 10s.
            assert [s.bound for s in alive.stalls()] == [60, 10]
    assert alive.stalls() == []


# --- the supervisor, against a real notify socket --------------------------------------------


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    server.settimeout(0.05)
    yield server, path
    server.close()


def received(server: socket.socket) -> list[str]:
    out = []
    while True:
        try:
            out.append(server.recv(4096).decode())
        except TimeoutError:
            return out


def test_the_supervisor_pings_while_every_part_moves_and_stops_when_one_stalls(
    notify_socket: tuple[socket.socket, str],
) -> None:
    server, path = notify_socket
    clock = Clock()
    alive = Liveness(clock)
    alive.expect("the tick", 15)
    exits: list[int] = []
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000", "WATCHDOG_PID": str(os.getpid())}
    guard = Supervisor(alive, Notifier(env), exits.append, clock)
    assert guard.notifier.watchdog == 4.0
    guard.turn()
    clock.now += 1
    guard.turn()  # within half the interval of the last ping: none
    clock.now += 1
    guard.turn()
    assert received(server) == ["WATCHDOG=1", "WATCHDOG=1"]
    for _ in range(14):  # the tick is now 16s old; a look a second, as it runs
        clock.now += 1
        guard.turn()
    assert received(server) == ["WATCHDOG=1"] * 6  # every 2s until the tick stalled at 15s
    assert exits == []
    for _ in range(int(2 * 15 + guard.exit_after - 16)):  # a look a second, as it runs
        clock.now += 1
        guard.turn()
    assert exits == []
    clock.now += 1  # past twice its bound and the grace
    guard.turn()
    assert exits == [EXIT_WEDGED]


def test_a_process_stopped_and_continued_is_not_taken_for_a_wedge(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SIGSTOP for 100 s, then SIGCONT: an attacker's review saw the first look after it
    end the process as wedged, since every part's clock ran on while none could move.
    Each part now gets its bound afresh, and one that then does not move is still ended."""
    clock, cpu = Clock(), Clock()
    alive = Liveness(clock)
    alive.expect("the tick", 15)
    exits: list[int] = []
    guard = Supervisor(alive, Notifier({}), exits.append, clock, cpu)
    guard.turn()
    clock.now += 100  # stopped: no look, no beat, and no CPU used
    guard.turn()
    assert exits == []
    assert "the process did not run for 100s" in caplog.messages[-1]
    assert alive.stalls() == []  # the tick's bound starts again
    for _ in range(int(2 * 15 + guard.exit_after)):
        clock.now += 1
        guard.turn()
    assert exits == []
    clock.now += 1
    guard.turn()
    assert exits == [EXIT_WEDGED]  # it never beat after: a wedge after all


def test_the_supervisor_ends_a_stop_that_overran_its_deadline_naming_what_it_waited_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    exits: list[int] = []
    guard = Supervisor(Liveness(clock), Notifier({}), exits.append, clock)
    guard.stop_by(40, lambda: "the runs in flight to finish")
    clock.now += 40
    guard.turn()
    assert exits == []
    clock.now += 0.1
    guard.turn()
    assert exits == [EXIT_WEDGED]
    assert caplog.messages[-1] == (
        "the stop did not finish in time: still the runs in flight to finish; "
        "exiting 70 so that the supervisor restarts invmon"
    )


def test_a_wedge_report_that_blocks_on_a_stalled_log_does_not_keep_the_process_alive() -> None:
    """A log pipe nobody reads leaves a writer holding its handler's lock; the report then
    blocks, and before the backstop the process never exited. Here the handler blocks until
    the test ends: the exit must come anyway, from the backstop's thread."""
    clock = Clock()
    exited = threading.Event()
    exits: list[int] = []

    def exit_process(code: int) -> None:
        exits.append(code)
        exited.set()

    release = threading.Event()

    class Stalled(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            release.wait(60)  # a pipe nobody reads; bounded so the test cannot hang

    stalled = Stalled()
    logging.getLogger().addHandler(stalled)
    guard = Supervisor(Liveness(clock), Notifier({}), exit_process, clock, report_within=0.2)
    guard.stop_by(1, lambda: "the runs in flight to finish")
    clock.now += 2
    turn = threading.Thread(target=guard.turn, name="test-supervisor-turn", daemon=True)
    try:
        turn.start()
        assert exited.wait(30), "the process did not exit while its report was blocked"
        assert exits == [EXIT_WEDGED]
    finally:
        release.set()
        logging.getLogger().removeHandler(stalled)
        turn.join(30)
    assert not turn.is_alive()
    assert exits in ([EXIT_WEDGED], [EXIT_WEDGED, EXIT_WEDGED])  # the report may then finish


def test_a_watchdog_pid_of_another_process_is_not_ours_to_ping() -> None:
    assert (
        Notifier({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "1000", "WATCHDOG_PID": "1"}).watchdog
        is None
    )
    assert Notifier({}).enabled is False


# --- the real process --------------------------------------------------------------------------


def write_config(tmp_path: Path, folder: Path, grace: int = 5) -> Path:
    return process_config(
        tmp_path,
        folder,
        concurrency=1,
        http={"listen": "127.0.0.1:0"},
        fence={"allow_functions": ["pg_sleep"]},
        daemon={"shutdown_grace": f"{grace}s"},
    )


def launch(
    config: Path, dsn: str, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    return start_daemon(config, log, dsn, env)


def sleeping(dsn: str) -> int:
    """How many of invmon's runs are inside pg_sleep on the server now."""
    return active_runs(dsn, query="%pg_sleep%")


def runs_of(state: Path, name: str) -> int:
    store = StateStore.open(path=state)
    try:
        return sum(r.repeats for r in store.runs(name, limit=1000))  # a held stretch: its runs
    finally:
        store.close()


def stop_and_wait(process: subprocess.Popen[bytes], log: Path, seconds: float) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(
            f"the daemon did not exit within {seconds}s of SIGTERM:\n{log.read_text()[-3000:]}"
        )


def test_sigterm_with_claims_queued_exits_0_within_the_grace(
    database: str, sleepers: Path, tmp_path: Path
) -> None:
    log = tmp_path / "daemon.log"
    process = launch(write_config(tmp_path, sleepers), database, log)
    try:
        # One run inside pg_sleep on the only worker, two claims queued behind it.
        wait_for(lambda: sleeping(database) == 1, 30, "the first run to be in flight")
        started = time.monotonic()
        code = stop_and_wait(process, log, 5 + 5)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, log.read_text()[-3000:]
    # shutdown_grace + 5 s, the acceptance bound: the run in flight ends within 2 s.
    assert time.monotonic() - started < 10
    assert log.read_text().splitlines()[-1].endswith("stopped")


def test_sighup_with_a_removed_file_keeps_the_daemon_running_then_sigterm_exits_0(
    database: str, sleepers: Path, tmp_path: Path
) -> None:
    log = tmp_path / "daemon.log"
    state = tmp_path / "state.db"
    process = launch(write_config(tmp_path, sleepers), database, log)
    try:
        wait_for(lambda: sleeping(database) == 1, 30, "the first run to be in flight")
        (sleepers / "b.sql").unlink()
        process.send_signal(signal.SIGHUP)
        wait_for(lambda: "SIGHUP: reloading invariants" in log.read_text(), 20, "the reload")
        # Still working: each remaining invariant runs again on its 8-second schedule.
        wait_for(lambda: runs_of(state, "a") >= 2 and runs_of(state, "c") >= 2, 60, "second runs")
        code = stop_and_wait(process, log, 5 + 5)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, log.read_text()[-3000:]


FROZEN_TICK = """
import os, sys, threading, time, urllib.request
from pathlib import Path
from monitor.config import Config, DatabaseConfig, HttpConfig, StateConfig
from monitor.daemon.assembly import assemble
from monitor.logs import setup_logging
from monitor.store.state import StateStore

folder, state, dsn = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
setup_logging("text", "INFO")
config = Config(
    invariants=folder,
    http=HttpConfig(listen="127.0.0.1:0"),
    state=StateConfig(path=state),
    database=DatabaseConfig(allow_privileged_role=True),  # the suite's superuser
)
store = StateStore.open(path=state)
daemon = assemble(config, dsn, store)
daemon.supervisor.exit_after = float(sys.argv[4])

def wedge():
    deadline = time.monotonic() + 30
    while daemon.probes.health_problem() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"healthy http://{daemon.listener.address}", flush=True)
    if sys.argv[5] != "wedge":
        return
    # The tick's bound made short for the test; then the timetable's lock is taken and
    # never given back: the next tick wedges on it, as the SIGHUP deadlock did.
    daemon.liveness.expect("the scheduler's tick", 2)
    daemon.scheduler._lock.acquire()
    print("wedged", flush=True)

threading.Thread(target=wedge, daemon=True).start()
sys.exit(daemon.serve(supervise=True))
"""


def start_frozen(
    tmp_path: Path, database: str, exit_after: float, env: dict[str, str], wedge: bool = True
) -> subprocess.Popen[str]:
    folder = tmp_path / "invariants"
    folder.mkdir(exist_ok=True)
    (folder / "one.sql").write_text("-- description: one\nSELECT 1 AS one WHERE false\n")
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            FROZEN_TICK,
            str(folder),
            str(tmp_path / "s.db"),
            database,
            str(exit_after),
            "wedge" if wedge else "healthy",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def test_a_frozen_scheduler_turns_healthz_red_and_stops_the_watchdog_pings(
    database: str, tmp_path: Path, notify_socket: tuple[socket.socket, str]
) -> None:
    """A service manager as systemd is one (sd_notify's socket protocol): READY=1, then
    WATCHDOG=1 within every WATCHDOG_USEC; when the pings stop it kills the process with
    SIGABRT and starts it again. The test plays systemd."""
    server, path = notify_socket
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "3000000"}
    process = start_frozen(tmp_path, database, 600, env)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split()[-1]
        messages: list[str] = []

        def pinged() -> bool:
            messages.extend(received(server))
            return "WATCHDOG=1" in messages

        wait_for(pinged, 20, "a ping")
        assert messages[0] == "READY=1\nSTATUS=running"
        assert process.stdout.readline() == "wedged\n"
        # systemd's rule: no WATCHDOG=1 for WATCHDOG_USEC means the service is hung.
        last_ping = time.monotonic()
        while time.monotonic() - last_ping < 3.0:
            if "WATCHDOG=1" in received(server):
                last_ping = time.monotonic()
            assert time.monotonic() - last_ping < 60, "pings never stopped"
        status, body = get(f"{url}/healthz")
        assert status == 503
        assert body.startswith("the scheduler's tick has not moved for ")
        process.send_signal(signal.SIGABRT)  # what systemd sends on a watchdog timeout
        assert process.wait(timeout=10) == -signal.SIGABRT
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    # ... and starts it again (Restart=always): the new process is ready and pings.
    restarted = start_frozen(tmp_path, database, 600, env, wedge=False)
    try:
        wait_for(lambda: "READY=1\nSTATUS=running" in received(server), 20, "READY=1 again")
        restarted.send_signal(signal.SIGTERM)
        assert restarted.wait(timeout=20) == 0
    finally:
        if restarted.poll() is None:
            restarted.kill()
            restarted.wait()


def test_a_wedged_daemon_without_a_service_manager_ends_itself_with_every_stack(
    database: str, tmp_path: Path
) -> None:
    process = start_frozen(tmp_path, database, 1, {})
    try:
        _, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        pytest.fail(f"the wedged daemon never ended itself:\n{err[-3000:]}")
    assert process.returncode == EXIT_WEDGED, err[-3000:]
    assert "a part of the daemon is wedged: the scheduler's tick has not moved for" in err
    assert "exiting 70 so that the supervisor restarts invmon" in err
    # Every thread's stack, the wedged tick loop's among them, for the report: blocked on
    # the timetable's lock in its turn (`tick`) or in working out its next wait
    # (`_next_tick_in`), whichever it had reached when the lock was taken.
    blocked = re.search(
        r'scheduling\.py", line \d+ in (overdue|tick|next_tick)\n'
        r'  File "[^"]*daemon\.py", line \d+ in (tick|_next_tick_in|quarantine_overdue)\n',
        err,
    )
    assert blocked is not None, err[-6000:]


# --- start-up: signals first, the state store bounded -----------------------------------------


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A port that accepts TCP connections and never says a word: a state store that hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    yield f"postgresql://invmon@127.0.0.1:{listener.getsockname()[1]}/state"
    listener.close()


def store_config(tmp_path: Path, state_dsn: str, connect_timeout: str) -> Path:
    folder = tmp_path / "invariants"
    folder.mkdir(exist_ok=True)
    return config_file(
        tmp_path,
        invariants=folder,
        state={"dsn": state_dsn},
        database={"connect_timeout": connect_timeout},
        http={"listen": None},
    )


def test_sigterm_while_the_state_store_is_being_reached_stops_cleanly(
    database: str, tmp_path: Path, silent_server: str
) -> None:
    log = tmp_path / "daemon.log"
    process = launch(store_config(tmp_path, silent_server, "60s"), database, log)
    try:
        wait_for(lambda: "opening the state store" in log.read_text(), 30, "start-up")
        started = time.monotonic()
        code = stop_and_wait(process, log, 10)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, log.read_text()
    # The run in flight ends within 2 s; load adds seconds, a wedge adds forever.
    assert time.monotonic() - started < 10
    assert (
        log.read_text().splitlines()[-1].endswith("stopped before start, reaching the state store")
    )


def test_reaching_the_state_store_is_bounded_by_connect_timeout_and_names_host_and_port(
    database: str, tmp_path: Path, silent_server: str
) -> None:
    port = silent_server.split(":")[-1].split("/")[0]
    log = tmp_path / "daemon.log"
    started = time.monotonic()
    process = launch(store_config(tmp_path, silent_server, "2s"), database, log)
    try:
        code = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    took = time.monotonic() - started
    assert code == 2  # invmon's "cannot start as configured"
    assert log.read_text().splitlines()[-1] == (
        f"invmon: cannot open the state store (state.dsn, 127.0.0.1:{port}): cannot connect to "
        f"127.0.0.1:{port}: no answer within 2s (database.connect_timeout)"
    )
    # Well under the pool's own 30 s: the bound is the configured timeout (and start-up).
    # Load cannot flip it: 2 s of timeout plus a process start (1-4 s here, busy).
    assert took < 20


def test_a_state_store_that_refuses_the_login_fails_at_once(database: str, tmp_path: Path) -> None:
    """A definite answer (a role that may not log in, a wrong password) is final at once."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS invmon_no_login")
        conn.execute("CREATE ROLE invmon_no_login NOLOGIN")
    try:
        info = psycopg.conninfo.conninfo_to_dict(database)
        where = f"{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}"
        dsn = f"postgresql://invmon_no_login@{where}/{info['dbname']}"
        config = store_config(tmp_path, dsn, "30s")
        for command in (["status"], ["history", "x"], ["run", "--once"]):
            started = time.monotonic()
            ran = subprocess.run(
                [sys.executable, "-m", "monitor.cli", *command, "--config", str(config)],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "INVMON_DSN": database},
            )
            assert ran.returncode == 2, ran.stderr
            assert ran.stderr.splitlines()[-1] == (
                f"invmon: cannot open the state store (state.dsn, {where}): cannot connect to "
                f'{where}: FATAL:  role "invmon_no_login" is not permitted to log in'
            ), command
            # Load cannot flip it: a retrying pool takes 30 s, a process start here 1-4 s.
            assert time.monotonic() - started < 15, command  # not the pool's 30 s of retries
    finally:
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("DROP ROLE invmon_no_login")


def test_a_sighup_during_start_up_is_a_reload_not_the_end_of_the_process(
    database: str, tmp_path: Path, sleepers: Path
) -> None:
    log = tmp_path / "daemon.log"
    process = launch(write_config(tmp_path, sleepers), database, log)
    try:
        wait_for(lambda: "opening the state store" in log.read_text(), 30, "start-up")
        process.send_signal(signal.SIGHUP)
        wait_for(lambda: "invmon running" in log.read_text(), 30, "the daemon to run")
        assert process.poll() is None, log.read_text()
        code = stop_and_wait(process, log, 15)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, log.read_text()


def test_the_systemd_unit_asks_for_the_notifications_the_daemon_sends() -> None:
    import configparser

    from monitor.config import DaemonConfig
    from monitor.daemon.stopping import STOP_MARGIN

    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(Path(__file__).parents[2] / "deploy/systemd/invmon.service")
    service = unit["Service"]
    assert (service["Type"], service["NotifyAccess"], service["WatchdogSec"]) == (
        "notify",
        "main",
        "30s",
    )
    # systemd's stop timeout leaves room for invmon's own bound, which names what it waited for.
    own_bound = DaemonConfig().shutdown_grace + STOP_MARGIN
    assert int(service["TimeoutStopSec"]) > own_bound.total_seconds()
    assert service["Restart"] == "always"


# --- one computation at a time, no lock held across it ---------------------------------------


def test_a_single_flight_shares_one_answer_and_bounds_the_wait_of_the_others() -> None:
    from monitor.singleflight import SingleFlight

    flight: SingleFlight[int] = SingleFlight()
    release = threading.Event()
    entered = threading.Event()
    calls: list[int] = []

    def slow() -> int:
        calls.append(1)
        entered.set()
        release.wait(10)
        return 42

    answers: list[int | None] = []
    first = threading.Thread(target=lambda: answers.append(flight.run(slow, 10)))
    first.start()
    assert entered.wait(10)
    # A caller that waits less than the computation takes gets None, not a hang.
    assert flight.run(slow, 0.05) is None
    second = threading.Thread(target=lambda: answers.append(flight.run(slow, 10)))
    second.start()
    # Condition keeps its waiters in `_waiters`: the second caller is waiting, not computing.
    wait_for(lambda: len(flight._done._waiters) == 1, 10, "the second caller to wait")  # type: ignore[attr-defined]
    release.set()
    first.join(10)
    second.join(10)
    assert sorted(a for a in answers if a is not None) == [42, 42]
    assert calls == [1]  # computed once for both

    def broken() -> int:
        raise ValueError("no replica")

    with pytest.raises(ValueError, match="no replica"):
        flight.run(broken, 1)
    assert flight.run(lambda: 7, 1) == 7  # an error is not remembered


# --- the storm: 10 daemons, 200 SIGHUPs each, then SIGTERM, on a busy machine -----------------


@pytest.fixture
def busy_machine() -> Iterator[None]:
    """Two processes burning a core each for as long as the test lasts."""
    burn = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end: pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(2)]
    yield
    for hog in hogs:
        hog.kill()
        hog.wait()


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(30))
def test_soak_signal_storm_never_wedges_a_daemon(
    seed: int, database: str, tmp_path: Path, busy_machine: None
) -> None:
    import random

    rng = random.Random(seed)
    daemons = []
    for n in range(10):
        home = tmp_path / f"d{n}"
        folder = home / "invariants"
        folder.mkdir(parents=True)
        for name in ("a", "b", "c"):
            (folder / f"{name}.sql").write_text(SLEEPER.format(seconds=0.3, schedule="every 2s"))
        log = home / "daemon.log"
        daemons.append((launch(write_config(home, folder), database, log), folder, log))
    try:
        for _process, _, log in daemons:

            def started(log: Path = log) -> bool:
                return "invmon running" in log.read_text()

            wait_for(started, 60, f"start (seed {seed})")
        for process, folder, _ in daemons:
            remove_at = rng.randrange(200) if rng.random() < 0.5 else -1
            for i in range(200):
                if i == remove_at:
                    (folder / "b.sql").unlink()
                process.send_signal(signal.SIGHUP)
        for process, _, _ in daemons:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5 + 5  # shutdown_grace + 5 s
        for n, (process, _, log) in enumerate(daemons):
            try:
                code = process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"seed {seed}: daemon {n} wedged:\n{log.read_text()[-2000:]}")
            assert code == 0, f"seed {seed}: daemon {n}:\n{log.read_text()[-2000:]}"
    finally:
        for process, _, _ in daemons:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_a_stop_that_cannot_finish_in_time_exits_non_zero_naming_what_it_waited_for(
    database: str, tmp_path: Path
) -> None:
    """XPath in libxml2 ignores the cancel: the run outlives the grace and the cancel, so the
    stop ends at its bound with exit 1, naming the run, instead of hanging."""
    require_libxml(database)
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "unstoppable.sql").write_text(
        "-- description: libxml2 cannot be interrupted\n-- timeout: 1m\n"
        "SELECT 1 AS x WHERE xpath('count(//a[. = //a])', (SELECT xmlelement(name r,"
        " xmlagg(xmlelement(name a, 'x'))) FROM generate_series(1, 25000)))::text = ''\n"
    )
    config = process_config(
        tmp_path,
        folder,
        http={"listen": None},
        fence={"allow_functions": ["xpath"]},
        daemon={"shutdown_grace": "1s"},
    )
    log = tmp_path / "daemon.log"
    process = launch(config, database, log)
    try:
        wait_for(
            lambda: "invmon running" in log.read_text() and in_xpath(database) == 1, 30, "the run"
        )
        started = time.monotonic()
        code = stop_and_wait(process, log, 1 + 10 + 10)
        # Measured here: the wait below, for the server's backend, is not the stop's.
        stopped_in = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
        # The server's backend outlives the process (that is the point): the scratch
        # database can be dropped only once it has finished.
        wait_for(lambda: in_xpath(database) == 0, 120, "the backend to finish its XPath")
    assert code == 1, log.read_text()[-3000:]
    # The grace (1 s), the cancel's wait (5 s) and the rest: bounded, never the run's ~20 s.
    assert stopped_in < 1 + 10 + 10
    assert (
        log.read_text()
        .splitlines()[-1]
        .endswith("stopped with runs still in flight after the grace period: unstoppable")
    )


def in_xpath(dsn: str) -> int:
    return active_runs(dsn, "unstoppable")


def test_a_look_starved_by_a_busy_thread_is_no_pause() -> None:
    """A thread holding the interpreter (a long regex) starves the supervisor's looks for
    longer than the pause threshold: a review saw each such gap taken for a stopped process,
    the stalled part's bound restarted each time, and no exit. A gap spent using the CPU
    is judged as ever."""
    clock, cpu = Clock(), Clock()
    alive = Liveness(clock)
    alive.expect("the tick", 15)
    exits: list[int] = []
    guard = Supervisor(alive, Notifier({}), exits.append, clock, cpu, exit_after=3)
    guard.turn()
    for _ in range(3):  # three starved gaps of 12 s, each spent on the CPU
        clock.now += 12
        cpu.now += 12
        guard.turn()
    assert exits == [EXIT_WEDGED]  # 36 s > twice 15 s + 3 s: a wedge, not a pause
