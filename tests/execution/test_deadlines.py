"""Waits the server cannot end are ended on the client: a server process stopped with SIGSTOP
is the real thing (a paused VM, a hung backend, a network that drops packets without a reset
look the same from here). Its statement_timeout cannot fire, and psycopg waits on the socket
for as long as the kernel keeps it open: before deadlines.py, every test here hung."""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from builders import build_daemon, daemon_config
from freezing_proxy import FreezingProxy
from helpers import FakeClock, active_runs, invariant, stopped, wait_for
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from monitor.config import DaemonConfig, DatabaseConfig, FenceConfig
from monitor.execution.deadlines import Cut, Deadlines
from monitor.execution.replica import ReplicaStatus, read_replica_status
from monitor.execution.runner import Runner
from monitor.fence.allowances import Allowances
from monitor.store.state import StateStore

NAP = "CREATE FUNCTION nap() RETURNS int LANGUAGE sql STABLE AS $$SELECT 1 FROM pg_sleep(2)$$"
CAUSES = (
    "a server process stopped, or busy in code that does not look for a cancel, or a network "
    "that drops packets without closing the connection"
)
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


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
        f"the server did not end it ({CAUSES})"
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
            f"1s; the server did not end it ({CAUSES})",
        )
        [held] = store.quarantined().values()
        assert held.invariant == "slow"
        assert held.reason.startswith("a run took ")
        assert held.reason.endswith(
            "past its timeout of 1s (the margin is 1s): the database did not stop it, and "
            f"invmon closed the connection ({CAUSES})"
        )
        assert [r.status for r in store.runs("slow", limit=10)] == ["error"]
    finally:
        daemon.databases.close()
        store.close()


def test_a_run_cut_where_the_server_answers_nothing_at_all_is_no_quarantine(
    database: str, tmp_path: Path
) -> None:
    """The whole server stops answering (a paused VM, a network dropping packets) while a
    run is in flight: invmon closes the run's connection, and a new one gets no answer
    either. That is no finding about the invariant: quarantined, every run in flight was
    held out until an operator lifted each. The run is an error that says what happened."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(NAP)
    parts = conninfo_to_dict(database)
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "slow.sql").write_text(
        "-- description: naps\n-- timeout: 1s\n-- schedule: every 1m\nSELECT nap() AS x\n"
    )
    config = daemon_config(
        folder,
        daemon=DaemonConfig(overrun_margin=timedelta(seconds=1)),
        fence=FenceConfig(allow_functions=["nap"]),
        database=DatabaseConfig(connect_timeout=timedelta(seconds=1), allow_privileged_role=True),
    )
    store = StateStore.open(tmp_path / "state.db")
    with FreezingProxy(
        str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432)
    ) as proxy:
        proxied = make_conninfo(database, host="127.0.0.1", port=proxy.port)
        daemon = build_daemon(config, proxied, store, clock=FakeClock(START))
        try:
            daemon.reload()
            with ThreadPoolExecutor(1) as pool:
                running = pool.submit(daemon.run_due, START + timedelta(minutes=1, seconds=30))
                wait_for(lambda: active_runs(database, "slow"), 30, "the query under way")
                proxy.freeze()
                [result] = running.result(timeout=60)
        finally:
            proxy.thaw()
            daemon.databases.close()
    assert result.status == "error"
    assert (result.error or "").startswith("invmon closed the connection: the query had no answer")
    assert store.quarantined() == {}
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
        f"{waited(text)}s, past its bound, 0.5s; the server did not end it ({CAUSES})"
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


def test_every_idle_connection_silenced_together_is_replaced_at_once(database: str) -> None:
    """A NAT that drops idle connections silences all of them: one check cut at half the
    wait for a connection left the next on another dead one, and two used the whole wait
    (PoolTimeout, "all connections busy"). The first cut now replaces every idle one."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(NAP.replace("pg_sleep(2)", "pg_sleep(0.3)"))
    naps = [invariant(f"nap{n}", "SELECT nap() AS x WHERE false") for n in range(4)]
    runner = Runner(
        database,
        4,
        DatabaseConfig(connect_timeout=timedelta(seconds=2)),
        allow=Allowances(functions=frozenset({"nap"})),
        overrun_margin=timedelta(seconds=0.5),
    )
    with runner:
        assert [r.status for r in runner.run_all(naps)] == ["ok"] * 4
        idle = backend_pids(database, "invmon")
        assert len(idle) == 3  # the round's first connection is closed with it
        with contextlib.ExitStack() as all_stopped, ThreadPoolExecutor(1) as pool:
            for pid in idle:
                all_stopped.enter_context(stopped(pid))
            status = pool.submit(runner.replica_status).result(timeout=60)
    assert status == ReplicaStatus(in_recovery=False, lag_seconds=0.0)


