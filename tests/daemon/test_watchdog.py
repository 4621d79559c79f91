"""invmon watches itself: a stalled schedule, a stuck run, alerts that do not go out, and a
dead man's switch outside it; each said like any other invariant."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from builders import build_daemon, daemon_config, slack_to
from fake_slack import FakeSlack
from fake_switch import Pings
from helpers import items_table, sql, wait_for
from scenario import World

from monitor.config import WatchdogConfig
from monitor.daemon.self_checks import Loaded, stalled, stuck
from monitor.durations import parse_schedule
from monitor.store.state import StateStore

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
EVERY_15M = {"refunds": Loaded(parse_schedule("every 15m"), timedelta(seconds=30))}


def test_an_invariant_is_stalled_after_two_intervals_and_its_timeout_without_a_run() -> None:
    last = {"refunds": T0}
    jitter = timedelta(seconds=10)
    on_time = T0 + timedelta(minutes=30, seconds=30)
    had = {"refunds": T0}
    assert stalled(EVERY_15M, last, had, on_time, jitter) == []
    late = T0 + timedelta(minutes=30, seconds=41)
    assert stalled(EVERY_15M, last, had, late, jitter) == [
        {
            "invariant": "refunds",
            "last_run": "2026-11-30T12:00:00.000000Z",
            "expected_every": "15m",
            "why": "no run recorded for over two intervals",
        }
    ]
    # Never run: counted from when the daemon had it (its start, or the reload adding it).
    assert [r["invariant"] for r in stalled(EVERY_15M, {}, had, late, jitter)] == ["refunds"]
    added = {"refunds": T0 + timedelta(minutes=20)}
    assert stalled(EVERY_15M, {}, added, late, jitter) == []


def test_a_last_run_ahead_of_the_clock_is_a_stall_a_step_back_would_hide() -> None:
    """From a liveness review: the wall clock stepped back 30 minutes (an NTP step); every
    slot until then counted as run, nothing ran, and `schedule_stalled` said ok, since
    "now - last run" was negative. A minute of skew between a fleet's daemons is none."""
    jitter = timedelta(seconds=10)
    had = {"refunds": T0 - timedelta(hours=1)}
    skewed = {"refunds": T0 + timedelta(seconds=59)}
    assert stalled(EVERY_15M, skewed, had, T0, jitter) == []
    # Recorded while the store was read slowly (or the process paused): not ahead of the
    # clock when the read ended.
    slow_read = {"refunds": T0 + timedelta(seconds=90)}
    assert stalled(EVERY_15M, slow_read, had, T0, jitter, T0 + timedelta(seconds=95)) == []
    stepped = {"refunds": T0 + timedelta(minutes=30)}
    assert stalled(EVERY_15M, stepped, had, T0, jitter) == [
        {
            "invariant": "refunds",
            "last_run": "2026-11-30T12:30:00.000000Z",
            "expected_every": "15m",
            "why": "its last run is recorded 30m ahead of this daemon's clock: the wall clock "
            "stepped back, and its slots until then count as run",
        }
    ]


def test_a_run_is_stuck_a_minute_past_its_timeout() -> None:
    started = {"refunds": T0}
    assert stuck(started, EVERY_15M, T0 + timedelta(seconds=90)) == []
    assert stuck(started, EVERY_15M, T0 + timedelta(seconds=91)) == [
        {"invariant": "refunds", "started_at": "2026-11-30T12:00:00.000000Z"}
    ]


