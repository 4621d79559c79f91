"""A state store that stops working is never a silent outage: the daemon goes on, says so
on /healthz and /metrics and in one log line a minute, and `status` says what is wrong; a
read-only store file can still be looked at."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path

import psycopg
import pytest
from builders import build_daemon, config_file, daemon_config
from helpers import cli, items_table, wait_for
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from monitor.config import StateConfig
from monitor.durations import RECONNECT_ATTEMPT
from monitor.store.state import StateStore
from monitor.store.storage import PostgresStorage
from monitor.store.store_health import STORE_ERRORS

INVARIANT = "-- description: no item is bad\n-- key: [id]\nSELECT id FROM items WHERE bad\n"


def damage(path: Path) -> None:
    """Garbage over the file's first page, header included: SQLite notices on its next
    transaction (the header's change counter no longer matches its page cache)."""
    with path.open("r+b") as handle:
        handle.write(os.urandom(4096))


def test_a_damaged_store_makes_the_daemon_unhealthy_and_it_keeps_evaluating(
    database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    items_table(database, bad=(2,))
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "bad.sql").write_text(INVARIANT)
    state = tmp_path / "state.db"
    store = StateStore.open(path=state)
    daemon = build_daemon(daemon_config(folder, state=StateConfig(path=state)), database, store)
    try:
        daemon.reload()
        assert daemon.evaluate("bad") is not None
        assert daemon.store_health.problem is None
        # Everything into the main file first, so the damage is where SQLite will read.
        with sqlite3.connect(state) as other:
            other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        damage(state)
        with caplog.at_level(logging.ERROR, logger="invmon.state"):
            first = daemon.evaluate("bad")
            second = daemon.evaluate("bad")
            daemon.deliver()
        assert first is not None and (first.status, first.count) == ("violated", 1)
        assert second is not None
        problem = daemon.store_health.problem
        assert problem is not None
        assert problem.startswith(f"the state store (state.path {str(state)!r}) failed while ")
        assert daemon.probes.health_problem() == problem
        assert b"invmon_state_store_ok 0.0" in daemon.metrics.render()
        said = [r.getMessage() for r in caplog.records if r.name == "invmon.state"]
        assert len(said) == 1  # per minute
        assert "Recovering the state store" in said[0]
    finally:
        daemon.close()
        store.close()
    done = cli("status", "--config", str(config_file(tmp_path, state={"path": state})))
    assert done.returncode == 2
    assert done.stderr.startswith("invmon: cannot ") and "state.path" in done.stderr
    assert "Traceback" not in done.stderr


def test_status_reads_a_store_it_may_not_write(database: str, tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    store = StateStore.open(path=state)
    store.close()
    state.chmod(0o444)
    tmp_path.chmod(0o555)  # no -wal or -shm file may be created beside it either
    try:
        config_folder = tmp_path.parent / f"{tmp_path.name}-config"
        config_folder.mkdir()
        done = cli("status", "--config", str(config_file(config_folder, state={"path": state})))
    finally:
        tmp_path.chmod(0o755)
        state.chmod(0o644)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("No open incidents.")


class Outage:
    """A PostgreSQL database that refuses connections (its open ones ended) until `back()`."""

    def __init__(self, admin_dsn: str, database: str) -> None:
        self.admin_dsn = admin_dsn
        self.name = str(conninfo_to_dict(database)["dbname"])

    def accept(self, on: bool) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
                    sql.Identifier(self.name), sql.SQL("true" if on else "false")
                )
            )
            if not on:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                    (self.name,),
                )


def works(storage: PostgresStorage) -> bool:
    try:
        with storage.transaction() as tx:
            return tx.rows("SELECT 1") == [(1,)]
    except STORE_ERRORS:
        return False


def test_a_postgresql_store_back_from_an_outage_is_used_again_within_seconds(
    admin_dsn: str, database: str
) -> None:
    """psycopg_pool waits twice as long between reconnects each time: left at its default,
    its attempts fall about 1, 3, 7, 15, 31 and 63 s into an outage (the first wait is 0.9
    to 1.1 s, each next one twice the last), so a store back after 18 s was used again 10
    to 16 s later, and one back after 40 s some 20 s later. Bounded (RECONNECT_ATTEMPT), an
    attempt waits 4 s at most, however long the store was away."""
    outage = Outage(admin_dsn, database)
    storage = PostgresStorage(database, connect_timeout=1)
    try:
        assert works(storage)
        outage.accept(False)
        down_until = time.monotonic() + 18  # past the fourth attempt (13.5-16.5 s)
        failures = 0
        while time.monotonic() < down_until:  # used all along, as the daemon uses it
            assert not works(storage)
            failures += 1
        outage.accept(True)
        back = time.monotonic()
        wait_for(lambda: works(storage), 60, "the store to be used again")
        recovered = time.monotonic() - back
    finally:
        outage.accept(True)
        storage.close()
    assert failures >= 9  # each use failed within the pool's timeout of 1 s
    assert recovered < RECONNECT_ATTEMPT.total_seconds(), recovered


def test_a_request_waiting_through_an_outage_gets_the_store_once_it_is_back(
    admin_dsn: str, database: str
) -> None:
    """A request waits for a connection up to the connect timeout (20 s here); the pool's
    attempt to reconnect must not end before it, or the request waits with none under way
    (an 8 s attempt left it so, and it failed at 20 s though the store was back at 10)."""
    outage = Outage(admin_dsn, database)
    storage = PostgresStorage(database, connect_timeout=20)
    back = threading.Timer(10, outage.accept, (True,))
    try:
        assert works(storage)
        outage.accept(False)
        back.start()
        # The connections the outage ended fail at once; then a request waits for one.
        for _ in range(10):
            began = time.monotonic()
            served = works(storage)
            if served or time.monotonic() - began > 2:
                break
        assert served  # the request that waited is served once the store is back
    finally:
        back.cancel()
        back.join(30)
        outage.accept(True)
        storage.close()


