"""The daemon on a real streaming standby: a lagging replica is not evaluated (`stale`), a
"replica stale" incident opens once, and it closes when replay catches up; a caught-up
standby of an idle, silent primary is evaluated and never flaps."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from builders import build_daemon, daemon_config
from helpers import wait_for

from monitor.config import DaemonConfig
from monitor.daemon.daemon import Daemon
from monitor.execution.results import RunResult
from monitor.store.state import REPLICA_SUBJECT, StateStore

if TYPE_CHECKING:
    from standby import StandbyPair


def go_stale(standby_pair: StandbyPair, daemon: Daemon, table: str, name: str) -> RunResult:
    """Pause replay, change the data on the primary, and evaluate until the run is stale."""
    standby_pair.pause_replay()
    with standby_pair.primary() as conn:
        conn.execute(f"UPDATE {table} SET bad = false")
    return wait_for(
        lambda: r if (r := daemon.evaluate(name)) and r.status == "stale" else None,
        20,
        f"a stale run of {name}",
    )


def bad_rows_of(table: str) -> str:
    return f"-- description: nothing is bad\n-- key: [id]\nSELECT id FROM {table} WHERE bad\n"


def watching_one_bad_row(
    standby_pair: StandbyPair, tmp_path: Path, max_replica_lag: float
) -> tuple[str, Daemon, StateStore]:
    """A table of this test's own (the pair is shared by the module) with one bad row on the
    primary, replayed on the standby, and a daemon watching the standby with `bad.sql`."""
    table = f"items_{uuid.uuid4().hex[:8]}"
    with standby_pair.primary() as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, bad bool NOT NULL)")
        conn.execute(f"INSERT INTO {table} VALUES (1, true)")
    standby_pair.wait_caught_up()
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "bad.sql").write_text(bad_rows_of(table))
    store = StateStore.open(path=tmp_path / "state.db")
    lag = timedelta(seconds=max_replica_lag)
    config = daemon_config(folder, daemon=DaemonConfig(max_replica_lag=lag))
    return table, build_daemon(config, standby_pair.standby_dsn, store), store


def test_a_lagging_standby_is_not_evaluated_and_opens_one_replica_stale_incident(
    standby_pair: StandbyPair, tmp_path: Path
) -> None:
    table, daemon, store = watching_one_bad_row(standby_pair, tmp_path, max_replica_lag=3)
    try:
        daemon.reload()
        first = daemon.evaluate("bad")
        assert first is not None
        assert (first.status, first.count) == ("violated", 1)
        assert first.replica_lag is not None and first.replica_lag < 3

        stale = go_stale(standby_pair, daemon, table, "bad")
        assert stale.count is None
        assert stale.replica_lag is not None and stale.replica_lag > 3
        assert stale.error is not None and stale.error.startswith("not evaluated: replica lag ")
        again = daemon.evaluate("bad")
        assert again is not None and again.status == "stale"
        # Stale runs neither resolved the violation nor opened a second replica incident.
        assert sorted((i.invariant, i.kind) for i in store.open_incidents()) == [
            (REPLICA_SUBJECT, "replica_stale"),
            ("bad", "violation"),
        ]

        standby_pair.resume_replay()
        standby_pair.wait_caught_up()

        def evaluated_fresh() -> RunResult | None:
            # Caught up is lag 0 with no further write; the gate may serve its last (stale)
            # reading for up to a second.
            result = daemon.evaluate("bad")
            return result if result is not None and result.status != "stale" else None

        fresh = wait_for(evaluated_fresh, 20, "a fresh run once replay caught up")
        assert (fresh.status, fresh.count) == ("ok", 0)
        assert fresh.replica_lag == 0.0
        assert [e.kind for e in store.events(REPLICA_SUBJECT)] == [
            "replica_stale",
            "replica_fresh",
        ]
        assert [e.kind for e in store.events("bad")] == ["opened", "resolved"]
        assert store.open_incidents() == []
        # Violated (fresh enough) until the lag passed 3s, then stale until replay resumed.
        statuses = [r.status for r in reversed(store.runs("bad", limit=1000))]
        phases = [s for i, s in enumerate(statuses) if i == 0 or statuses[i - 1] != s]
        assert phases == ["violated", "stale", "ok"]
        assert statuses.count("stale") >= 2
    finally:
        daemon.databases.close()
        store.close()


def test_a_stale_target_pauses_only_its_own_invariants(
    standby_pair: StandbyPair, tmp_path: Path, database: str
) -> None:
    """payments reads a standby whose replay is paused; billing reads another server. Only
    payments goes stale, with one replica incident named for it; billing keeps counting."""
    table = f"items_{uuid.uuid4().hex[:8]}"
    with standby_pair.primary() as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, bad bool NOT NULL)")
        conn.execute(f"INSERT INTO {table} VALUES (1, true)")
    standby_pair.wait_caught_up()
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, bad bool NOT NULL)")
        conn.execute(f"INSERT INTO {table} VALUES (1, true), (2, true)")
    folder = tmp_path / "invariants"
    for target in ("payments", "billing"):
        (folder / target).mkdir(parents=True)
        (folder / target / "bad.sql").write_text(bad_rows_of(table))
    store = StateStore.open(path=tmp_path / "state.db")
    targets = {
        "payments": {"dsn": standby_pair.standby_dsn, "max_replica_lag": "3s"},
        "billing": {"dsn": database, "max_replica_lag": "3s"},
    }
    daemon = build_daemon(daemon_config(folder, targets=targets), None, store)
    try:
        daemon.reload()
        fresh = daemon.evaluate("payments/bad")
        assert fresh is not None and (fresh.status, fresh.count) == ("violated", 1)
        stale = go_stale(standby_pair, daemon, table, "payments/bad")
        assert stale.target == "payments" and stale.count is None
        billing = daemon.evaluate("billing/bad")
        assert billing is not None
        assert (billing.target, billing.status, billing.count) == ("billing", "violated", 2)
        assert billing.replica_lag == 0.0  # a primary: nothing to lag behind
        assert sorted((i.invariant, i.target, i.kind) for i in store.open_incidents()) == [
            ("(replica payments)", "payments", "replica_stale"),
            ("billing/bad", "billing", "violation"),
            ("payments/bad", "payments", "violation"),  # from the fresh run; stale runs keep it
        ]
    finally:
        standby_pair.resume_replay()  # the pair is shared by the module
        standby_pair.wait_caught_up()
        daemon.databases.close()
        store.close()
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {table}")


def test_a_caught_up_standby_of_a_silent_primary_is_evaluated_and_never_goes_stale(
    standby_pair: StandbyPair, tmp_path: Path
) -> None:
    """max_replica_lag 2s, no writes: the primary sends nothing for up to 30 s (until the
    standby's receiver pings it), which the old rule read as a lag of up to 30 s."""
    _, daemon, store = watching_one_bad_row(standby_pair, tmp_path, max_replica_lag=2)
    try:
        daemon.reload()

        def silent_for_3s() -> bool:
            result = daemon.evaluate("bad")
            assert result is not None
            assert (result.status, result.count, result.replica_lag) == ("violated", 1, 0.0)
            with standby_pair.standby() as conn:
                row = conn.execute(
                    "SELECT now() - last_msg_receipt_time > interval '3 seconds'"
                    " FROM pg_stat_wal_receiver WHERE status = 'streaming'"
                ).fetchone()
            return row is not None and row[0] is True

        wait_for(silent_for_3s, 40, "the primary to be silent for longer than 3 s")
        final = daemon.evaluate("bad")
        assert final is not None
        assert (final.status, final.replica_lag) == ("violated", 0.0)
        assert store.events(REPLICA_SUBJECT) == []
        statuses = {r.status for r in store.runs("bad", limit=1000)}
        assert statuses == {"violated"}
        assert [(i.invariant, i.kind) for i in store.open_incidents()] == [("bad", "violation")]
    finally:
        daemon.databases.close()
        store.close()