def test_alerts_that_do_not_reach_slack_open_a_self_incident(world: World) -> None:
    with FakeSlack(clock=world.clock) as fake:
        fake.fault_rate = 1.0  # every call fails: nothing reaches the channel
        daemon = world.daemon(fake)
        world.clock.advance(60)
        daemon.evaluate("bad_items")  # items 1..6 start fine: ok run
        sql(world.dsn, "UPDATE items SET bad = id = 1")
        world.clock.advance(60)
        daemon.evaluate("bad_items")
        for _ in range(5):
            daemon.deliver()
            world.clock.advance(30)
        world.clock.advance(11 * 60)
        results = {r.invariant: r for r in daemon.watchdog.check(world.clock())}
        daemon.databases.close()
    assert results["invmon-self/incidents_without_root"].count == 1
    pending = results["invmon-self/deliveries_pending"].count or 0
    unknown = results["invmon-self/deliveries_unknown"].count or 0
    assert pending + unknown >= 1
    # bad_items runs every 15m and last ran 13.5 minutes ago: not stalled.
    assert results["invmon-self/schedule_stalled"].count == 0
    opened = {i.invariant for i in world.store.open_incidents()}
    assert "invmon-self/incidents_without_root" in opened


def test_a_stopped_scheduler_is_said_in_slack_and_to_the_dead_mans_switch(
    database: str, tmp_path: Path, pings: Pings
) -> None:
    items_table(database, bad=(1,))
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "bad_items.sql").write_text(
        "-- description: No item is bad.\n-- schedule: every 1s\n-- timeout: 1s\n"
        "-- key: [id]\nSELECT id FROM items WHERE bad\n"
    )
    store = StateStore.open(path=tmp_path / "state.db")
    with FakeSlack() as fake:
        config = daemon_config(
            folder,
            watchdog=WatchdogConfig(interval=timedelta(seconds=1), ping_url=pings.url),
            slack=slack_to(fake),
        )
        daemon = build_daemon(config, database, store, call_timeout=2)
        daemon.start()
        try:
            wait_for(lambda: store.last_recorded().get("bad_items"), 20, "the first run")
            wait_for(lambda: "/ping/abc-123" in pings.paths, 20, "a healthy ping")
            assert daemon.jobs is not None
            daemon.jobs.pause()  # the test hook: the scheduler stops, the daemon lives
            stalled_at = datetime.now(UTC)
            wait_for(
                lambda: any("invmon-self/schedule_stalled" in m.text for m in fake.roots()),
                30,
                "the stalled schedule in Slack",
            )
            took = datetime.now(UTC) - stalled_at
            wait_for(lambda: "/ping/abc-123/fail" in pings.paths, 20, "a failing ping")
        finally:
            daemon.shutdown()
            store.close()
    assert pings.paths[0] == "/ping/abc-123/start"
    # Two intervals (2s) + the timeout (1s) + jitter, then at most a watchdog turn (1s)
    # and a delivery: well within two intervals of the watchdog past the stall.
    assert took < timedelta(seconds=15), took
    print(f"stalled schedule in Slack {took.total_seconds():.1f}s after the scheduler stopped")
    [incident] = [
        i
        for i in StateStore.open(path=tmp_path / "state.db").open_incidents()
        if i.invariant == "invmon-self/schedule_stalled"
    ]
    assert incident.context is not None and incident.context.severity == "critical"


def test_a_file_a_reload_adds_is_not_stalled_before_it_had_two_intervals(world: World) -> None:
    """A daemon up six minutes, a SIGHUP adding an `every 1m` file: nine seconds later the
    critical schedule_stalled alert opened naming it, counted from the daemon's start."""
    stalled_name = "invmon-self/schedule_stalled"
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        daemon.watchdog.check(world.clock())  # the first turn: what it started with
        world.clock.advance(6 * 60)
        (world.folder / "late.sql").write_text(
            "-- description: late holds\n-- schedule: every 1m\nSELECT 1 AS id WHERE false\n"
        )
        daemon.reload()
        world.clock.advance(9)
        soon = {r.invariant: r for r in daemon.watchdog.check(world.clock())}
        world.clock.advance(2 * 60 + 30 + 7)  # two intervals, its timeout, its jitter, past
        later = {r.invariant: r for r in daemon.watchdog.check(world.clock())}
        daemon.databases.close()
    assert (soon[stalled_name].status, soon[stalled_name].count) == ("ok", 0)
    assert later[stalled_name].count == 1
    assert [r["invariant"] for r in later[stalled_name].rows] == ["late"]


