"""The PostgreSQL state store's bounds (storage.py, StoreBounds): a peer stopped inside a
transaction loses its session and frees its locks, a healthy long transaction is never cut
and its waiters wait for it, and a server that answers nothing is cut by invmon, with the
store usable again at once."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from builders import build_daemon, daemon_config
from freezing_proxy import FreezingProxy
from helpers import FakeClock, invariant, lock_waits, stopped, wait_for
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
        # Its connections gone, so that a test counts its own store's only.
        wait_for(lambda: not store_backends(dsn), 30, "the migrating store's connections to end")
        yield dsn


def storage(dsn: str, **bounds: float) -> PostgresStorage:
    return PostgresStorage(
        dsn, bounds=StoreBounds(**{k: timedelta(seconds=v) for k, v in bounds.items()})
    )


def backend_pid(store: PostgresStorage) -> int:
    with store.transaction() as tx:
        [(pid,)] = tx.rows("SELECT pg_backend_pid()")
    return int(pid)


def test_a_connection_holds_the_idle_bound_on_the_server_and_leaves_the_others_alone(
    store_dsn: str,
) -> None:
    """Only the idle bound: a statement, or a wait for a lock, may take as long as a healthy
    transaction holds its row (StoreBounds)."""
    store = storage(store_dsn, idle=3)
    shown = "SELECT current_setting(n) FROM unnest(ARRAY[%s, %s, %s]) AS n"
    names = ("idle_in_transaction_session_timeout", "statement_timeout", "lock_timeout")
    over_tcp = not str(conninfo_to_dict(store_dsn).get("host") or "/").startswith("/")
    try:
        for _ in range(2):  # the session's: every transaction on the connection has it
            with store.transaction() as tx:
                assert [v for (v,) in tx.rows(shown, names)] == ["3s", "0", "0"]
                # Shown as the socket has it: a Unix socket has none.
                [(user_timeout,)] = tx.rows("SHOW tcp_user_timeout")
                assert user_timeout == ("3000" if over_tcp else "0")  # ms, as SHOW says it
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
    # 5 s: the waiter has that long to be seen waiting on the lock, on a busy machine too.
    peer, me = storage(store_dsn, idle=5), storage(store_dsn, idle=5)
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
            wait_for(
                lambda: lock_waits(store_dsn, "invmon-state") or None,
                30,
                "the waiter to wait on the lock",
            )
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


def test_a_healthy_transaction_is_never_cut_however_long_and_its_waiters_wait_for_it(
    store_dsn: str,
) -> None:
    """The bound is on each answer: planning a thousand alerts, or storing a run with many
    keys, is a long transaction of quick statements. One that holds a row meanwhile (as
    storing a run holds its claim) keeps the others waiting on it, and they wait: a review
    saw a daemon's own heartbeat fail behind such a run, and a peer take over its claim."""
    # The holder's transaction lasts twice its bound on one answer; the waiter waits on the
    # server for as long (past the idle bound), with a bound of its own that is longer.
    holder, waiter = storage(store_dsn, idle=3, answer=2), storage(store_dsn, idle=3, answer=30)
    locked = threading.Event()

    def hold() -> None:
        with holder.transaction() as tx:
            lock_subject(tx, "refunds", NOW)
            locked.set()
            began = time.monotonic()
            while time.monotonic() - began < 4:  # twice the bound on one answer
                assert tx.rows("SELECT pg_sleep(0.05)") == [("",)]
            tx.run(
                "UPDATE invariant_state SET consecutive_errors = 7 WHERE invariant = ?",
                ("refunds",),
            )

    def wait() -> tuple[int, int, int | None]:
        with waiter.transaction() as tx:
            return lock_subject(tx, "refunds", NOW)

    try:
        with ThreadPoolExecutor(2) as pool:
            held = pool.submit(hold)
            assert locked.wait(timeout=30)
            waited = pool.submit(wait)
            held.result(timeout=60)
            assert waited.result(timeout=60) == (0, 7, None)  # after the holder's commit
    finally:
        holder.close()
        waiter.close()


def test_a_store_server_that_answers_nothing_is_cut_and_the_next_transaction_goes_on(
    store_dsn: str,
) -> None:
    """statement_timeout cannot end a wait on a server process that is stopped: invmon closes
    the connection at the bound, says so, and the next transaction has another one."""
    store = storage(store_dsn, answer=2)
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
            r"state store's bound on one answer, 2s; the "
            rf"server did not end it \({re.escape(CAUSES)}, or a lock that another "
            r"transaction held that long\)",
            str(cut.value),
        ), str(cut.value)
        one_transaction()
        # The cut connection is gone: its server process, let go, found its socket closed.
        wait_for(
            lambda: pids - store_backends(store_dsn) or None,
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
        bounds = StoreBounds(answer=timedelta(seconds=2))
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


def test_a_tick_whose_claim_fails_leaves_the_other_ready_slots_for_its_next_turn(
    store_dsn: str,
) -> None:
    """The quarantine read answers; the first claim waits on a peer's claim of the same
    slot that the peer neither commits nor rolls back until the bound cuts it. The tick then
    stops, where it gave each ready slot the same wait in turn."""
    store = StateStore(PostgresStorage(store_dsn, bounds=StoreBounds(answer=timedelta(seconds=2))))
    try:
        loop = scheduler(store, "a", "b", "c", "d")
        with psycopg.connect(store_dsn) as peer:  # a peer in the middle of claiming each
            for name in ("a", "b", "c", "d"):
                peer.execute(
                    "INSERT INTO slot_claims (invariant, slot, owner, claimed_at, lease_until)"
                    " VALUES (%s, %s, 'peer', %s, %s)",
                    (name, stamp(START), stamp(START), stamp(START + timedelta(seconds=30))),
                )
            began = time.monotonic()
            assert loop.tick(START) == []
            waited = time.monotonic() - began
            peer.rollback()
    finally:
        store.close()
    assert 2.0 <= waited < 5.0, waited  # one cut of 2 s, not four


def test_a_quarantine_the_store_failed_to_keep_is_judged_again_at_the_next_tick(
    store_dsn: str, database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run far past its timeout was marked quarantined before the store kept it: a write
    that failed was never tried again, and the invariant ran on."""
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "slow.sql").write_text(
        "-- description: slow\n-- timeout: 1s\n-- schedule: every 1m\nSELECT 1 AS x\n"
    )
    config = daemon_config(folder, daemon=DaemonConfig(overrun_margin=timedelta(seconds=1)))
    parts = conninfo_to_dict(store_dsn)
    host, port = str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432)
    with FreezingProxy(host, port) as proxy:
        proxied = make_conninfo(store_dsn, host="127.0.0.1", port=proxy.port)
        bounds = StoreBounds(answer=timedelta(seconds=2))
        store = StateStore(PostgresStorage(proxied, connect_timeout=3, bounds=bounds))
        daemon = build_daemon(config, database, store, clock=FakeClock(START))
        try:
            daemon.reload()
            assert daemon.scheduler.begin("slow", START, refuse=False) is not None
            # Its query has held its connection for 5 minutes, past 1 s and twice the margin.
            monkeypatch.setattr(daemon, "_held_for", lambda inv: timedelta(minutes=5))
            proxy.freeze()
            daemon.quarantine_overdue()  # the store does not answer: cut at 2 s
            proxy.thaw()
            assert store.quarantined() == {}
            daemon.quarantine_overdue()  # the next tick's first step
            assert list(store.quarantined()) == ["slow"]
        finally:
            proxy.thaw()
            daemon.databases.close()
            store.close()
