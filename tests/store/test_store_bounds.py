"""The PostgreSQL state store's bounds (storage.py, StoreBounds): a peer stopped inside a
transaction loses its session and frees its locks, a statement past the bound is ended by
the server, and a server that answers nothing is cut by invmon, with the store usable again
at once."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from freezing_proxy import FreezingProxy
from helpers import invariant, stopped, wait_for
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from monitor.authoring.pgtemp import scratch_database
from monitor.clock import stamp, utc_now
from monitor.config import DaemonConfig
from monitor.daemon.metrics import Metrics
from monitor.daemon.scheduling import Scheduler
from monitor.daemon.services import Services
from monitor.durations import parse_schedule
from monitor.execution.deadlines import CAUSES, Cut
from monitor.invariants.definitions import Definitions
from monitor.store.state import StateStore
from monitor.store.storage import PostgresStorage, StoreBounds, migrate
from monitor.store.store_health import StoreHealth
from monitor.store.writes import lock_subject

NOW = stamp(datetime(2026, 12, 6, 12, 0, tzinfo=UTC))
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)  # a slot boundary of every 1m


def scheduler(store: StateStore, *names: str) -> Scheduler:
    """The daemon's scheduler over `names`, each due every minute, without its threads."""
    services = Services(store, StoreHealth("state.dsn 'test'"), Metrics(store.counts), utc_now)
    made = Scheduler(DaemonConfig(jitter=timedelta(0)), Definitions(), services)
    every_minute = parse_schedule("every 1m")
    made.install(
        {n: replace(invariant(n, "SELECT 1 WHERE false"), schedule=every_minute) for n in names},
        START,
    )
    return made


@pytest.fixture
def store_dsn(admin_dsn: str) -> Iterator[str]:
    """A migrated store database of this test's own."""
    with scratch_database(admin_dsn, prefix="invmon_bounds") as dsn:
        storage = PostgresStorage(dsn)
        try:
            migrate(storage, storage.migrations)
        finally:
            storage.close()
        yield dsn


def storage(dsn: str, **bounds: float) -> PostgresStorage:
    return PostgresStorage(
        dsn, bounds=StoreBounds(**{k: timedelta(seconds=v) for k, v in bounds.items()})
    )


def backend_pid(store: PostgresStorage) -> int:
    with store.transaction() as tx:
        [(pid,)] = tx.rows("SELECT pg_backend_pid()")
    return int(pid)


def test_a_transaction_holds_its_bounds_on_the_server_and_a_long_one_its_longer_ones(
    store_dsn: str,
) -> None:
    store = storage(store_dsn, statement=7, idle=3, margin=2, long=600)
    shown = "SELECT current_setting(n) FROM unnest(ARRAY[%s, %s, %s]) AS n"
    names = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")
    try:
        with store.transaction() as tx:
            assert [v for (v,) in tx.rows(shown, names)] == ["7s", "7s", "3s"]
        with store.transaction(long=True) as tx:
            assert [v for (v,) in tx.rows(shown, names)] == ["10min", "10min", "10min"]
        with store.transaction() as tx:  # SET LOCAL: nothing is left on the connection
            assert [v for (v,) in tx.rows(shown, names)] == ["7s", "7s", "3s"]
    finally:
        store.close()


def test_a_peer_stopped_inside_a_transaction_loses_its_session_and_frees_its_locks(
    store_dsn: str,
) -> None:
    """A daemon stopped between two statements of a transaction (SIGSTOP, a paused VM) looks
    to the server like a session idle in a transaction: the server ends it after the idle
    bound, and the daemon waiting on its row lock goes on while the peer is still stopped,
    where it used to wait for as long as the peer stayed so (and its tick, held for stalled
    at 15 s, restarted it)."""
    peer, me = storage(store_dsn, idle=1, statement=20), storage(store_dsn, idle=1, statement=20)
    locked, let_go = threading.Event(), threading.Event()
    peer_error: list[BaseException] = []

    def stopped_peer() -> None:
        try:
            with peer.transaction() as tx:
                lock_subject(tx, "refunds", NOW)
                locked.set()
                let_go.wait(timeout=60)
                tx.rows("SELECT 1")
        except psycopg.Error as exc:
            peer_error.append(exc)

    def waiter() -> tuple[int, int, int | None]:
        with me.transaction() as tx:
            return lock_subject(tx, "refunds", NOW)

    thread = threading.Thread(target=stopped_peer)
    thread.start()
    try:
        with ThreadPoolExecutor(1) as pool:
            assert locked.wait(timeout=30)
            waiting = pool.submit(waiter)
            # It does wait on the peer's lock (not before the peer took it, nor past it) ...
            wait_for(lambda: lock_waits(store_dsn) or None, 30, "the waiter to wait on the lock")
            # ... and gets it while the peer is still stopped: the server ended the peer.
            assert waiting.result(timeout=30) == (0, 0, None)
            assert not let_go.is_set()
    finally:
        let_go.set()
        thread.join(timeout=60)
        peer.close()
        me.close()
    assert not thread.is_alive()
    [error] = peer_error
    assert "idle-in-transaction timeout" in str(error)


