"""The loops that turn the alerts (and the tick): a turn when woken, not a period later, and
a halt that lets the turn under way end and starts no other."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

from helpers import wait_for

from monitor.daemon.jobs import Jobs, Loop, Turns

HOUR = timedelta(hours=1)


def test_a_woken_loop_turns_again_at_once_not_a_period_later() -> None:
    turns: list[int] = []
    woken = threading.Event()
    # Its period is an hour: only the wake can bring the second turn within the deadline.
    loop = Loop("test-loop", lambda: turns.append(len(turns)), lambda: 3600.0, woken, HOUR)
    loop.start()
    wait_for(lambda: turns == [0], 10, "the first turn, at start")
    woken.set()
    wait_for(lambda: turns == [0, 1], 10, "a turn when woken")
    loop.halt()
    assert loop.join(10)
    assert turns == [0, 1]
    assert loop.running  # halted on purpose: not a loop that died


def test_a_turn_that_fails_is_said_and_the_loop_turns_again() -> None:
    turns: list[int] = []
    woken = threading.Event()

    def turn() -> None:
        turns.append(len(turns))
        if len(turns) == 1:
            raise RuntimeError("the first turn fails")

    loop = Loop("test-loop", turn, lambda: 3600.0, woken, HOUR)
    loop.start()
    wait_for(lambda: turns == [0], 10, "the failing turn")
    woken.set()
    wait_for(lambda: turns == [0, 1], 10, "the next turn")
    loop.halt()
    assert loop.join(10)


def test_a_halt_lets_the_turn_under_way_end_and_starts_no_other() -> None:
    inside = threading.Event()
    release = threading.Event()
    turns: list[int] = []
    woken = threading.Event()

    def turn() -> None:
        turns.append(len(turns))
        inside.set()
        release.wait(10)

    loop = Loop("test-loop", turn, lambda: 0.0, woken, HOUR)
    loop.start()
    assert inside.wait(10)
    loop.halt()
    assert not loop.join(0)  # the turn is still under way
    release.set()
    assert loop.join(10)
    assert turns == [0]


LEFT_JOB = """
import sys, threading, time
from datetime import UTC, datetime, timedelta
from monitor.cli.running import end_process
from monitor.daemon.jobs import Jobs, Turns

entered = threading.Event()
def prune():
    entered.set()
    time.sleep(120)  # a job that ignores the stop: a prune on a stalled store

nothing = lambda: None
turns = Turns(
    tick=nothing, tick_in=lambda: 3600.0, tick_woken=threading.Event(), beat=nothing,
    beat_every=timedelta(hours=1), deliver=nothing, deliver_in=lambda: 3600.0,
    deliver_woken=threading.Event(), delivery_path=nothing, remind=nothing, prune=prune,
    prune_claims=nothing, summarise=nothing, daily_summary=None,
)
jobs = Jobs()
jobs.start(turns)
assert entered.wait(30), "the prune never started"
jobs.pause()
ended = jobs.stop(0.5)
print("ended" if ended else "left", flush=True)
end_process(0, threads_left=not ended)
"""


def test_a_job_the_stop_left_running_does_not_hold_the_process_s_exit() -> None:
    """concurrent.futures joins its workers at the interpreter's exit, with no bound: a
    prune the stop gave up on ('leaving it') kept the process alive until it ended."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", LEFT_JOB], capture_output=True, text=True, timeout=100
    )
    took = time.monotonic() - started
    assert (done.returncode, done.stdout.strip()) == (0, "left"), done.stderr
    assert took < 100  # the job sleeps 120 s; before, the exit waited for it


def test_every_job_is_scheduled_the_reminders_and_the_summary_included() -> None:
    """APScheduler 3 reads next_run_time=None as a paused job: the reminders and the daily
    summary, the jobs not run at start-up, were added paused and never ran."""
    nothing = lambda: None  # noqa: E731
    turns = Turns(
        tick=nothing,
        tick_in=lambda: 3600.0,
        tick_woken=threading.Event(),
        beat=nothing,
        beat_every=timedelta(hours=1),
        deliver=nothing,
        deliver_in=lambda: 3600.0,
        deliver_woken=threading.Event(),
        delivery_path=nothing,
        remind=nothing,
        prune=nothing,
        prune_claims=nothing,
        summarise=nothing,
        daily_summary="09:00",
    )
    jobs = Jobs()
    started = datetime.now(UTC)
    jobs.start(turns)
    try:
        turns_at = jobs.next_turns()
    finally:
        jobs.pause()
        assert jobs.stop(10)
    assert sorted(turns_at) == [
        "beat",
        "delivery_path",
        "prune",
        "prune_claims",
        "remind",
        "summary",
    ]
    remind, summary = turns_at["remind"], turns_at["summary"]
    assert remind is not None and started < remind <= started + timedelta(minutes=1, seconds=1)
    assert summary is not None and (summary.hour, summary.minute) == (9, 0)
    assert started < summary <= started + timedelta(days=1)
    assert all(at is not None for at in turns_at.values())