def test_a_first_connection_cut_while_learning_runs_nothing(database: str) -> None:
    """The round's first connection was cut while it asked the catalog (a lock held the
    question, then its server process stopped): it was still lent to the first run, which
    failed with "the connection is lost" without ever running. That run now goes on a new
    connection."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (n int); CREATE VIEW v AS SELECT n FROM t")
    reads = invariant("reads", "SELECT n FROM v WHERE n < 0", timeout=1)
    runner = Runner(database, 1, overrun_margin=timedelta(seconds=0.5))
    with (
        runner,
        psycopg.connect(database) as locker,
        ThreadPoolExecutor(1) as pool,
    ):
        locker.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
        running = pool.submit(runner.run_all, [reads])
        wait_for(lambda: backend_pids(database, "invmon:fence"), 30, "the catalog's question")
        (pid,) = backend_pids(database, "invmon:fence")
        with stopped(pid):
            locker.rollback()  # the run itself will find the table free
            [result] = running.result(timeout=60)
    assert (result.status, result.error) == ("ok", None)


def test_explain_is_bounded_as_a_run_is(database: str) -> None:
    """`invmon explain --analyze` waited for good on a server process that stopped; it is
    cut as a run is, and the next invariant is explained on a new connection."""
    from monitor.authoring.explain import explain_all

    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(NAP)
    slow = invariant("slow", "SELECT nap() AS x", timeout=1)
    quick = invariant("quick", "SELECT 1 AS x WHERE false")
    with ThreadPoolExecutor(1) as pool:
        explaining = pool.submit(
            explain_all,
            database,
            [slow, quick],
            None,
            True,
            Allowances(functions=frozenset({"nap"})),
            overrun_margin=timedelta(seconds=0.5),
        )
        wait_for(lambda: active_runs(database, "slow"), 30, "the EXPLAIN ANALYZE under way")
        (pid,) = backend_pids(database, "invmon:slow")
        with stopped(pid):
            first, second = explaining.result(timeout=60)
    assert first.error == (
        f"invmon closed the connection: the EXPLAIN had no answer after "
        f"{waited(first.error or '')}s, past its timeout, 1s, and daemon.overrun_margin, 0.5s; "
        f"the server did not end it ({CAUSES})"
    )
    assert (second.error, second.summary is not None) == (None, True)


def test_arming_never_waits_for_the_record_of_pauses(database: str) -> None:
    """The daemon's Liveness.resumed can wait for the supervisor's next look (6 s at most
    after a pause). The watcher asked it holding the lock that arming takes, so every run
    of the target waited with it."""
    entered, release = threading.Event(), threading.Event()

    def resumed(began: float) -> float:
        entered.set()
        release.wait(60)
        return began

    deadlines = Deadlines("slow-record", resumed=resumed)
    try:
        with (
            psycopg.connect(database) as one,
            psycopg.connect(database) as two,
            ThreadPoolExecutor(1) as pool,
            deadlines.bounded(one, timedelta(seconds=30), "the query", "its bound, 30s"),
        ):
            wait_for(entered.is_set, 30, "the watcher asking when the process resumed")

            def arm() -> int:
                with deadlines.bounded(two, timedelta(seconds=30), "another", "30s"):
                    return deadlines.waiting

            armed = pool.submit(arm)
            try:
                assert armed.result(timeout=30) == 2
            finally:
                release.set()
    finally:
        release.set()
        deadlines.close()


def test_an_answer_that_comes_as_the_bound_passes_is_still_cut(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The watcher marked the wait cut, then the answer came before it shut the socket: the
    block ended as if nothing had happened, and the connection's next use failed with the
    driver's "server closed the connection unexpectedly". A wait past its bound now ends
    in Cut either way, its connection closed."""
    caplog.set_level(logging.INFO, logger="invmon.deadlines")
    mono = Monotonic(1000.0)
    deadlines = Deadlines("late", monotonic=mono)
    conn = psycopg.connect(database, autocommit=True)
    try:

        def looked_after(reads: int) -> bool:
            return mono.reads > reads

        with (
            pytest.raises(Cut) as cut,
            deadlines.bounded(conn, timedelta(seconds=3), "the query", "its bound, 3s"),
        ):
            assert conn.execute("SELECT 42").fetchone() == (42,)
            for _ in range(4):  # in steps under a second: time going by, not a pause
                reads = mono.reads
                mono.now += 0.9
                wait_for(functools.partial(looked_after, reads), 30, "the watcher's look")
            wait_for(lambda: any(CAUSES in m for m in caplog.messages), 30, "the watcher's cut")
        assert str(cut.value).startswith("invmon closed the connection: the query had no answer")
        assert conn.closed
    finally:
        conn.close()
        deadlines.close()


def test_a_cut_wait_ends_in_cut_and_a_closed_connection_whatever_ended_its_block(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A block that a cut wait left by another exception than the driver's (the caller's
    own, on reading what the cut answered) left the connection open, its socket shut, to be
    used again."""
    caplog.set_level(logging.INFO, logger="invmon.deadlines")
    mono = Monotonic(1000.0)
    deadlines = Deadlines("other", monotonic=mono)
    conn = psycopg.connect(database, autocommit=True)
    try:

        def looked_after(reads: int) -> bool:
            return mono.reads > reads

        with (
            pytest.raises(Cut) as cut,
            deadlines.bounded(conn, timedelta(seconds=3), "the query", "its bound, 3s"),
        ):
            for _ in range(4):  # in steps under a second: time going by, not a pause
                reads = mono.reads
                mono.now += 0.9
                wait_for(functools.partial(looked_after, reads), 30, "the watcher's look")
            wait_for(lambda: any(CAUSES in m for m in caplog.messages), 30, "the watcher's cut")
            raise ValueError("the caller's own")
        assert isinstance(cut.value.__cause__, ValueError)
        assert conn.closed
    finally:
        conn.close()
        deadlines.close()


def test_a_connection_never_answered_names_its_bound(database: str) -> None:
    """libpq says only "connection timeout expired": the message now says which bound it
    was, and where it is set, as the state store's already did."""
    parts = conninfo_to_dict(database)
    host, port = str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432)
    with FreezingProxy(host, port) as proxy:
        proxy.freeze()
        proxied = make_conninfo(database, host="127.0.0.1", port=proxy.port)
        settings = DatabaseConfig(connect_timeout=timedelta(seconds=1))
        with Runner(proxied, 1, settings, target="payments") as runner:
            probed = runner.probe()
            [result] = runner.run_all([invariant("quick", "SELECT 1 AS x WHERE false")])
    bound = "no answer within 1s (targets.payments.connect_timeout, else database.connect_timeout)"
    assert probed == bound
    assert result.error == f"cannot connect: {bound}"