def test_a_read_that_goes_through_does_not_clear_a_failed_write() -> None:
    """A read-only store (a promoted replica, a full disk) answers reads: a review saw
    /healthz flap to 200 at each successful read while no run could be stored. Only a
    successful write clears the problem; any write does, so one brief outage during a
    rare use (a claim of an hourly slot) does not keep the daemon unhealthy for an hour."""
    from monitor.store.store_health import StoreHealth

    health = StoreHealth("state.dsn")
    with health.guard("recording a run of bad"):
        raise psycopg.errors.ReadOnlySqlTransaction(
            "cannot execute INSERT in a read-only transaction"
        )
    failed = health.problem
    with health.guard("reading the quarantined invariants", reads_only=True):
        pass
    after_a_read = health.problem
    with health.guard("renewing this daemon's claims"):
        pass
    assert failed == (
        "the state store (state.dsn) failed while recording a run of bad: cannot execute "
        "INSERT in a read-only transaction"
    )
    assert (after_a_read, health.problem) == (failed, None)


def test_a_write_failing_again_is_not_cleared_by_the_success_of_another() -> None:
    """A damaged SQLite file failed each run's write while the claims' renewals, on other
    pages, went through: each cleared the problem, and /healthz stayed 200 while no run
    was stored and nothing reached Slack (a reviewer's corrupted file). The same write
    failing twice is the store's problem until that write succeeds, while it is retried."""
    from monitor.store.store_health import STALE_AFTER, StoreHealth

    clock = FakeMonotonic()
    health = StoreHealth("state.path 'state.db'", clock)
    damaged = sqlite3.DatabaseError("database disk image is malformed")
    said = (
        "the state store (state.path 'state.db') failed while recording a run of a: "
        "database disk image is malformed"
    )
    seen: list[str | None] = []
    for _ in range(2):
        with health.guard("recording a run of a"):
            raise damaged
        clock.now += 10
        with health.guard("renewing this daemon's claims"):
            pass
        seen.append(health.problem)
    assert seen == [None, said]  # once is a blip; twice is not
    clock.now += STALE_AFTER - 11
    assert health.problem == said
    with health.guard("recording a run of a"):
        pass  # its own success
    assert health.problem is None
    # Failing twice, then never tried again (its invariant removed): not the store's now.
    for _ in range(2):
        with health.guard("recording a run of b"):
            raise damaged
    clock.now += STALE_AFTER
    with health.guard("renewing this daemon's claims"):
        pass
    assert health.problem is None


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_scrape_reads_the_store_once_and_never_waits_on_it_past_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each of five gauges read the store on its own, each waiting its connection timeout:
    a reviewer's scrape took 25 s while the store refused connections, past Prometheus's
    10 s, so `invmon_state_store_ok 0` was never scraped."""
    from monitor.daemon import metrics
    from monitor.daemon.metrics import Metrics

    monkeypatch.setattr(metrics, "FIGURES_WAIT", 0.2)
    answer = threading.Event()
    reads = []
    ok = [True]

    def counts() -> dict[str, int]:
        reads.append(1)
        answer.wait(30)
        return {"open_incidents": 3, "events_pending": 1}

    scraped = Metrics(counts, lambda: ok[0])

    def scrape() -> str:
        pages: list[str] = []
        scraping = threading.Thread(target=lambda: pages.append(scraped.render().decode()))
        scraping.start()
        scraping.join(10)  # the store's read waits 30 s
        assert not scraping.is_alive(), "the scrape waited on the store"
        return pages[0]

    hung = [scrape(), scrape()]  # the second joins the read still under way
    assert all("invmon_open_incidents NaN" in page for page in hung)
    assert len(reads) == 1
    answer.set()
    wait_for(lambda: "invmon_open_incidents 3.0" in scrape(), 10, "the store's figures")
    assert "invmon_events_pending 1.0" in scrape()
    before = len(reads)
    scrape()
    assert len(reads) == before + 1  # one read for the whole page
    scraped.observe_deliveries({"SENT": 15}, 0)  # the alerts turn's last counts
    assert 'invmon_deliveries{state="SENT"} 15.0' in scrape()
    ok[0] = False  # the store failing: not asked at all
    failing = scrape()
    assert "invmon_state_store_ok 0.0" in failing and "invmon_open_incidents NaN" in failing
    assert len(reads) == before + 2
    # The ledger's counts are the store's too: not passed off as current (an SRE's review).
    assert 'invmon_deliveries{state="SENT"} NaN' in failing


def test_the_store_working_again_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """Its failures are logged; an operator reading the log saw no line when it came back."""
    from monitor.store.store_health import StoreHealth

    health = StoreHealth("state.dsn")
    caplog.set_level(logging.INFO, logger="invmon.state")
    with health.guard("claiming a slot"):
        raise psycopg.OperationalError("connection refused")
    with health.guard("reading the quarantined invariants", reads_only=True):
        pass  # a read says nothing about writes: not back yet
    for _ in range(2):
        with health.guard("claiming a slot"):
            pass
    # Failing again within the minute: not logged (one line a minute), so its return isn't.
    with health.guard("claiming a slot"):
        raise psycopg.OperationalError("connection refused")
    with health.guard("claiming a slot"):
        pass
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert said == ["the state store (state.dsn) works again"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