def lock_waits(dsn: str) -> int:
    """How many of the store's connections wait for a lock now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        [(n,)] = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'invmon-state'"
            " AND datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchall()
    return int(n)


def test_many_quick_statements_are_never_cut_however_long_their_transaction(
    store_dsn: str,
) -> None:
    """The bound is on each wait: planning a thousand alerts, or storing a run with many
    keys, is a long transaction of quick statements, and healthy."""
    store = storage(store_dsn, statement=1, idle=1, margin=1)
    try:
        began = time.monotonic()
        with store.transaction() as tx:
            while time.monotonic() - began < 4:  # twice the bound of one statement
                assert tx.rows("SELECT pg_sleep(0.05)") == [("",)]
            tx.run("INSERT INTO invariant_state (invariant, updated_at) VALUES ('x', ?)", (NOW,))
        with store.transaction() as tx:  # and it was committed
            assert tx.rows("SELECT invariant FROM invariant_state") == [("x",)]
    finally:
        store.close()


def test_a_long_transaction_has_the_long_bound_on_the_server_and_on_invmon_s_side(
    store_dsn: str,
) -> None:
    store = storage(store_dsn, statement=1, margin=1, long=30)
    try:
        with store.transaction(long=True) as tx:
            assert tx.rows("SELECT pg_sleep(3)") == [("",)]  # past the ordinary 1 s and 2 s
    finally:
        store.close()


def test_a_statement_past_the_bound_is_ended_by_the_server(store_dsn: str) -> None:
    store = storage(store_dsn, statement=1, margin=30)
    try:
        began = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled), store.transaction() as tx:
            tx.rows("SELECT pg_sleep(20)")
        assert time.monotonic() - began < 15
        with store.transaction() as tx:  # the connection is fine: the server ended it
            assert tx.rows("SELECT 1") == [(1,)]
    finally:
        store.close()


def test_a_store_server_that_answers_nothing_is_cut_and_the_next_transaction_goes_on(
    store_dsn: str,
) -> None:
    """statement_timeout cannot end a wait on a server process that is stopped: invmon closes
    the connection at the bound, says so, and the next transaction has another one."""
    store = storage(store_dsn, statement=1, margin=1)
    try:
        backend_pid(store)
        pids = store_backends(store_dsn)  # each connection the pool holds: any may be lent

        def one_transaction() -> None:
            with store.transaction() as tx:
                tx.rows("SELECT 1")

        with ThreadPoolExecutor(1) as pool:
            began = time.monotonic()
            with contextlib.ExitStack() as all_stopped:
                for pid in pids:
                    all_stopped.enter_context(stopped(pid))
                waiting = pool.submit(one_transaction)
                with pytest.raises(Cut) as cut:
                    waiting.result(timeout=60)
                waited = time.monotonic() - began
        assert waited >= 2.0, waited
        assert re.fullmatch(
            r"invmon closed the connection: the state store had no answer after \S+, past the "
            r"state store's bound on one statement, 2s \(its statement_timeout, 1s, and a "
            r"margin of 1s\); the "
            rf"server did not end it \({re.escape(CAUSES)}\)",
            str(cut.value),
        ), str(cut.value)
        one_transaction()
        # The cut connection is gone: its server process, let go, found its socket closed.
        wait_for(
            lambda: len(pids & store_backends(store_dsn)) == len(pids) - 1 or None,
            30,
            "the cut connection's server process to end",
        )
    finally:
        store.close()


def store_backends(dsn: str) -> set[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'invmon-state'"
            " AND datname = current_database()"
        ).fetchall()
    return {int(pid) for (pid,) in rows}


def test_a_tick_on_a_silent_store_waits_for_one_bound_not_one_per_ready_slot(
    store_dsn: str,
) -> None:
    """The scheduler's tick is held for stalled at 15 s. On a store that answers nothing, it
    gave each ready slot its own wait (a cut, then the pool's wait for a connection that is
    never answered): 54 s for four slots. The first failure now ends the tick's claiming."""
    parts = conninfo_to_dict(store_dsn)
    with FreezingProxy(
        str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432)
    ) as proxy:
        proxied = make_conninfo(store_dsn, host="127.0.0.1", port=proxy.port)
        bounds = StoreBounds(statement=timedelta(seconds=1), margin=timedelta(seconds=1))
        store = StateStore(PostgresStorage(proxied, connect_timeout=3, bounds=bounds))
        try:
            loop = scheduler(store, "a", "b", "c", "d")
            proxy.freeze()
            began = time.monotonic()
            assert loop.tick(START) == []
            waited = time.monotonic() - began
            proxy.thaw()
        finally:
            proxy.thaw()
            store.close()
    assert 2.0 <= waited < 10.0, waited  # one cut (2 s), not a wait of 3 s per slot more
