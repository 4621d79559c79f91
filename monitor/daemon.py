"""`invmon run`: the long-lived process, composed of small parts, each in its own module:

    the process and its signals     process.SignalLoop
    what runs when                  slots.Timetable (pure)
    one evaluation                  evaluation.Evaluator  (replica_gate.ReplicaGate before it)
    alerts                          alerts.pump.DeliveryPump
    the listener                    http.Listener

This module only wires them together and owns the threads: an APScheduler background
scheduler ticks the timetable every second (`tick`), pumps deliveries every second, and
runs reminders and pruning; evaluations run on a pool of `concurrency` workers. Tests drive
the same path without threads through `run_due(now)`, as Celery beat's `Scheduler.tick()`.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from apscheduler.executors.pool import ThreadPoolExecutor as JobExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from alerts.alerter import Alerter
from alerts.interactions import Interactions
from alerts.pump import DeliveryPump
from alerts.socket_mode import SocketModeReceiver
from alerts.transport import Transport
from monitor.claims import Claim, Claims
from monitor.clock import Clock, utc_now
from monitor.config import Config
from monitor.databases import Databases
from monitor.definitions import Definitions, Reload
from monitor.evaluation import Evaluator
from monitor.fleet import Queue
from monitor.http import Listener, Probe, Routes
from monitor.loader import Invariant
from monitor.metrics import Metrics
from monitor.process import SignalLoop
from monitor.reloading import Reloader
from monitor.results import RunResult
from monitor.self_checks import Loaded
from monitor.slots import Timetable
from monitor.state import StateStore
from monitor.store_health import StoreHealth
from monitor.watchdog import Watchdog
from monitor.web.page import StatusPage

log = logging.getLogger("invmon.daemon")

TICK = timedelta(seconds=1)
HEARTBEAT_LIMIT = timedelta(seconds=15)  # /healthz fails when the timetable stops ticking

__all__ = ["Daemon", "Reload", "utc_now"]


def stored_key(store: StateStore, name: str) -> bytes:
    """A random key made once and kept in the state store, so every daemon sharing it, and
    every restart, masks a value the same way."""
    return bytes.fromhex(store.kept_value(name, lambda: secrets.token_hex(32)))


class Daemon:
    def __init__(
        self,
        config: Config,
        store: StateStore,
        databases: Databases,
        alerter: Alerter,
        definitions: Definitions,
        clock: Clock,
        store_health: StoreHealth,
    ) -> None:
        """Wire the parts; nothing runs until `start` (or `run_due`, `run_once`)."""
        self.definitions = definitions
        self.config = config
        self.store = store
        self.databases = databases
        self.alerter = alerter
        self.clock = clock
        self.store_health = store_health
        self.metrics = Metrics(store.counts, lambda: self.store_health.problem is None)
        self.evaluator = Evaluator(
            databases, store, self.metrics, config.daemon, clock, self.store_health
        )
        self.pump = DeliveryPump(alerter, store, self.metrics, clock, self.store_health)
        self.interactions = Interactions(alerter, config.slack)
        self.socket_mode = (
            SocketModeReceiver(self.interactions, config.slack) if config.slack.app_token else None
        )
        self.timetable = Timetable(config.daemon.jitter)
        # One daemon among any number on the store: slots are claimed (claims.py), the
        # preferred daemon first (fleet.py), so each runs once across the fleet.
        self.me = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.claims = Claims(store.storage, self.me, config.daemon.lease)
        self.queue = Queue(self.me, config.daemon.handoff)
        self._members: set[str] = {self.me}
        self.reloader = Reloader(
            config,
            databases,
            store,
            self.metrics,
            definitions,
            self._install,
            clock,
            self.store_health,
        )
        self.signals = SignalLoop(self._reload_on_signal)
        self.watchdog = Watchdog(
            config.watchdog,
            store,
            self.store_health,
            self.pump,
            clock,
            self._loaded,
            self._running,
            self.health_problem,
            clock(),
            config.daemon.jitter,
        )
        self.listener: Listener | None = None
        self.scheduler: BackgroundScheduler | None = None
        self._started = False
        self._lock = threading.Lock()  # the invariants and the timetable
        self._in_flight: dict[str, datetime] = {}  # name -> when its run started
        self._holding: dict[str, Claim] = {}  # name -> its claim, queued or running
        self._idle = threading.Condition()
        self._heartbeat = time.monotonic()
        self._stopping = False

    @classmethod
    def build(
        cls,
        config: Config,
        dsn: str | None,
        store: StateStore,
        clock: Clock = utc_now,
        transport: Transport | None = None,
    ) -> Daemon:
        """The parts a real daemon needs, from its config; `dsn` is the default target's
        (from --dsn or INVMON_DSN), the other targets' come from `targets:`."""
        where = "state.dsn" if config.state.dsn else f"state.path {str(config.state.path)!r}"
        health = StoreHealth(where)
        redaction = config.redact.redaction(
            None if config.redact.key else stored_key(store, "redaction_key")
        )
        databases = Databases.build(config, store, health, redaction, dsn or None)
        definitions = Definitions()
        alerter = Alerter(store, config.slack, definitions.describe, clock, transport)
        return cls(config, store, databases, alerter, definitions, clock, health)

    @property
    def invariants(self) -> dict[str, Invariant]:
        return self.definitions.current

    # --- loading -------------------------------------------------------------------------

    def reload(self) -> Reload:
        """Load the invariants folder and bring the timetable in line with it."""
        return self.reloader.reload()

    def _install(self, running: dict[str, Invariant]) -> None:
        with self._lock:
            self.definitions.current = running
            self.timetable.sync({n: i.schedule for n, i in running.items()}, utc_now())

    # --- evaluating ----------------------------------------------------------------------

    def evaluate(self, name: str, claim: Claim | None = None) -> RunResult | None:
        """Evaluate one invariant now, in this thread; None when it is not loaded (or the
        daemon is stopping, or it is already running, or its claim was taken over)."""
        with self._lock:
            inv = self.invariants.get(name)
            if inv is None or self._stopping or self.signals.stopping or name in self._in_flight:
                if claim is not None:
                    self._release(claim)
                return None
            self._in_flight[name] = self.clock()
        try:
            return self.evaluator.evaluate(inv, claim)
        finally:
            if claim is not None:
                with self._lock:
                    self._holding.pop(name, None)
            with self._idle:
                self._in_flight.pop(name, None)
                self._idle.notify_all()

    def _release(self, claim: Claim) -> None:
        with self._lock:
            self._holding.pop(claim.invariant, None)
        with self.store_health.guard("releasing a slot"):
            self.claims.release(claim, self.clock())

    def _loaded(self) -> dict[str, Loaded]:
        with self._lock:
            return {n: Loaded(i.schedule, i.longest_run) for n, i in self.invariants.items()}

    def _running(self) -> dict[str, datetime]:
        with self._idle:
            return dict(self._in_flight)

    def _claimed(self, now: datetime) -> list[Claim]:
        """The slots this daemon runs now: those due whose claim it won. A slot that an
        earlier run of its invariant still holds, anywhere in the fleet, waits."""
        with self._lock:
            due = self.timetable.due(now, busy=self._in_flight)
            self.queue.keep_only(self.invariants)
            self.queue.add(due, self._members, now)
            ready = [d for d in self.queue.ready(now) if d.name not in self._in_flight]
        won = []
        for item in ready:
            with self.store_health.guard("claiming a slot"):
                outcome = self.claims.claim(item, now)
                with self._lock:
                    if outcome != "busy":
                        self.queue.settle(item)
                if outcome == "claimed":
                    claim = Claim(item.name, item.slot, self.me)
                    with self._lock:
                        # Renewed from now on, while it waits for a worker as well as while
                        # it runs: a queued claim is not an abandoned one.
                        self._holding[item.name] = claim
                    won.append(claim)
        return won

    def heartbeat(self, now: datetime) -> list[Claim]:
        """Say this daemon is alive, renew the leases of its runs in flight, learn who else
        is, and take over the slots of daemons that stopped renewing theirs."""
        with self._lock:
            holding = list(self._holding.values())
            loaded = set(self.invariants) - set(self._in_flight) - set(self._holding)
        with self.store_health.guard("renewing this daemon's claims"):
            self.claims.heartbeat(now, holding, socket.gethostname(), os.getpid())
            self._members = self.claims.members(now, 3 * self._beat) | {self.me}
            self.metrics.fleet_daemons.set(len(self._members))
            taken = self.claims.take_over(loaded, now)
            self.metrics.slots_taken_over.inc(len(taken))
            with self._lock:
                self._holding.update({t.name: Claim(t.name, t.slot, self.me) for t in taken})
            for item in taken:
                log.warning(
                    "took over a slot whose daemon stopped renewing it",
                    extra={"fields": {"invariant": item.name, "slot": item.slot.isoformat()}},
                )
            return [Claim(t.name, t.slot, self.me) for t in taken]
        return []

    @property
    def _beat(self) -> timedelta:
        return self.config.daemon.lease / 3

    def run_due(self, now: datetime) -> list[RunResult]:
        """One turn of the timetable in this thread: evaluate what is due at `now`."""
        return [r for c in self._claimed(now) if (r := self.evaluate(c.invariant, c)) is not None]

    def tick(self) -> list[Future[RunResult | None]]:
        """The scheduler's turn: start what is due, each on its target's own workers (a
        target that hangs fills only its own); also the heartbeat."""
        self._heartbeat = time.monotonic()
        if not self._started or self._stopping or self.signals.stopping:
            return []  # a stopping daemon claims nothing it would then hand back
        return self._start(self._claimed(utc_now()))

    def beat(self) -> list[Future[RunResult | None]]:
        """The fleet's turn (every third of a lease): heartbeat, then run what was taken over."""
        if not self._started or self._stopping:
            return []
        return self._start(self.heartbeat(utc_now()))

    def _start(self, claims: list[Claim]) -> list[Future[RunResult | None]]:
        futures = []
        for claim in claims:
            inv = self.invariants.get(claim.invariant)
            started = (
                self.databases.submit(inv, self.evaluate, claim.invariant, claim) if inv else None
            )
            if started is not None:
                futures.append(started)
            else:
                self._release(claim)
        return futures

    def run_once(self) -> tuple[Reload, list[RunResult]]:
        """Burst mode: load, evaluate every invariant once through the full path, return."""
        change = self.reload()
        names = sorted(self.invariants)
        with ThreadPoolExecutor(self.config.concurrency, "invmon-burst") as pool:
            results = [r for r in pool.map(self.evaluate, names) if r is not None]
        self.pump.deliver_until_idle(30)
        return change, results

    # --- delivering (kept here for the tests and the CLI that call them) -----------------

    def dispatch(self, force: bool = False) -> list[object]:
        return list(self.pump.dispatch(force))

    def deliver(self, force: bool = False) -> int:
        return self.pump.deliver(force)

    def deliver_until_idle(self, seconds: float) -> None:
        self.pump.deliver_until_idle(seconds)

    def prune(self) -> None:
        with self.store_health.guard("pruning old runs"):
            before = self.clock() - self.config.state.retention
            removed = self.store.prune_runs(before)
            self.claims.prune(before)
            if removed:
                log.info("pruned old runs", extra={"fields": {"runs": removed}})

    def summarise(self) -> None:
        with self.store_health.guard("planning the daily summary"):
            self.alerter.summarise(self.clock())

    def remind(self) -> None:
        with self.store_health.guard("planning reminders"):
            self.alerter.remind()

    # --- the long-running part -----------------------------------------------------------

    def start(self) -> None:
        if self.config.http.listen:
            # Bound first: a port in use stops start-up before anything runs.
            self.listener = Listener(self.config.http.listen, self.routes())
        self.databases.start_workers()
        self._started = True
        self.reload()  # every loaded invariant is due at once: the first run is at start-up
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
        now = datetime.now(UTC)
        every_second = IntervalTrigger(seconds=TICK.total_seconds())
        scheduler.add_job(self.tick, every_second, id="tick", next_run_time=now, executor="ticks")
        scheduler.add_job(
            self.beat,
            IntervalTrigger(seconds=self._beat.total_seconds()),
            id="beat",
            next_run_time=now,
            executor="fleet",
        )
        scheduler.add_job(
            self.deliver, every_second, id="deliver", next_run_time=now, executor="alerts"
        )
        scheduler.add_job(self.remind, IntervalTrigger(minutes=1), id="remind", executor="alerts")
        if self.config.slack.daily_summary:
            hour, minute = self.config.slack.daily_summary.split(":")
            scheduler.add_job(
                self.summarise,
                CronTrigger(hour=int(hour), minute=int(minute), timezone=UTC),
                id="summary",
                executor="alerts",
            )
        scheduler.add_job(
            self.prune,
            IntervalTrigger(hours=6),
            id="prune",
            next_run_time=now,
            executor="housekeeping",
        )
        scheduler.start()
        self.scheduler = scheduler
        self.watchdog.started_at = self.clock()
        self.watchdog.start()
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
        http = self.config.http
        if http.listen is not None and not http.page_is_local and not http.page_token:
            log.warning(
                "the status page is not served: http.listen is not a loopback address and "
                "http.page_token is not set"
            )
        return Routes(
            healthz=Probe(self.health_problem),
            readyz=Probe(self.databases.readiness, self.databases.partly),
            metrics=self.metrics.render,
            slack_actions=self.interactions.http if self.config.slack.signing_secret else None,
            page=StatusPage(self.store, lambda: self.definitions.current, http, self.clock),
        )

    def health_problem(self) -> str | None:
        if self.store_health.problem is not None:
            return self.store_health.problem
        if self.scheduler is None or not self.scheduler.running:
            return "scheduler is not running"
        age = time.monotonic() - self._heartbeat
        if age > HEARTBEAT_LIMIT.total_seconds():
            return f"scheduler has not ticked for {age:.0f}s"
        return None

    def serve(self, install_signals: bool = True) -> int:
        """Run until SIGTERM/SIGINT; SIGHUP reloads. Returns the exit code."""
        self.start()
        self.signals.run(install_signals)
        self.shutdown()
        return 0

    def request_stop(self) -> None:
        """Safe from a signal handler and from any thread."""
        self.signals.request_stop()

    def request_reload(self) -> None:
        self.signals.request_reload()

    def _reload_on_signal(self) -> None:
        log.info("SIGHUP: reloading invariants")
        self.reload()

    def shutdown(self) -> None:
        grace = self.config.daemon.shutdown_grace.total_seconds()
        log.info("stopping: no new runs; waiting up to %.0fs for runs in flight", grace)
        self._stopping = True
        self.watchdog.stop()
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        if not self._wait_idle(grace):
            cancelled = self.databases.cancel_all()
            log.warning("cancelled %d queries still running after the grace period", cancelled)
            self._wait_idle(10)
        self.databases.stop_workers()
        if self.listener:
            self.listener.stop()
        if self.socket_mode:
            self.socket_mode.stop()
        self.databases.close()
        self.pump.deliver_until_idle(min(10.0, grace))
        with self.store_health.guard("leaving the fleet"):
            self.claims.leave(self.clock() - timedelta(days=1))
        log.info("stopped")

    def close(self) -> None:
        """Release the monitored database's connections (after `run_once`, or `serve`)."""
        self.databases.close()

    def _wait_idle(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        with self._idle:
            while self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True