def test_a_pause_or_a_store_outage_starts_every_stall_window_again(world: World) -> None:
    """No run is recorded while the process is stopped or the store fails, through no
    fault of the schedule: a reviewer's 25 s SIGSTOP, and a store back from an outage, each
    opened a critical schedule_stalled naming invariants that ran in that same second."""
    stalled_name = "invmon-self/schedule_stalled"
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        daemon.watchdog.check(world.clock())
        past_window = 2 * 15 * 60 + 30 + 11  # two intervals, the timeout and the jitter
        world.clock.advance(past_window)
        with daemon.store_health.guard("recording a run of bad_items"):
            raise sqlite3.OperationalError("database is locked")  # the store failed
        after_outage = {r.invariant: r for r in daemon.watchdog.check(world.clock())}
        daemon.liveness.shift(25)  # the supervisor found a pause
        world.clock.advance(past_window)
        after_pause = {r.invariant: r for r in daemon.watchdog.check(world.clock())}
        world.clock.advance(past_window)  # a whole window since, and no run
        # A heartbeat failing now and then keeps no run from being recorded: a reviewer's
        # store, failing every other heartbeat, hid a real stall for good.
        with daemon.store_health.guard("renewing this daemon's claims"):
            raise sqlite3.OperationalError("database is locked")
        later = {r.invariant: r for r in daemon.watchdog.check(world.clock())}
        daemon.databases.close()
    assert after_outage[stalled_name].count == 0
    assert after_pause[stalled_name].count == 0
    assert later[stalled_name].count == 1


def test_the_failed_deliveries_check_does_not_count_its_own_failures(world: World) -> None:
    """With a channel that does not exist, each turn of the watchdog found its own reply
    failed (its root had) as a new offending row, planned another reply that failed in
    turn: FAILED deliveries grew by two every turn, for good."""
    name = "invmon-self/deliveries_failed"
    counts, failed = [], []
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake, channel="#nonexistent")
        sql(world.dsn, "UPDATE items SET bad = id = 1")
        daemon.evaluate("bad_items")  # its root cannot be posted: FAILED, for good
        for _ in range(6):
            for _ in range(3):
                daemon.deliver()
                world.clock.advance(5)
            results = {r.invariant: r for r in daemon.watchdog.check(world.clock())}
            counts.append(results[name].count)
            with world.store.storage.transaction() as tx:
                [(n,)] = tx.rows("SELECT count(*) FROM deliveries WHERE state = 'FAILED'")
            failed.append(n)
            world.clock.advance(10)
        daemon.databases.close()
    # bad_items' root and CSV; nothing of the self-check's own is counted.
    assert counts[2:] == [counts[2]] * 4, counts
    assert failed[2:] == [failed[2]] * 4, failed


def test_a_slack_call_held_in_a_reminder_turn_is_a_stall_healthz_says(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a liveness review: a Slack that trickled its answer to one call held the turn
    of reminders (and the daily summary, and the check of the alert path) for good, with
    /healthz at 200 and nothing logged. Each is bounded like the alerts turn now."""
    from monitor.daemon import daemon as daemon_module

    monkeypatch.setattr(daemon_module, "ALERTS_LIMIT", timedelta(milliseconds=200))
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        held = threading.Event()
        monkeypatch.setattr(type(daemon.housekeeping), "remind", lambda _self: held.wait(30))
        turn = threading.Thread(target=daemon.turns().remind)
        turn.start()
        try:
            wait_for(
                lambda: (daemon.liveness.problem() or "").startswith("the reminders"),
                10,
                "the held turn to be said",
            )
        finally:
            held.set()
            turn.join(10)
            daemon.databases.close()
        assert daemon.liveness.problem() is None
