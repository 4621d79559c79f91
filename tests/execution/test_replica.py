"""Replica awareness against a real primary and streaming standby: in_recovery, lag that is
zero when nothing is outstanding (even on an idle primary), lag that grows while replay is
paused, and the staleness rule. tests/execution/test_replica_idle.py covers a silent primary,
write load and a primary that goes away."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from helpers import wait_for
from psycopg import sql
from psycopg.rows import dict_row

from monitor.execution.replica import ReplicaStatus, _lag_seconds, is_stale, read_replica_status

if TYPE_CHECKING:
    from standby import StandbyPair

ONE_SECOND = timedelta(seconds=1)


def status_of(dsn: str, read_only: bool = True) -> ReplicaStatus:
    """read_replica_status inside a READ ONLY transaction, as the runner would call it."""
    with psycopg.connect(dsn) as conn:
        conn.read_only = read_only
        status = read_replica_status(conn)
        # It ran inside the caller's transaction and left it open.
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.rollback()
    return status


def commit_on_primary(pair: StandbyPair) -> None:
    with pair.primary() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS heartbeat (at timestamptz NOT NULL)")
        conn.execute("INSERT INTO heartbeat VALUES (now())")


def standby_scalar(pair: StandbyPair, sql: str) -> Any:
    with pair.standby() as conn:
        row = conn.execute(sql.encode()).fetchone()
    assert row is not None
    return row[0]


# --- against real servers --------------------------------------------------------------


def test_a_primary_is_not_in_recovery_and_has_zero_lag(standby_pair: StandbyPair) -> None:
    assert status_of(standby_pair.primary_dsn) == ReplicaStatus(in_recovery=False, lag_seconds=0.0)
    assert status_of(standby_pair.primary_dsn, read_only=False) == ReplicaStatus(False, 0.0)


def test_the_status_is_read_whatever_the_connections_row_factory(
    standby_pair: StandbyPair,
) -> None:
    for dsn, in_recovery in [(standby_pair.primary_dsn, False), (standby_pair.standby_dsn, True)]:
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            assert read_replica_status(conn).in_recovery is in_recovery


def caught_up(status: ReplicaStatus) -> bool:
    """A standby that replayed all it received over a live link has lag exactly 0."""
    return status == ReplicaStatus(in_recovery=True, lag_seconds=0.0)


def test_a_caught_up_standby_is_in_recovery_and_has_almost_no_lag(
    standby_pair: StandbyPair,
) -> None:
    commit_on_primary(standby_pair)
    standby_pair.wait_caught_up(10)
    status = status_of(standby_pair.standby_dsn)
    assert caught_up(status), status
    assert is_stale(status, timedelta(0)) is False


def test_a_standby_of_an_idle_primary_is_fresh_however_old_its_last_commit(
    standby_pair: StandbyPair,
) -> None:
    commit_on_primary(standby_pair)
    standby_pair.wait_caught_up(10)
    wait_for(
        lambda: standby_scalar(
            standby_pair,
            "SELECT now() - pg_last_xact_replay_timestamp() > interval '1.5 seconds'",
        ),
        10,
        "the standby's last replayed commit to be more than 1.5 s old",
    )
    status = status_of(standby_pair.standby_dsn)
    assert caught_up(status), status
    assert is_stale(status, timedelta(0)) is False


def test_with_replay_paused_lag_grows_until_stale_and_returns_to_zero_after_resuming(
    standby_pair: StandbyPair,
) -> None:
    # A fresh replayed commit first, so the lag starts small and is measurable (not None).
    commit_on_primary(standby_pair)
    standby_pair.wait_caught_up(10)
    standby_pair.pause_replay()
    try:
        commit_on_primary(standby_pair)
        wait_for(
            lambda: standby_scalar(
                standby_pair, "SELECT pg_last_wal_receive_lsn() > pg_last_wal_replay_lsn()"
            ),
            10,
            "the standby to receive the commit it cannot replay",
        )
        first = status_of(standby_pair.standby_dsn)
        assert first.in_recovery is True
        assert first.lag_seconds is not None
        assert first.lag_seconds > 0.0
        first_lag = first.lag_seconds

        def grown() -> ReplicaStatus | None:
            status = status_of(standby_pair.standby_dsn)
            assert status.lag_seconds is not None
            return status if status.lag_seconds > first_lag else None

        assert wait_for(grown, 10, "the lag to grow").in_recovery is True

        def stale() -> ReplicaStatus | None:
            status = status_of(standby_pair.standby_dsn)
            assert status.lag_seconds is not None
            # Every reading on the way agrees with the threshold, not just the last one.
            assert is_stale(status, ONE_SECOND) is (status.lag_seconds > 1.0)
            return status if is_stale(status, ONE_SECOND) else None

        stale_status = wait_for(stale, 10, "the lag to exceed 1 s")
        assert stale_status.lag_seconds is not None
        assert stale_status.lag_seconds > 1.0
    finally:
        standby_pair.resume_replay()

    standby_pair.wait_caught_up(10)
    after = status_of(standby_pair.standby_dsn)
    assert caught_up(after), after
    assert is_stale(after, timedelta(0)) is False


def test_a_standby_whose_link_to_the_primary_broke_goes_stale(standby_pair: StandbyPair) -> None:
    """A cut link leaves "everything received is replayed", which must not read as fresh."""
    commit_on_primary(standby_pair)
    standby_pair.wait_caught_up(10)
    with standby_pair.standby() as conn:
        row = conn.execute("SHOW primary_conninfo").fetchone()
        assert row is not None
        conninfo = str(row[0])
        conn.execute("ALTER SYSTEM SET primary_conninfo = ''")
        conn.execute("SELECT pg_reload_conf()")
    try:
        wait_for(
            lambda: standby_scalar(standby_pair, "SELECT count(*) = 0 FROM pg_stat_wal_receiver"),
            10,
            "the WAL receiver to stop",
        )
        commit_on_primary(standby_pair)  # the standby never receives this one
        broken = wait_for(
            lambda: next(
                (s for s in [status_of(standby_pair.standby_dsn)] if is_stale(s, ONE_SECOND)),
                None,
            ),
            10,
            "the broken standby to read as stale",
        )
        assert broken.lag_seconds is not None and broken.lag_seconds > 1.0
    finally:
        with standby_pair.standby() as conn:
            conn.execute(
                sql.SQL("ALTER SYSTEM SET primary_conninfo = {}").format(sql.Literal(conninfo))
            )
            conn.execute("SELECT pg_reload_conf()")
    standby_pair.wait_caught_up(20)
    assert caught_up(status_of(standby_pair.standby_dsn))


# --- pure ------------------------------------------------------------------------------


def test_a_primary_is_never_stale() -> None:
    assert is_stale(ReplicaStatus(in_recovery=False, lag_seconds=0.0), timedelta(0)) is False
    assert is_stale(ReplicaStatus(in_recovery=False, lag_seconds=None), timedelta(0)) is False


def test_a_standby_with_unknown_lag_is_stale() -> None:
    assert is_stale(ReplicaStatus(in_recovery=True, lag_seconds=None), timedelta(days=1)) is True


def test_a_standby_is_stale_only_when_lag_is_strictly_above_the_threshold() -> None:
    def standby(lag: float) -> ReplicaStatus:
        return ReplicaStatus(in_recovery=True, lag_seconds=lag)

    assert is_stale(standby(0.0), timedelta(0)) is False
    assert is_stale(standby(0.999), ONE_SECOND) is False
    assert is_stale(standby(1.0), ONE_SECOND) is False
    assert is_stale(standby(1.001), ONE_SECOND) is True
    assert is_stale(standby(0.001), timedelta(0)) is True
    assert is_stale(standby(90.0), timedelta(minutes=1, seconds=30)) is False
    assert is_stale(standby(90.5), timedelta(minutes=1, seconds=30)) is True


def test_a_negative_threshold_is_rejected() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        is_stale(ReplicaStatus(in_recovery=True, lag_seconds=0.0), timedelta(seconds=-1))


@pytest.mark.parametrize(
    ("in_recovery", "replayed_all_received", "replay_age", "heard", "timeout", "lag"),
    [
        pytest.param(False, None, None, None, 60.0, 0.0, id="primary"),
        # An idle primary is silent up to wal_receiver_timeout / 2 (30 s): nothing is behind.
        pytest.param(True, True, 3600.0, 4.0, 60.0, 0.0, id="caught-up-idle-primary"),
        pytest.param(True, True, 3600.0, 29.9, 60.0, 0.0, id="caught-up-silent-until-the-ping"),
        pytest.param(True, True, 3600.0, 60.0, 60.0, 0.0, id="caught-up-silent-up-to-timeout"),
        pytest.param(True, True, 3600.0, 60.5, 60.0, 3600.0, id="silent-past-the-timeout"),
        pytest.param(True, True, 3600.0, -0.01, 60.0, 0.0, id="heard-during-the-statement"),
        pytest.param(True, True, None, 0.5, 60.0, 0.0, id="caught-up-no-commit-yet"),
        pytest.param(True, True, None, 61.0, 60.0, None, id="silent-past-timeout-no-commit"),
        pytest.param(True, True, 3600.0, 1.0, 0.0, 3600.0, id="receiver-timeout-disabled"),
        pytest.param(True, True, 3600.0, 1.0, None, 3600.0, id="receiver-timeout-unknown"),
        pytest.param(True, True, 3600.0, None, 60.0, 3600.0, id="caught-up-but-not-streaming"),
        pytest.param(True, True, None, None, 60.0, None, id="not-streaming-no-commit-replayed"),
        pytest.param(True, False, 2.5, 0.1, 60.0, 2.5, id="standby-behind"),
        pytest.param(True, False, -0.25, 0.1, 60.0, 0.0, id="standby-behind-clock-skew-clamped"),
        pytest.param(True, False, None, 0.1, 60.0, None, id="standby-behind-no-commit-yet"),
        pytest.param(True, None, 7.0, None, 60.0, 7.0, id="archive-recovery-dated-by-commit"),
        pytest.param(True, None, None, None, 60.0, None, id="archive-recovery-no-commit"),
    ],
)
def test_the_lag_rule_handles_every_null_combination(
    in_recovery: bool,
    replayed_all_received: bool | None,
    replay_age: float | None,
    heard: float | None,
    timeout: float | None,
    lag: float | None,
) -> None:
    assert _lag_seconds(in_recovery, replayed_all_received, replay_age, heard, timeout) == lag
