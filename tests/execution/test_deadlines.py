"""Waits the server cannot end are ended on the client: a server process stopped with SIGSTOP
is the real thing (a paused VM, a hung backend, a network that drops packets without a reset
look the same from here). Its statement_timeout cannot fire, and psycopg waits on the socket
for as long as the kernel keeps it open: before deadlines.py, every test here hung."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from builders import build_daemon, daemon_config
from helpers import FakeClock, active_runs, invariant, wait_for

from monitor.config import DaemonConfig, DatabaseConfig, FenceConfig
from monitor.execution.deadlines import Cut, Deadlines
from monitor.execution.replica import ReplicaStatus, read_replica_status
from monitor.execution.runner import Runner
from monitor.fence.allowances import Allowances
from monitor.store.state import StateStore

NAP = "CREATE FUNCTION nap() RETURNS int LANGUAGE sql STABLE AS $$SELECT 1 FROM pg_sleep(2)$$"
CAUSES = (
    "the server did not end it (a server process stopped, or busy in code that does not look "
    "for a cancel, or a network that drops packets without closing the connection)"
)
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """The server process `pid` stopped (SIGSTOP) inside the block, and let go after it."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except PermissionError:
        pytest.skip("this user cannot stop the server's processes (run as root or postgres)")
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def backend_pids(dsn: str, application: str) -> set[int]:
    """The server processes of `application`'s connections to the database `dsn` names."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s"
            " AND datname = current_database()",
            (application,),
        ).fetchall()
    return {int(pid) for (pid,) in rows}


class Monotonic:
    """A monotonic clock the test moves, which counts how often it is read."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def waited(text: str) -> str:
    """The seconds a Cut's text says were waited, as it says them."""
    found = re.search(r"had no answer after ([\d.]+)s,", text)
    assert found is not None, text
    return found.group(1)


def test_a_query_on_a_stopped_server_process_is_cut_and_the_next_runs(database: str) -> None:
    """The run's query is on a server process that stops: at its timeout plus the overrun
    margin invmon closes the connection, the run is an error that says so (not "server
    closed the connection unexpectedly", which is not what happened), and the next
    invariant runs on a connection of its own."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(NAP)
    slow = invariant("slow", "SELECT nap() AS x", timeout=1)
    quick = invariant("quick", "SELECT 1 AS x WHERE false")
    runner = Runner(
        database,
        1,
        allow=Allowances(functions=frozenset({"nap"})),
        overrun_margin=timedelta(seconds=0.5),
    )
    with runner, ThreadPoolExecutor(1) as pool:
        running = pool.submit(runner.run_all, [slow, quick])
        wait_for(lambda: active_runs(database, "slow"), 30, "the query under way")
        (pid,) = backend_pids(database, "invmon:slow")
        with stopped(pid):
            first, second = running.result(timeout=60)
    assert first.error is not None
    assert first.error == (
        f"invmon closed the connection: the query had no answer after "
        f"{waited(first.error)}s, past its timeout, 1s, and daemon.overrun_margin, 0.5s; "
        f"{CAUSES}"
    )
    assert float(waited(first.error)) >= 1.5
    assert first.status == "error"
    assert first.held_ms is not None and first.held_ms >= 1500
    assert (second.status, second.count) == ("ok", 0)


def test_a_daemon_run_on_a_stopped_server_process_is_quarantined_and_ends(
    database: str, tmp_path: Path
) -> None:
    """In the daemon: the run is cut at its timeout and the margin, stored as the error it
    is, and its invariant quarantined as one the database did not stop; the worker it held
    is free again, where before it waited with the daemon looking alive."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(NAP)
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "slow.sql").write_text(
        "-- description: naps\n-- timeout: 1s\n-- schedule: every 1m\nSELECT nap() AS x\n"
    )
    config = daemon_config(
        folder,
        daemon=DaemonConfig(overrun_margin=timedelta(seconds=1)),
        fence=FenceConfig(allow_functions=["nap"]),
    )
    store = StateStore.open(tmp_path / "state.db")
    daemon = build_daemon(config, database, store, clock=FakeClock(START))
    try:
        daemon.reload()
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(daemon.run_due, START + timedelta(minutes=1, seconds=30))
            wait_for(lambda: active_runs(database, "slow"), 30, "the query under way")
            (pid,) = backend_pids(database, "invmon:slow")
            with stopped(pid):
                [result] = running.result(timeout=60)
        assert (result.status, result.error) == (
            "error",
            f"invmon closed the connection: the query had no answer after "
            f"{waited(result.error or '')}s, past its timeout, 1s, and daemon.overrun_margin, "
            f"1s; {CAUSES}",
        )
        [held] = store.quarantined().values()
        assert held.invariant == "slow"
        assert held.reason.startswith("a run took ")
        assert held.reason.endswith(
            "past its timeout of 1s (the margin is 1s): the database did not stop it"
        )
        assert [r.status for r in store.runs("slow", limit=10)] == ["error"]
    finally:
        daemon.databases.close()
        store.close()


