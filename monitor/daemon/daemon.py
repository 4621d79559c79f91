"""`invmon run`: the long-lived process, composed of small parts, each in its own module:

    the process and its signals     process.SignalLoop
    what runs when, and who runs it scheduling.Scheduler: one `tick(now)` a turn, over
                                    slots.Timetable (pure), the fleet's queue and claims
    one evaluation                  evaluation.Evaluator  (replica_gate.ReplicaGate before it)
    alerts                          alerts.pump.DeliveryPump
    the listener                    http.Listener

This module only wires them together and owns the threads: an APScheduler background
scheduler ticks the timetable every second (`tick`), pumps deliveries every second, and
runs reminders and pruning; evaluations run on each target's workers. Tests drive the
same path without threads through `run_due(now)` (`Scheduler.tick(now)`, then each run).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from apscheduler.executors.pool import ThreadPoolExecutor as JobExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from alerts.alerter import Alerter
from alerts.delivery_health import DeliveryHealth
from alerts.interactions import Interactions
from alerts.pump import DeliveryPump
from alerts.socket_mode import SocketModeReceiver
from alerts.transport import Transport
from monitor.clock import Clock, utc_now
from monitor.config import Config
from monitor.daemon.databases import Databases
from monitor.daemon.evaluation import Evaluator
from monitor.daemon.http import Listener, Probe, Routes
from monitor.daemon.liveness import Liveness
from monitor.daemon.metrics import Metrics
from monitor.daemon.process import SignalLoop
from monitor.daemon.reloading import Reloader
from monitor.daemon.scheduling import Scheduler
from monitor.daemon.services import Services
from monitor.daemon.supervision import Notifier, Supervisor
from monitor.daemon.watchdog import Watchdog
from monitor.execution.quarantine import version_of
from monitor.execution.results import RunResult
from monitor.invariants.definitions import Definitions, Reload
from monitor.invariants.loader import Invariant
from monitor.store.claims import Claim
from monitor.store.state import StateStore
from monitor.store.store_health import StoreHealth
from monitor.web.page import StatusPage

log = logging.getLogger("invmon.daemon")

TICK = timedelta(seconds=1)
# Liveness bounds (liveness.py): /healthz fails, and systemd's watchdog pings stop, when a
# part has not moved for longer than its bound.
HEARTBEAT_LIMIT = timedelta(seconds=15)  # the timetable's tick, due every second
# One alerts turn plans what is pending and performs up to 50 deliveries, each a few Slack
# calls bounded by the transport's timeout.
ALERTS_LIMIT = timedelta(minutes=5)
RUN_MARGIN = timedelta(minutes=1)  # past a run's own longest (listings + query timeout)
RELOAD_LIMIT = timedelta(minutes=5)  # loading and vetting the folder against each target
# A stop takes at most daemon.shutdown_grace for the runs in flight, then this for the rest
# (cancelling, the last deliveries, closing connections); past it the process exits 70.
STOP_MARGIN = timedelta(seconds=10)

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
        signals: SignalLoop | None = None,
    ) -> None:
        """Wire the parts; nothing runs until `start` (or `run_due`, `run_once`).
        `signals`: the loop the process installed before anything slow, if it did."""
        self.definitions = definitions
        self.config = config
        self.store = store
        self.databases = databases
        self.alerter = alerter
        self.clock = clock
        self.store_health = store_health
        self.metrics = Metrics(store.counts, lambda: self.store_health.problem is None)
        services = Services(store, store_health, self.metrics, clock)
        self.evaluator = Evaluator(databases, config.daemon, services)
        self.pump = DeliveryPump(alerter, store, self.metrics, clock, self.store_health)
        # Can alerts reach anyone? Checked at start and after a delivery fails for good.
        self.delivery = DeliveryHealth(config, alerter, self.metrics, self.store_health)
        self.interactions = Interactions(alerter, config.slack)
        self.socket_mode = (
            SocketModeReceiver(self.interactions, config.slack) if config.slack.app_token else None
        )
        # The loop's state (timetable, fleet queue, claims, runs in flight) and its lock.
        self.scheduler = Scheduler(config.daemon, definitions, services)
        self.reloader = Reloader(
            config,
            databases,
            definitions,
            lambda running: self.scheduler.install(running, self.clock()),
            services,
        )
        self.signals = signals or SignalLoop()
        self.liveness = Liveness()
        self.supervisor = Supervisor(self.liveness, Notifier())
        self.watchdog = Watchdog(
            config.watchdog,
            services,
            self.pump,
            self.scheduler.loaded,
            self.scheduler.running,
            self.switch_problem,
            clock(),
            config.daemon.jitter,
        )
        self.listener: Listener | None = None
        self.jobs: BackgroundScheduler | None = None  # APScheduler: the threads that turn it
        self._started = False
        self._stopping = False
        self._stop_step = "nothing yet"  # what the stop waits for now, for its deadline

    @classmethod
    def build(
        cls,
        config: Config,
        dsn: str | None,
        store: StateStore,
        clock: Clock = utc_now,
        transport: Transport | None = None,
        signals: SignalLoop | None = None,
    ) -> Daemon:
        """The parts a real daemon needs, from its config; `dsn` is the default target's
        (from --dsn or INVMON_DSN), the other targets' come from `targets:`."""
        where = "state.dsn" if config.state.dsn else f"state.path {str(config.state.path)!r}"
        health = StoreHealth(where)
        redaction = config.redact.redaction(
            None if config.redact.key else stored_key(store, "redaction_key")
        )
        databases = Databases.build(config, store, health, redaction, dsn or None, clock)
        definitions = Definitions()
        alerter = Alerter(
            store,
            config.slack,
            definitions.describe,
            clock,
            transport,
            several_targets=len(databases.by_name) > 1,
        )
        return cls(config, store, databases, alerter, definitions, clock, health, signals)

    @property
    def invariants(self) -> dict[str, Invariant]:
        return self.definitions.current

    # --- loading -------------------------------------------------------------------------

    def reload(self) -> Reload:
        """Load the invariants folder and bring the timetable in line with it; a quarantine
        whose file has changed since is lifted."""
        with self.liveness.busy("a reload of the invariants", RELOAD_LIMIT.total_seconds()):
            change = self.reloader.reload()
            self._lift_changed_quarantines()
            return change

    # --- quarantine (quarantine.py) --------------------------------------------------------

    def _lift_changed_quarantines(self) -> None:
        with self.store_health.guard("reading the quarantined invariants"):
            for name, q in self.store.quarantined().items():
                inv = self.invariants.get(name)
                if inv is not None and version_of(inv) != q.version:
                    self.store.lift_quarantine(name, "its file changed", self.clock())
                    log.info("quarantine lifted: %s changed", name)

    def _quarantine_overdue(self) -> None:
        """A run still in flight well past its timeout quarantines its invariant now, not
        when (if ever) it returns: a daemon restarted meanwhile must not run it again."""
        margin = self.config.daemon.overrun_margin
        for inv, reason in self.scheduler.overdue(self.clock(), margin):
            self.evaluator.quarantine(inv, reason)

    # --- evaluating ----------------------------------------------------------------------

    def evaluate(self, name: str, claim: Claim | None = None) -> RunResult | None:
        """Evaluate one invariant now, in this thread; None when it is not loaded (or the
        daemon is stopping, or it is already running), its claim then handed back."""
        stopping = self._stopping or self.signals.stopping
        inv = self.scheduler.begin(name, self.clock(), refuse=stopping)
        if inv is None:
            if claim is not None:
                self.scheduler.release(claim, self.clock())
            return None
        bound = (inv.longest_run + RUN_MARGIN).total_seconds()
        try:
            with self.liveness.busy(f"the run of {name}", bound):
                return self.evaluator.evaluate(inv, claim)
        finally:
            self.scheduler.end(name, claim)

    def run_due(self, now: datetime) -> list[RunResult]:
        """One turn of the timetable in this thread: evaluate what is due at `now`."""
        claims = self.scheduler.tick(now)
        return [r for c in claims if (r := self.evaluate(c.invariant, c)) is not None]

    def tick(self) -> list[Future[RunResult | None]]:
        """The scheduler's turn: start what is due, each on its target's own workers (a
        target that hangs fills only its own); also the heartbeat."""
        self.liveness.beat("the scheduler's tick")
        if not self._started or self._stopping or self.signals.stopping:
            return []  # a stopping daemon claims nothing it would then hand back
        self._quarantine_overdue()
        return self._start(self.scheduler.tick(self.clock()))

    def beat(self) -> list[Future[RunResult | None]]:
        """The fleet's turn (every third of a lease): heartbeat, then run what was taken over."""
        self.liveness.beat("the fleet's heartbeat")
        if not self._started or self._stopping:
            return []
        return self._start(self.scheduler.heartbeat(self.clock()))

    def _start(self, claims: list[Claim]) -> list[Future[RunResult | None]]:
        futures = []
        for claim in claims:
            inv = self.invariants.get(claim.invariant)
            started = (
                self.databases.submit(inv, self.evaluate, claim.invariant, claim) if inv else None
            )  # None too when the workers are shut down (a stop under way)
            if started is not None:
                futures.append(started)
            else:
                self.scheduler.release(claim, self.clock())
        return futures

    def run_once(self) -> tuple[Reload, list[RunResult]]:
        """Burst mode: load, evaluate every invariant once through the full path, return."""
        change = self.reload()
        names = sorted(self.invariants)
        with ThreadPoolExecutor(self.config.concurrency, "invmon-burst") as pool:
            results = [r for r in pool.map(self.evaluate, names) if r is not None]
        self.pump.deliver_until_idle(30)
        return change, results

    # --- the alerts and housekeeping jobs ------------------------------------------------

    def deliver(self, force: bool = False) -> int:
        """The alerts job's turn."""
        self.liveness.beat("the alerts turn")
        with self.liveness.busy("the alerts turn", ALERTS_LIMIT.total_seconds()):
            handled = self.pump.deliver(force)
        self.liveness.beat("the alerts turn")
        return handled

    def prune(self) -> None:
        with self.store_health.guard("pruning old runs"):
            before = self.clock() - self.config.state.retention
            removed = self.store.prune_runs(before)
            self.scheduler.claims.prune(before)
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
        now = datetime.now(UTC)  # APScheduler's own time: it runs on the wall clock
        every_second = IntervalTrigger(seconds=TICK.total_seconds())
        scheduler.add_job(self.tick, every_second, id="tick", next_run_time=now, executor="ticks")
        scheduler.add_job(
            self.beat,
            IntervalTrigger(seconds=self.scheduler.beat_every.total_seconds()),
            id="beat",
            next_run_time=now,
            executor="fleet",
        )
        scheduler.add_job(
            self.deliver, every_second, id="deliver", next_run_time=now, executor="alerts"
        )
        scheduler.add_job(
            self.delivery.tick,
            every_second,
            id="delivery_path",
            next_run_time=now,
            executor="alerts",
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
        self.liveness.expect("the scheduler's tick", HEARTBEAT_LIMIT.total_seconds())
        self.liveness.expect(
            "the fleet's heartbeat", 3 * self.scheduler.beat_every.total_seconds() + 15
        )
        self.liveness.expect("the alerts turn", ALERTS_LIMIT.total_seconds())
        scheduler.start()
        self.jobs = scheduler
        self.watchdog.started_at = self.clock()
        self.watchdog.start(self.liveness, ALERTS_LIMIT)
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
            readyz=Probe(self.readiness, self.readiness_note),
            metrics=self.metrics.render,
            slack_actions=self.interactions.http if self.config.slack.signing_secret else None,
            page=StatusPage(
                self.store,
                lambda: self.definitions.current,
                http,
                self.clock,
                roles=self.databases.role_notes,
            ),
        )

    def readiness(self) -> str | None:
        """/readyz: a target to evaluate, and a path for the alerts (DeliveryHealth)."""
        found = [p for p in (self.databases.readiness(), self.delivery.problem()) if p]
        return "; ".join(found) or None

    def readiness_note(self) -> str | None:
        """Said under /readyz's "ok": the targets that cannot be evaluated (unreachable,
        refused or stale, each saying which), an alert path not yet verified."""
        found = [n for n in (self.databases.partly(), self.delivery.note()) if n]
        return "\n".join(found) or None

    def switch_problem(self) -> str | None:
        """What the dead man's switch reports as a failure: /healthz's reason, or alerts
        that cannot reach anyone (the switch is then the one path left to say so)."""
        return self.health_problem() or self.delivery.problem()

    def health_problem(self) -> str | None:
        """/healthz: None while the store works and every part of the daemon moves."""
        if self.store_health.problem is not None:
            return self.store_health.problem
        if self.jobs is None or not self.jobs.running:
            return "scheduler is not running"
        return self.liveness.problem()

    def serve(self, install_signals: bool = True, supervise: bool = False) -> int:
        """Run until SIGTERM/SIGINT; SIGHUP reloads. Returns the exit code. The signal
        handlers go in first (if the process has not already put them in), so a signal
        during start-up is a request like any other. `supervise` (the process's own
        daemon, not one inside a test): systemd's notifications, and the guard that ends a
        wedged process or a stop past its deadline (supervision.py)."""
        with self.signals.installed(install_signals):
            self.start()
            if supervise:
                self.supervisor.start()
            self.signals.run(self._reload_on_signal)
            return self.shutdown(supervise)

    def request_stop(self) -> None:
        """Safe from a signal handler and from any thread."""
        self.signals.request_stop()

    def request_reload(self) -> None:
        self.signals.request_reload()

    def _reload_on_signal(self) -> None:
        log.info("SIGHUP: reloading invariants")
        self.reload()

    def shutdown(self, supervise: bool = False) -> int:
        """Stop within daemon.shutdown_grace + STOP_MARGIN: the runs in flight get the
        grace, every later step a share of what is left. The exit code: 0, or 1 when runs
        were still in flight at the end (their threads are abandoned). With `supervise`, a
        step that ignores its bound ends the process at the deadline, naming the step."""
        grace = self.config.daemon.shutdown_grace.total_seconds()
        deadline = time.monotonic() + grace + STOP_MARGIN.total_seconds()

        def left(most: float) -> float:
            return max(0.0, min(most, deadline - time.monotonic()))

        def step(doing: str) -> None:
            self._stop_step = doing

        log.info("stopping: no new runs; waiting up to %.0fs for runs in flight", grace)
        self._stopping = True
        if supervise:
            self.supervisor.stop_by(
                grace + STOP_MARGIN.total_seconds() + 2, lambda: self._stop_step
            )
        for part in ("the scheduler's tick", "the fleet's heartbeat", "the alerts turn"):
            self.liveness.forget(part)
        # No new job or self-check turn from now on; the ones under way end before the store
        # is left (below), so nothing writes to it once the process closes it.
        self.watchdog.stop(0)
        if self.jobs is not None and self.jobs.running:
            self.jobs.pause()
        step("the runs in flight to finish")
        if not self.scheduler.wait_idle(grace):
            cancelled = self.databases.cancel_all()
            log.warning("cancelled %d queries still running after the grace period", cancelled)
            step("the cancelled runs to end")
            self.scheduler.wait_idle(left(5))
        step("the workers to stop")
        self.databases.stop_workers()
        self._hand_back_queued()
        step("the HTTP listener and Socket Mode to stop")
        if self.listener:
            self.listener.stop()
        if self.socket_mode:
            self.socket_mode.stop()
        step("the last deliveries to Slack")
        self.pump.deliver_until_idle(left(min(10.0, grace)))
        step("the monitored databases' connections to close")
        self.databases.close()
        step("the scheduler's jobs and the watchdog's turn under way to end")
        self.watchdog.stop(left(5))
        self._stop_scheduler(left(5))
        step("the state store, to leave the fleet")
        with self.store_health.guard("leaving the fleet"):
            self.scheduler.claims.leave(self.clock() - timedelta(days=1))
        running = sorted(self.scheduler.running())
        if running:
            log.error(
                "stopped with runs still in flight after the grace period: %s",
                ", ".join(running),
            )
            return 1
        log.info("stopped")
        return 0

    def _stop_scheduler(self, seconds: float) -> None:
        """Shut the scheduler down, waiting at most `seconds` for a job under way (a tick,
        an alerts turn inside a Slack call): APScheduler's own wait has no bound."""
        scheduler = self.jobs
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

    def _hand_back_queued(self) -> None:
        """The claims whose runs were still queued when the workers stopped: handed back,
        so another daemon can take the slot at once instead of after the lease."""
        for claim in self.scheduler.queued():
            self.scheduler.release(claim, self.clock())

    def close(self) -> None:
        """Release the monitored database's connections (after `run_once`, or `serve`)."""
        self.databases.close()
