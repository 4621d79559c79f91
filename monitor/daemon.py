"""`invmon run`: the long-lived process. It alone owns the scheduler, the signals, the HTTP
listener and the event dispatch; what to do with a run's result is decided in incidents.py
and stored by state.py.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor as BurstPool
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from psycopg_pool import PoolTimeout

from alerts.alerter import Alerter
from alerts.interactions import Interactions
from alerts.socket_mode import SocketModeReceiver
from alerts.transport import Transport
from monitor.config import Config
from monitor.durations import IntervalSchedule, Schedule
from monitor.header import InvariantHeader
from monitor.http import Listener, Probe, Routes
from monitor.loader import Invariant, LoadResult, load_directory, name_for
from monitor.metrics import Metrics
from monitor.problems import Problem
from monitor.process import SignalLoop
from monitor.records import StoredEvent
from monitor.replica import is_stale
from monitor.results import RunResult
from monitor.runner import Runner, describe_error
from monitor.state import REPLICA_SUBJECT, StateStore

log = logging.getLogger("invmon.daemon")

HEARTBEAT = timedelta(seconds=5)
DISPATCH_EVERY = timedelta(seconds=1)
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def trigger_for(schedule: Schedule, max_jitter: timedelta) -> BaseTrigger:
    """APScheduler trigger for a schedule; jitter is capped at a tenth of an interval."""
    if isinstance(schedule, IntervalSchedule):
        every = schedule.every.total_seconds()
        jitter = min(max_jitter.total_seconds(), every / 10)
        return IntervalTrigger(seconds=every, jitter=int(jitter) or None, timezone=UTC)
    trigger = CronTrigger.from_crontab(schedule.expression, timezone=UTC)
    first = trigger.get_next_fire_time(None, datetime.now(UTC))
    second = trigger.get_next_fire_time(first, first) if first else None
    period = (second - first).total_seconds() if first and second else 0
    trigger.jitter = int(min(max_jitter.total_seconds(), period / 10)) or None
    return trigger


@dataclasses.dataclass
class Reload:
    """What a (re)load changed, for logs and tests."""

    added: list[str] = dataclasses.field(default_factory=list)
    updated: list[str] = dataclasses.field(default_factory=list)
    removed: list[str] = dataclasses.field(default_factory=list)
    invalid: dict[str, list[Problem]] = dataclasses.field(default_factory=dict)
    kept_previous: list[str] = dataclasses.field(default_factory=list)


class Daemon:
    def __init__(
        self,
        config: Config,
        dsn: str,
        store: StateStore,
        clock: Clock = utc_now,
        transport: Transport | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.runner = Runner(
            dsn,
            config.concurrency,
            config.database,
            track_keys=config.daemon.track_keys,
            allow=config.fence.allowances(),
        )
        self.runner.open()
        self.metrics = Metrics(store.counts)
        self.invariants: dict[str, Invariant] = {}
        self.alerter = Alerter(store, config.slack, self.describe, clock, transport)
        self.interactions = Interactions(self.alerter, config.slack)
        self.socket_mode = (
            SocketModeReceiver(self.interactions, config.slack) if config.slack.app_token else None
        )
        self.scheduler = BackgroundScheduler(
            timezone=UTC,
            # Evaluations share `concurrency` workers; Slack delivery has one of its own so a
            # slow Slack never delays an evaluation and vice versa.
            executors={
                "default": ThreadPoolExecutor(config.concurrency),
                "alerts": ThreadPoolExecutor(1),
                # The heartbeat must tick even when every evaluation worker is busy.
                "housekeeping": ThreadPoolExecutor(1),
            },
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )
        self.listener: Listener | None = None
        self._definitions = threading.Lock()
        self._dispatching = threading.Lock()
        self._in_flight: set[str] = set()
        self._in_flight_changed = threading.Condition()
        self._heartbeat = time.monotonic()
        self._stop_requested = False
        self.signals = SignalLoop(self._reload_on_signal)

    # --- loading -------------------------------------------------------------------------

    def reload(self) -> Reload:
        """Load the invariants folder and bring the schedule in line with it.

        A file that fails validation is reported (log line and an `invalid_file` incident);
        if an earlier version of it was loaded, that version keeps running.
        """
        directory = self.config.invariants
        if self.invariants and (not directory.is_dir() or not any(directory.rglob("*.sql"))):
            # A deploy swapping the checkout, an unmounted volume: not a reason to stop
            # checking everything. Keep what runs and say so.
            log.error(
                "invariants folder %s is missing or empty; keeping the %d loaded invariants",
                directory,
                len(self.invariants),
            )
            return Reload(kept_previous=sorted(self.invariants))
        loaded = load_directory(
            directory, self.config.invariant_defaults(), self.config.policy(with_database=True)
        )
        invalid = self._names_of_problems(loaded)
        # The fence again, against the monitored database's own catalog: what lint could
        # not know (user-defined and extension functions, views) is decided here.
        refused = self.runner.vet(loaded.invariants)
        for name, problems in refused.items():
            invalid.setdefault(name, []).extend(problems)
        loaded.invariants = [i for i in loaded.invariants if i.name not in refused]
        return self._apply(loaded, invalid)

    def _names_of_problems(self, loaded: LoadResult) -> dict[str, list[Problem]]:
        by_name: dict[str, list[Problem]] = {}
        for problem in loaded.errors:
            try:
                name = name_for(problem.path, self.config.invariants)
            except ValueError:
                name = str(problem.path)
            by_name.setdefault(name, []).append(problem)
        return by_name

    def _apply(self, loaded: LoadResult, invalid: dict[str, list[Problem]]) -> Reload:
        change = Reload(invalid=invalid)
        now = self.clock()
        valid = {inv.name: inv for inv in loaded.invariants}
        with self._definitions:
            previous = dict(self.invariants)
            for name, inv in valid.items():
                old = previous.get(name)
                if old is None:
                    change.added.append(name)
                elif old != inv:
                    change.updated.append(name)
                self.invariants[name] = inv
            for name in previous:
                if name not in valid and name not in invalid:
                    change.removed.append(name)
                    del self.invariants[name]
                elif name in invalid:
                    change.kept_previous.append(name)
        for name, problems in invalid.items():
            for problem in problems:
                log.error(
                    "invalid invariant file: %s",
                    problem,
                    extra={"fields": {"invariant": name, "kept_previous": name in previous}},
                )
            detail = "\n".join(str(p) for p in problems)
            self.store.record_condition("invalid_file", name, True, now, detail)
        # Fixed or deleted files: every open invalid-file incident not reported again.
        for incident in self.store.open_incidents():
            if incident.kind == "invalid_file" and incident.invariant not in invalid:
                self.store.record_condition("invalid_file", incident.invariant, False, now)
        self.metrics.invalid_files.set(len(invalid))
        self._reschedule(change, previous)
        for name in change.removed:
            self.metrics.forget(name)
            self.store.retire(name, now)
        if change.added or change.updated or change.removed:
            log.info(
                "invariants loaded",
                extra={
                    "fields": {
                        "added": change.added,
                        "updated": change.updated,
                        "removed": change.removed,
                        "running": len(self.invariants),
                    }
                },
            )
        return change

    def _reschedule(self, change: Reload, previous: dict[str, Invariant]) -> None:
        if not self.scheduler.running:
            return
        for name in change.removed:
            if self.scheduler.get_job(name):
                self.scheduler.remove_job(name)
        for name in [*change.added, *change.updated]:
            inv = self.invariants[name]
            old = previous.get(name)
            if old is not None and old.schedule == inv.schedule:
                continue  # same schedule: the next run picks up the new definition
            self._schedule(inv, first_run=utc_now() if old is None else None)

    def _schedule(self, inv: Invariant, first_run: datetime | None) -> None:
        kwargs: dict[str, Any] = {}
        if first_run is not None:
            kwargs["next_run_time"] = first_run
        self.scheduler.add_job(
            self.evaluate,
            trigger_for(inv.schedule, self.config.daemon.jitter),
            args=[inv.name],
            id=inv.name,
            name=f"invariant {inv.name}",
            replace_existing=True,
            **kwargs,
        )

    # --- one evaluation ------------------------------------------------------------------

    def evaluate(self, name: str) -> RunResult | None:
        """Evaluate one invariant now, store the outcome, dispatch what it caused."""
        with self._definitions:
            inv = self.invariants.get(name)
        if inv is None or self._stop_requested or self.signals.stopping:
            return None
        with self._in_flight_changed:
            self._in_flight.add(name)
        try:
            result = self._run(inv)
            finished = self.clock()
            self.store.record_run(
                name,
                result,
                finished,
                inv.header.for_runs,
                self.config.daemon.cannot_evaluate_after,
            )
            self.metrics.observe(result, finished.timestamp())
            log.info(
                "evaluated %s: %s",
                name,
                result.status,
                extra={
                    "fields": {
                        "invariant": name,
                        "status": result.status,
                        "count": result.count,
                        "ms": round(result.duration_ms),
                        **({"error": result.error} if result.error else {}),
                    }
                },
            )
        finally:
            with self._in_flight_changed:
                self._in_flight.discard(name)
                self._in_flight_changed.notify_all()
        return result

    def _run(self, inv: Invariant) -> RunResult:
        started = self.clock()
        clock = time.monotonic()
        try:
            replica = self.runner.replica_status()
        except (psycopg.Error, PoolTimeout) as exc:
            reason = self.runner.probe() or describe_error(exc)
            return RunResult.failed(
                inv.name,
                f"cannot read replica status: {reason}",
                started_at=started,
                duration_ms=(time.monotonic() - clock) * 1000,
            )
        max_lag = self.config.daemon.max_replica_lag
        stale = is_stale(replica, max_lag)
        lag = replica.lag_seconds
        detail = (
            f"replica lag {'unknown' if lag is None else f'{lag:.0f}s'} exceeds "
            f"max_replica_lag {max_lag.total_seconds():.0f}s"
        )
        self.store.record_condition(
            "replica_stale", REPLICA_SUBJECT, stale, self.clock(), detail if stale else None
        )
        if stale:
            return RunResult(
                inv.name,
                "stale",
                None,
                error=f"not evaluated: {detail}",
                started_at=started,
                replica_lag=lag,
                duration_ms=(time.monotonic() - clock) * 1000,
            )
        result = self.runner.run_one(inv)
        return dataclasses.replace(
            result, replica_lag=lag, duration_ms=(time.monotonic() - clock) * 1000
        )

    def describe(self, invariant: str) -> InvariantHeader | None:
        found = self.invariants.get(invariant)
        return found.header if found else None

    def dispatch(self, force: bool = False) -> list[StoredEvent]:
        """Plan pending events into the delivery ledger (fast, no network); returns the
        events planned. A burst is held until quiet so it can become one digest."""
        with self._dispatching:
            planned = self.alerter.plan(self.store.pending_events(limit=1000), force)
        for event in planned:
            log.warning(
                "event %s: %s",
                event.kind,
                event.invariant,
                extra={
                    "fields": {
                        "event_id": event.id,
                        "incident_id": event.incident_id,
                        "event": event.kind,
                        "invariant": event.invariant,
                        **event.payload,
                    }
                },
            )
        return planned

    def deliver(self, force: bool = False) -> int:
        """Plan what is pending, then perform the deliveries that are due (network)."""
        self.dispatch(force)
        handled = self.alerter.deliver()
        self.metrics.observe_deliveries(self.alerter.ledger.counts(), self.alerter.worker.failures)
        return handled

    def deliver_until_idle(self, seconds: float) -> None:
        """For burst mode and shutdown: deliver until nothing is due, within a deadline."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.deliver(force=True)
            due = self.alerter.ledger.next_due()
            if due is None or due > self.clock() + timedelta(seconds=seconds):
                return
            # Never a hot loop: at least a short pause between rounds, at most 0.2s.
            wait = (due - self.clock()).total_seconds()
            time.sleep(min(0.2, max(0.02, wait)))

    def run_once(self) -> tuple[Reload, list[RunResult]]:
        """Burst mode: load, evaluate every invariant once through the full path, return."""
        change = self.reload()
        names = sorted(self.invariants)
        with BurstPool(self.config.concurrency, thread_name_prefix="invmon-burst") as pool:
            results = [r for r in pool.map(self.evaluate, names) if r is not None]
        self.deliver_until_idle(30)
        return change, results

    # --- the long-running part -----------------------------------------------------------

    def start(self) -> None:
        if self.config.http.listen:
            # Bound first: a port in use stops start-up before anything runs.
            self.listener = Listener(self.config.http.listen, self.routes())
        self.scheduler.start()
        self.reload()
        now = utc_now()  # the scheduler's own clock, not the injectable one used for records
        for inv in self.invariants.values():
            self._schedule(inv, first_run=now)  # the first evaluation happens at start-up
        self.scheduler.add_job(
            self._beat,
            IntervalTrigger(seconds=HEARTBEAT.total_seconds()),
            id="invmon:heartbeat",
            next_run_time=now,
            executor="housekeeping",
        )
        self.scheduler.add_job(
            self.deliver,
            IntervalTrigger(seconds=DISPATCH_EVERY.total_seconds()),
            id="invmon:deliver",
            next_run_time=now,
            executor="alerts",
        )
        self.scheduler.add_job(
            self.alerter.remind, IntervalTrigger(minutes=1), id="invmon:remind", executor="alerts"
        )
        self.scheduler.add_job(
            self.prune,
            IntervalTrigger(hours=6),
            id="invmon:prune",
            next_run_time=now,
            executor="housekeeping",
        )
        if self.listener:
            self.listener.start()
            log.info("listening on http://%s", self.listener.address)
        if self.socket_mode:
            self.socket_mode.start()
        log.info(
            "invmon running",
            extra={
                "fields": {
                    "invariants": len(self.invariants),
                    "concurrency": self.config.concurrency,
                }
            },
        )

    def routes(self) -> Routes:
        return Routes(
            healthz=Probe(self.health_problem),
            readyz=Probe(self.runner.probe),
            metrics=self.metrics.render,
            slack_actions=self.interactions.http if self.config.slack.signing_secret else None,
        )

    def health_problem(self) -> str | None:
        if not self.scheduler.running:
            return "scheduler is not running"
        age = time.monotonic() - self._heartbeat
        if age > 3 * HEARTBEAT.total_seconds():
            return f"scheduler has not ticked for {age:.0f}s"
        return None

    def _beat(self) -> None:
        self._heartbeat = time.monotonic()

    def prune(self) -> None:
        removed = self.store.prune_runs(self.clock() - self.config.state.retention)
        if removed:
            log.info("pruned old runs", extra={"fields": {"runs": removed}})

    def serve(self, install_signals: bool = True) -> int:
        """Run until SIGTERM/SIGINT; SIGHUP reloads. Returns the exit code."""
        self.start()
        self.signals.run(install_signals)
        self.shutdown()
        return 0

    def request_stop(self) -> None:
        """Safe from a signal handler and from any thread."""
        self._stop_requested = True
        self.signals.request_stop()

    def request_reload(self) -> None:
        self.signals.request_reload()

    def _reload_on_signal(self) -> None:
        log.info("SIGHUP: reloading invariants")
        self.reload()

    def shutdown(self) -> None:
        grace = self.config.daemon.shutdown_grace.total_seconds()
        log.info("stopping: no new runs; waiting up to %.0fs for runs in flight", grace)
        self._stop_requested = True
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        if not self._wait_idle(grace):
            cancelled = self.runner.cancel_all()
            log.warning("cancelled %d queries still running after the grace period", cancelled)
            self._wait_idle(10)
        if self.listener:
            self.listener.stop()
        if self.socket_mode:
            self.socket_mode.stop()
        self.runner.close()
        self.deliver_until_idle(min(10.0, grace))
        log.info("stopped")

    def _wait_idle(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        with self._in_flight_changed:
            while self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._in_flight_changed.wait(left)
        return True