def test_a_pooled_connection_whose_server_process_stopped_is_replaced(database: str) -> None:
    """The replica gate's read takes a pooled connection whose server process has stopped
    since: its check is cut at half the wait for a connection, and the read goes on a
    new connection, where before it waited for good, and every run of its target with it."""
    runner = Runner(
        database,
        1,
        DatabaseConfig(connect_timeout=timedelta(seconds=1)),
        overrun_margin=timedelta(seconds=0.5),
    )
    with runner:
        assert runner.replica_status() == ReplicaStatus(in_recovery=False, lag_seconds=0.0)
        (pid,) = backend_pids(database, "invmon")  # idle in the pool
        with ThreadPoolExecutor(1) as pool, stopped(pid):
            status = pool.submit(runner.replica_status).result(timeout=60)
            now = backend_pids(database, "invmon")
    assert status == ReplicaStatus(in_recovery=False, lag_seconds=0.0)
    assert pid in now and len(now) == 2  # the stopped one is only let go of by the server


def test_a_cut_says_what_went_unanswered(database: str) -> None:
    """Deadlines itself, around a read of invmon's own: Cut's text names the wait and the
    bound it passed, and the watcher ends on close."""
    deadlines = Deadlines("test")

    def read() -> None:
        with deadlines.bounded(
            conn, timedelta(seconds=0.5), "the read of the replica status", "its bound, 0.5s"
        ):
            read_replica_status(conn)

    with (
        psycopg.connect(database, application_name="invmon-cut") as conn,
        ThreadPoolExecutor(1) as pool,
    ):
        (pid,) = backend_pids(database, "invmon-cut")
        with stopped(pid):
            cut = pool.submit(read).exception(timeout=60)
        assert isinstance(cut, Cut)
        assert conn.broken
    text = str(cut)
    assert text == (
        f"invmon closed the connection: the read of the replica status had no answer after "
        f"{waited(text)}s, past its bound, 0.5s; {CAUSES}"
    )
    deadlines.close()
    assert [t.name for t in threading.enumerate() if t.name == "invmon-deadlines-test"] == []


def test_a_pause_of_the_process_is_no_time_waited(database: str) -> None:
    """The process stops for ten minutes with a wait armed (SIGSTOP of invmon, a paused VM):
    the watcher's next look comes that late, and it takes the pause for one rather than cut
    every connection in use on resuming. The database answers once let go."""
    mono = Monotonic(1000.0)
    deadlines = Deadlines("paused", monotonic=mono)
    with (
        psycopg.connect(database, application_name="invmon-paused", autocommit=True) as conn,
        ThreadPoolExecutor(1) as pool,
    ):
        (pid,) = backend_pids(database, "invmon-paused")

        def ask() -> object:
            with deadlines.bounded(conn, timedelta(seconds=5), "the query", "its bound, 5s"):
                row = conn.execute("SELECT 42").fetchone()
            return row[0] if row is not None else None

        with stopped(pid):
            answer = pool.submit(ask)
            wait_for(lambda: deadlines.waiting, 30, "the wait armed")
            mono.now += 600
            reads = mono.reads
            wait_for(lambda: mono.reads > reads, 30, "the watcher's look after the pause")
        assert answer.result(timeout=30) == 42
    deadlines.close()
