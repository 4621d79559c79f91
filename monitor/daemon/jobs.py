"""The threads that turn the daemon: two loops of their own for the turns whose moment is
known or signalled (the timetable's tick, when its next slot starts; the alerts turn, when a
run stored events), an APScheduler background scheduler with one job per other recurring
turn (the fleet's heartbeat, the check of the alert path, reminders, the daily summary,
pruning), and a stop that is bounded where APScheduler's own wait is not.

A shell: it only calls the turns it is given, on the wall clock (APScheduler's own time).
What each turn does lives with its owner (daemon, scheduling, alerts).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from apscheduler.executors.pool import ThreadPoolExecutor as JobExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from monitor.store.claims import CLAIMS_PRUNED_EVERY

log = logging.getLogger("invmon.daemon")

TICK = timedelta(seconds=1)  # the longest a loop waits between two turns
# The shortest wait between two ticks. A slot starts at most this late past its moment (on a
# grid of one second, up to a second late), and the tick's own store read (the quarantine
# list, when something is due) comes at most ten times a second however many slots are due.
SHORTEST_TICK = timedelta(milliseconds=100)


@dataclass(frozen=True)
class Turns:
    """What the jobs call, and how often where it is not every second."""

    tick: Callable[[], object]  # the timetable: start what is due
    tick_in: Callable[[], float]  # seconds until the timetable's next start
    tick_woken: threading.Event  # set when the timetable changed (a reload)
    beat: Callable[[], object]  # the fleet's heartbeat, every `beat_every`
    beat_every: timedelta
    deliver: Callable[[], object]  # the alerts turn
    deliver_in: Callable[[], float]  # seconds until a held batch goes (alerts/pump.py)
    deliver_woken: threading.Event  # set when a run stored events (alerts/pump.py)
    delivery_path: Callable[[], object]  # can alerts reach anyone (DeliveryHealth.tick)
    remind: Callable[[], object]  # every minute
    prune: Callable[[], object]  # every six hours, and at start
    prune_claims: Callable[[], object]  # every CLAIMS_PRUNED_EVERY, and at start
    summarise: Callable[[], object]
    daily_summary: str | None  # "HH:MM" UTC, or no summary


class Loop:
    """One turn after another on a thread of its own: after each turn it waits as long as
    `next_in` says (between `shortest` and `every` seconds), or less when `woken` is set.
    An APScheduler interval job comes only once a period, and a job that is due again while
    it still runs is skipped (max_instances), where a woken loop just turns again."""

    def __init__(
        self,
        name: str,
        turn: Callable[[], object],
        next_in: Callable[[], float],
        woken: threading.Event,
        every: timedelta = TICK,
        shortest: timedelta = timedelta(0),
    ) -> None:
        self.name = name
        self.turn = turn
        self.next_in = next_in
        self.woken = woken
        self.every = every.total_seconds()
        self.shortest = shortest.total_seconds()
        self._halted = threading.Event()  # no turn starts once set
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def running(self) -> bool:
        """Turning, or halted on purpose; False when its thread ended on its own."""
        return self._thread.is_alive() or self._halted.is_set()

    def start(self) -> None:
        self._thread.start()

    def halt(self) -> None:
        """No new turn from now on; a turn under way goes on."""
        self._halted.set()
        self.woken.set()

    def join(self, seconds: float) -> bool:
        """Whether the turn under way (if any) ended within `seconds`."""
        if self._thread.is_alive():
            self._thread.join(max(0.0, seconds))
        return not self._thread.is_alive()

    def _run(self) -> None:
        while not self._halted.is_set():
            # Cleared before the turn: a wake during it brings the next turn at once.
            self.woken.clear()
            try:
                self.turn()
            except Exception:  # as APScheduler does with a job: said, and turned again
                log.exception("the %s turn failed", self.name)
            self.woken.wait(self._wait())

    def _wait(self) -> float:
        try:
            wanted = float(self.next_in())
        except Exception:
            log.exception("the %s loop could not tell when its next turn is", self.name)
            wanted = self.every
        return min(self.every, max(self.shortest, wanted))


class Jobs:
    """The loops and the background scheduler, once started; `running` is what /healthz
    reads."""

    def __init__(self) -> None:
        self._scheduler: BackgroundScheduler | None = None
        self._loops: list[Loop] = []

    def next_turns(self) -> dict[str, datetime | None]:
        """When each of the scheduler's jobs turns next, by job; None for one paused (all of
        them after `pause`). Empty before `start`."""
        scheduler = self._scheduler
        if scheduler is None:
            return {}
        return {job.id: job.next_run_time for job in scheduler.get_jobs()}

    @property
    def running(self) -> bool:
        return (
            self._scheduler is not None
            and bool(self._scheduler.running)
            and all(loop.running for loop in self._loops)
        )

    def start(self, turns: Turns) -> None:
        scheduler = BackgroundScheduler(
            timezone=UTC,
            # The fleet, the alerts' other turns and housekeeping each have a thread (and the
            # tick and the alerts turn a loop each, below), so a slow Slack never delays an
            # evaluation and the heartbeat ticks even when every worker is busy.
            executors={
                "fleet": JobExecutor(1),
                "alerts": JobExecutor(1),
                "housekeeping": JobExecutor(1),
            },
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )
        now = datetime.now(UTC)  # APScheduler's own time: it runs on the wall clock
        every_second = IntervalTrigger(seconds=TICK.total_seconds())

        def add(
            turn: Callable[[], object], trigger: object, job: str, executor: str, at_once: bool
        ) -> None:
            """`at_once`: the first turn now, at start-up, not one period later."""
            # Otherwise the trigger says when: APScheduler 3 reads next_run_time=None as a
            # paused job, and that left the reminders and the daily summary never run.
            first = {"next_run_time": now} if at_once else {}
            scheduler.add_job(turn, trigger, id=job, executor=executor, **first)

        beat_every = IntervalTrigger(seconds=turns.beat_every.total_seconds())
        add(turns.beat, beat_every, "beat", "fleet", at_once=True)
        add(turns.delivery_path, every_second, "delivery_path", "alerts", at_once=True)
        add(turns.remind, IntervalTrigger(minutes=1), "remind", "alerts", at_once=False)
        if turns.daily_summary:
            hour, minute = turns.daily_summary.split(":")
            summary = CronTrigger(hour=int(hour), minute=int(minute), timezone=UTC)
            add(turns.summarise, summary, "summary", "alerts", at_once=False)
        add(turns.prune, IntervalTrigger(hours=6), "prune", "housekeeping", at_once=True)
        claims_every = IntervalTrigger(seconds=CLAIMS_PRUNED_EVERY.total_seconds())
        add(turns.prune_claims, claims_every, "prune_claims", "housekeeping", at_once=True)
        scheduler.start()
        self._scheduler = scheduler
        # The tick comes when the timetable's next slot starts, and the alerts turn when a
        # run stored events (or a held batch is due to go), rather than at the next second
        # of a grid; each at least once a second still.
        self._loops = [
            Loop("invmon-tick", turns.tick, turns.tick_in, turns.tick_woken, TICK, SHORTEST_TICK),
            Loop("invmon-alerts", turns.deliver, turns.deliver_in, turns.deliver_woken, TICK),
        ]
        for loop in self._loops:
            loop.start()

    def pause(self) -> None:
        """No new job from now on; the ones under way go on (a stop, or a test's hook)."""
        for loop in self._loops:
            loop.halt()
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.pause()

    def stop(self, seconds: float) -> bool:
        """Shut the scheduler down, waiting at most `seconds` for a job under way (a tick,
        an alerts turn inside a Slack call): APScheduler's own wait has no bound. False when
        a scheduler job was left running: its worker thread would then hold the
        interpreter's exit (concurrent.futures joins its workers), so the process must end
        without that join (running.end_process)."""
        deadline = time.monotonic() + seconds
        for loop in self._loops:
            loop.halt()
        for loop in self._loops:
            if not loop.join(deadline - time.monotonic()):
                log.warning("the %s turn was still running into the stop; leaving it", loop.name)
        scheduler = self._scheduler
        if scheduler is None or not scheduler.running:
            return True
        done = threading.Thread(
            target=scheduler.shutdown, kwargs={"wait": True}, name="invmon-stop", daemon=True
        )
        done.start()
        done.join(max(0.0, deadline - time.monotonic()))
        if done.is_alive():
            log.warning(
                "a scheduler job was still running %.0fs into the stop; leaving it", seconds
            )
            return False
        return True
