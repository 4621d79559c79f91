"""Replica lag on a real streaming standby when the primary is idle, under write load, and when
the primary goes away: lag is 0 while a live link has delivered everything, however long the
primary stays silent; it is the age of the last replayed commit once something is outstanding
or the link is gone, and a gone link is noticed within a bound.

An idle primary sends nothing until the standby's WAL receiver pings it, after
wal_receiver_timeout / 2 of silence (30 s by default): the time since the standby last heard
from it ages that far with nothing behind, which the old rule ("lag = time since last heard")
reported as lag."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from helpers import wait_for

from monitor.execution.replica import ReplicaStatus, is_stale, read_replica_status

if TYPE_CHECKING:
    from standby import StandbyPair

MAX_LAG = timedelta(seconds=2)
# What the standby reports beside the status: how long since it last heard from the primary
# while streaming, and the age of its last replayed commit.
SILENCE_SQL = """
SELECT (SELECT extract(epoch FROM statement_timestamp() - last_msg_receipt_time)::float8
          FROM pg_stat_wal_receiver WHERE status = 'streaming'),
       extract(epoch FROM statement_timestamp() - pg_last_xact_replay_timestamp())::float8
"""


def status_of(conn: psycopg.Connection[Any]) -> ReplicaStatus:
    """read_replica_status inside a READ ONLY transaction, as the runner calls it."""
    conn.read_only = True
    try:
        return read_replica_status(conn)
    finally:
        conn.rollback()


def silence(conn: psycopg.Connection[Any]) -> tuple[float | None, float | None]:
    row = conn.execute(SILENCE_SQL).fetchone()
    conn.rollback()
    assert row is not None
    return row[0], row[1]


def commit_on_primary(pair: StandbyPair) -> None:
    with pair.primary() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS heartbeat (at timestamptz NOT NULL)")
        conn.execute("INSERT INTO heartbeat VALUES (now())")


@pytest.fixture
def standby(standby_pair: StandbyPair) -> Iterator[psycopg.Connection[Any]]:
    """A session on the standby, the pair caught up and streaming first."""
    standby_pair.wait_streaming()
    commit_on_primary(standby_pair)
    standby_pair.wait_caught_up()
    with psycopg.connect(standby_pair.standby_dsn) as conn:
        yield conn


def test_a_standby_of_a_silent_idle_primary_has_lag_zero(
    standby_pair: StandbyPair, standby: psycopg.Connection[Any]
) -> None:
    """Nothing written and nothing heard for longer than max_replica_lag: still caught up.
    The old rule read the silence itself as lag, so this standby went stale."""

    def silent_past_max_lag() -> tuple[float, float] | None:
        heard, replay_age = silence(standby)
        if heard is None or replay_age is None:
            return None
        return (heard, replay_age) if heard > 1.5 * MAX_LAG.total_seconds() else None

    # The receiver pings the idle primary after wal_receiver_timeout / 2 (30 s) of silence,
    # so the silence reaches 3 s within seconds of the commit, or of the last ping.
    wait_for(silent_past_max_lag, 40, "the primary to be silent for 3 s")
    status = status_of(standby)
    heard, replay_age = silence(standby)
    assert heard is not None and heard > MAX_LAG.total_seconds()  # still silent after reading
    assert replay_age is not None and replay_age > MAX_LAG.total_seconds()
    assert status == ReplicaStatus(in_recovery=True, lag_seconds=0.0)
    assert is_stale(status, MAX_LAG) is False


def test_under_write_load_lag_is_small_and_grows_when_replay_falls_behind(
    standby_pair: StandbyPair, standby: psycopg.Connection[Any]
) -> None:
    """A commit every 10 ms: every reading is small; with replay paused under the same load
    the lag grows past max_replica_lag (not 0 while behind) and falls back when resumed."""
    stop = threading.Event()
    commits = 0

    def write() -> None:
        nonlocal commits
        with standby_pair.primary() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS load (n int NOT NULL)")
            while not stop.wait(0.01):
                conn.execute("INSERT INTO load VALUES (1)")
                commits += 1

    writer = threading.Thread(target=write, name="write-load")
    writer.start()
    try:
        wait_for(lambda: commits >= 10, 10, "the write load to start")
        readings = []
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            readings.append(status_of(standby).lag_seconds)
        assert None not in readings
        assert max(r for r in readings if r is not None) < 1.0, readings

        standby_pair.pause_replay()
        try:

            def behind() -> float | None:
                lag = status_of(standby).lag_seconds
                assert lag is not None  # a commit was replayed: always measurable
                return lag if lag > MAX_LAG.total_seconds() else None

            assert wait_for(behind, 10, "the lag to exceed max_replica_lag") > 2.0
        finally:
            standby_pair.resume_replay()

        def recovered() -> bool:
            lag = status_of(standby).lag_seconds
            return lag is not None and lag < 1.0

        wait_for(recovered, 10, "the lag to fall back under load once replay resumed")
    finally:
        stop.set()
        writer.join()
    assert commits > 100


def test_a_stopped_primary_makes_the_standby_stale_at_once(
    standby_pair: StandbyPair, standby: psycopg.Connection[Any]
) -> None:
    """A primary that shuts down closes the link: the receiver stops streaming at once and the
    lag is the age of the last replayed commit, here already past max_replica_lag."""

    def old_commit() -> bool:
        _, replay_age = silence(standby)
        return replay_age is not None and replay_age > 1.5 * MAX_LAG.total_seconds()

    wait_for(old_commit, 10, "the last replayed commit to be 3 s old")
    assert status_of(standby).lag_seconds == 0.0
    standby_pair.stop_primary()
    try:
        stopped = time.monotonic()

        def stale() -> ReplicaStatus | None:
            status = status_of(standby)
            return status if is_stale(status, MAX_LAG) else None

        status = wait_for(stale, 5, "the standby of a stopped primary to read stale")
        took = time.monotonic() - stopped
        assert status.lag_seconds is not None and status.lag_seconds > 3.0
        assert took < 5.0
    finally:
        standby_pair.start_primary()
    standby_pair.wait_streaming()
    standby_pair.wait_caught_up()
    assert status_of(standby).lag_seconds == 0.0


def test_a_silent_link_is_trusted_no_longer_than_wal_receiver_timeout(
    standby_pair: StandbyPair, standby: psycopg.Connection[Any]
) -> None:
    """A hung primary (its processes stopped, the connection left open) sends nothing, like
    an idle one; past the standby's wal_receiver_timeout (3 s here) the link is not vouched
    for and the standby reads stale (its last commit is older than the silence)."""
    standby_pair.configure("standby", "wal_receiver_timeout", "3s")
    try:
        standby_pair.wait_streaming()
        commit_on_primary(standby_pair)
        standby_pair.wait_caught_up()
        with standby_pair.primary_frozen():
            frozen = time.monotonic()

            def stale() -> ReplicaStatus | None:
                status = status_of(standby)
                return status if is_stale(status, MAX_LAG) else None

            status = wait_for(stale, 10, "the standby of a hung primary to read stale")
            took = time.monotonic() - frozen
            # The receiver last heard at most timeout / 2 before the freeze (its ping), so the
            # link is given up between 1.5 and 3 s after it, plus the time to notice.
            assert status.lag_seconds is not None and status.lag_seconds > 3.0
            assert 1.0 < took < 5.0, took
    finally:
        standby_pair.configure("standby", "wal_receiver_timeout", "1min")
    standby_pair.wait_streaming()
    standby_pair.wait_caught_up()


def test_with_wal_receiver_timeout_off_a_caught_up_standby_is_dated_by_its_last_commit(
    standby_pair: StandbyPair, standby: psycopg.Connection[Any]
) -> None:
    """Nothing then bounds how long a dead link could pass for a quiet one: no vouching."""
    standby_pair.configure("standby", "wal_receiver_timeout", "0")
    try:
        standby_pair.wait_streaming()
        commit_on_primary(standby_pair)
        standby_pair.wait_caught_up()
        assert status_of(standby).lag_seconds == pytest.approx(silence(standby)[1], abs=0.5)

        def stale() -> ReplicaStatus | None:
            status = status_of(standby)
            return status if is_stale(status, MAX_LAG) else None

        status = wait_for(stale, 10, "an idle standby without a receiver timeout to read stale")
        assert status.lag_seconds is not None and status.lag_seconds > 2.0
    finally:
        standby_pair.configure("standby", "wal_receiver_timeout", "1min")


def test_a_role_that_cannot_see_the_wal_receiver_is_dated_by_the_last_commit(
    standby_pair: StandbyPair, standby: psycopg.Connection[Any]
) -> None:
    """Without pg_read_all_stats the receiver's columns are NULL: no vouching for the link,
    and no error either (current_setting() is readable by any role)."""
    role = "lag_reader_without_stats"
    with standby_pair.primary() as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role} LOGIN")
    standby_pair.wait_caught_up()
    try:
        with psycopg.connect(standby_pair.standby_dsn, user=role) as limited:
            status = status_of(limited)
            _, replay_age = silence(standby)
            assert status.in_recovery is True
            assert status.lag_seconds is not None and replay_age is not None
            assert status.lag_seconds == pytest.approx(replay_age, abs=0.5)
            assert status.lag_seconds > 0.0
    finally:
        with standby_pair.primary() as conn:
            conn.execute(f"DROP ROLE {role}")


@pytest.mark.soak
def test_a_long_idle_primary_never_makes_the_standby_flap(
    standby_pair: StandbyPair, standby: psycopg.Connection[Any]
) -> None:
    """45 s without a write, a reading a second: lag 0 every time, while the silence the old
    rule reported as lag reached past 20 s (the receiver pings after 30 s)."""
    lags: list[float | None] = []
    silences: list[float] = []
    deadline = time.monotonic() + 45
    next_reading = time.monotonic()
    while time.monotonic() < deadline:
        lags.append(status_of(standby).lag_seconds)
        heard, _ = silence(standby)
        assert heard is not None  # streaming throughout
        silences.append(heard)
        next_reading += 1.0
        # Paced to the wall clock: a reading a second is what is measured, not a wait for an
        # event, so this is the one place a timed pause is the point.
        time.sleep(max(0.0, next_reading - time.monotonic()))
    assert len(lags) >= 40
    assert set(lags) == {0.0}
    assert max(silences) > 20.0
