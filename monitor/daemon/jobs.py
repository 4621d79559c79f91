"""The threads that turn the daemon: an APScheduler background scheduler with one job per
recurring turn (the timetable's tick, the fleet's heartbeat, alerts, reminders, the daily
summary, pruning), and a stop that is bounded where APScheduler's own wait is not.

A shell: it only calls the turns it is given, on the wall clock (APScheduler's own time).
What each turn does lives with its owner (daemon, scheduling, alerts).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from apscheduler.executors.pool import ThreadPoolExecutor as JobExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from monitor.store.claims import CLAIMS_PRUNED_EVERY

log = logging.getLogger("invmon.daemon")

TICK = timedelta(seconds=1)


@dataclass(frozen=True)
class Turns:
    """What the jobs call, and how often where it is not every second."""

    tick: Callable[[], object]  # the timetable: start what is due
    beat: Callable[[], object]  # the fleet's heartbeat, every `beat_every`
    beat_every: timedelta
    deliver: Callable[[], object]  # the alerts turn
    delivery_path: Callable[[], object]  # can alerts reach anyone (DeliveryHealth.tick)
    remind: Callable[[], object]  # every minute
    prune: Callable[[], object]  # every six hours, and at start
    prune_claims: Callable[[], object]  # every CLAIMS_PRUNED_EVERY, and at start
    summarise: Callable[[], object]
    daily_summary: str | None  # "HH:MM" UTC, or no summary


class Jobs:
    """The background scheduler, once started; `running` is what /healthz reads."""

    def __init__(self) -> None:
        self._scheduler: BackgroundScheduler | None = None

    @property
    def running(self) -> bool:
        return self._scheduler is not None and bool(self._scheduler.running)

    def start(self, turns: Turns) -> None:
        scheduler = BackgroundScheduler(
            timezone=UTC,
            # Ticking, delivering and housekeeping each have a thread, so a slow Slack never
            # delays an evaluation and the heartbeat ticks even when every worker is busy.
            executors={
                "ticks": JobExecutor(1),
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
            first = now if at_once else None
            scheduler.add_job(turn, trigger, id=job, next_run_time=first, executor=executor)

        beat_every = IntervalTrigger(seconds=turns.beat_every.total_seconds())
        add(turns.tick, every_second, "tick", "ticks", at_once=True)
        add(turns.beat, beat_every, "beat", "fleet", at_once=True)
        add(turns.deliver, every_second, "deliver", "alerts", at_once=True)
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

    def pause(self) -> None:
        """No new job from now on; the ones under way go on (a stop, or a test's hook)."""
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.pause()

    def stop(self, seconds: float) -> None:
        """Shut the scheduler down, waiting at most `seconds` for a job under way (a tick,
        an alerts turn inside a Slack call): APScheduler's own wait has no bound."""
        scheduler = self._scheduler
        if scheduler is None or not scheduler.running:
            return
        done = threading.Thread(
            target=scheduler.shutdown, kwargs={"wait": True}, name="invmon-stop", daemon=True
        )
        done.start()
        done.join(seconds)
        if done.is_alive():
            log.warning(
                "a scheduler job was still running %.0fs into the stop; leaving it", seconds
            )
