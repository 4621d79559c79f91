"""`invmon run`: the long-lived process, composed of small parts, each in its own module:

    the process and its signals     process.SignalLoop
    what runs when, and who runs it scheduling.Scheduler: one `tick(now)` a turn, over
                                    slots.Timetable (pure), the fleet's queue and claims
    one evaluation                  evaluation.Evaluator  (replica_gate.ReplicaGate before it)
    the threads that turn it        jobs.Jobs (APScheduler), with housekeeping.Housekeeping
    alerts                          alerts.pump.DeliveryPump
    what it answers about itself    probes.Probes (/healthz, /readyz), http.Listener
    the stop and its bound          stopping.StopDeadline

This module only wires them together: the tick starts each slot when it is due, the alerts
turn pumps deliveries whenever a run stored events (each at least every second), and less
often the jobs run reminders and pruning; evaluations run on each target's workers. Tests
drive the same path without threads through `run_due(now)` (`Scheduler.tick(now)`, then
each run).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta

from alerts.alerter import Alerter
from alerts.delivery_health import DeliveryHealth
from alerts.interactions import Interactions
from alerts.pump import DeliveryPump
from alerts.socket_mode import SocketModeReceiver
from monitor.clock import Clock, utc_now
from monitor.config import Config
from monitor.daemon.databases import Databases
from monitor.daemon.evaluation import Evaluator
from monitor.daemon.housekeeping import Housekeeping
from monitor.daemon.http import Listener
from monitor.daemon.jobs import TICK, Jobs, Turns
from monitor.daemon.liveness import Liveness
from monitor.daemon.metrics import Metrics, build_info
from monitor.daemon.probes import Probes
from monitor.daemon.process import SignalLoop
from monitor.daemon.reconfiguring import Reconfigurer
from monitor.daemon.reloading import Reloader
from monitor.daemon.scheduling import Scheduler
from monitor.daemon.services import Services
from monitor.daemon.stopping import StopDeadline
from monitor.daemon.supervision import Notifier, Supervisor
from monitor.daemon.watchdog import Watchdog
from monitor.execution.results import RunResult
from monitor.invariants.definitions import Definitions, Reload
from monitor.invariants.loader import Invariant
from monitor.store.claims import Claim
from monitor.store.state import StateStore
from monitor.store.store_health import StoreHealth
from monitor.web.page import StatusPage

# The uses of the state store whose failure keeps runs from being recorded, through no
# fault of the schedule (the watchdog's stall windows start again after one). A heartbeat
# failing now and then keeps none from it, and must not hide a real stall.
KEEP_RUNS_UNRECORDED = ("claiming a slot", "recording a run of", "reading the quarantined")

log = logging.getLogger("invmon.daemon")

# Liveness bounds (liveness.py): /healthz fails, and systemd's watchdog pings stop, when a
# part has not moved for longer than its bound.
HEARTBEAT_LIMIT = timedelta(seconds=15)  # the timetable's tick, due every second
# One alerts turn plans what is pending and performs up to 50 deliveries, each a few Slack
# calls bounded by the transport's timeout.
ALERTS_LIMIT = timedelta(minutes=5)
RUN_MARGIN = timedelta(minutes=1)  # past a run's own longest (listings + query timeout)
RELOAD_LIMIT = timedelta(minutes=5)  # loading and vetting the folder against each target

__all__ = ["Daemon", "Reload", "utc_now"]


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
        reread: Callable[[], Config] | None = None,
        liveness: Liveness | None = None,
    ) -> None:
        """Wire the parts; nothing runs until `start` (or `run_due`, `run_once`).
        `signals`: the loop the process installed before anything slow, if it did;
        `reread`: the config read again, for SIGHUP (none: SIGHUP reloads the folder only);
        `liveness`: the one `databases`' runners judge their time past pauses by."""
        self.definitions = definitions
        self.config = config
        self.store = store
        self.databases = databases
        self.alerter = alerter
        self.clock = clock
        self.store_health = store_health
        self.metrics = Metrics(
            lambda: store.counts(clock()), lambda: self.store_health.problem is None
        )
        services = Services(store, store_health, self.metrics, clock)
        self.evaluator = Evaluator(databases, config.daemon, services, alerter.count_moved)
        self.pump = DeliveryPump(
            alerter,
            store,
            self.metrics,
            clock,
            self.store_health,
            running=lambda: self.scheduler.outstanding(),
        )
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
        self.liveness = liveness or Liveness()
        self.supervisor = Supervisor(self.liveness, Notifier())
        self.jobs = Jobs()  # APScheduler and two loops: the threads that turn it
        self._tick_woken = threading.Event()  # the tick loop turns at once when set
        self.probes = Probes(
            config,
            services,
            databases,
            definitions,
            self.delivery,
            self.interactions,
            self.liveness,
            self.jobs,
            self.socket_mode,
        )
        self.housekeeping = Housekeeping(
            services, alerter, self.scheduler, config.state.retention, lambda: not self._stopping
        )
        self.watchdog = Watchdog(
            config.watchdog,
            services,
            self.pump,
            self.scheduler.loaded,
            self.scheduler.running,
            self.probes.switch_problem,
            clock(),
            config.daemon.jitter,
            lambda: self.liveness.pauses + self.store_health.failures(*KEEP_RUNS_UNRECORDED),
        )
        self.listener: Listener | None = None
        self.page: StatusPage | None = None  # the listener's, once it listens
        self.reconfigurer = (
            Reconfigurer(
                reread,
                alerter,
                self.interactions,
                self.reloader,
                databases,
                lambda: self.page,
                self.delivery,
            )
            if reread is not None
            else None
        )
        self._started = False
        self._stopping = False
        # Set by shutdown: a scheduler job its stop left running (running.end_process).
        self.threads_left = False

    @property
    def invariants(self) -> dict[str, Invariant]:
        return self.definitions.current

    # --- loading -------------------------------------------------------------------------

    def reload(self) -> Reload:
        """Load the invariants folder and bring the timetable in line with it; a quarantine
        whose file has changed since is lifted."""
        with self.liveness.busy("a reload of the invariants", RELOAD_LIMIT.total_seconds()):
            change = self.reloader.reload()
            self.evaluator.lift_changed_quarantines(self.invariants)
        self._tick_woken.set()  # a new file is due at once: the tick need not wait for it
        return change

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
        wrote = False
        try:
            with self.liveness.busy(f"the run of {name}", bound):
                evaluated = self.evaluator.evaluate(inv, claim)
                wrote = evaluated is not None and evaluated.events > 0
                return evaluated.result if evaluated is not None else None
        except Exception:
            # This runs on a target's worker, whose future nobody reads (tick): unsaid here,
            # a fault would end the run without a word and leave its invariant silent.
            log.exception("the run of %s failed inside invmon; it runs again when due", name)
            return None
        finally:
            self.scheduler.end(name, claim)
            # After `end`: the alerts turn woken now sees this run no longer in flight, so
            # a lone opening goes at once (alerts/bursts.py).
            self.pump.ran(wrote)

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
        self.quarantine_overdue()
        return self._start(self.scheduler.tick(self.clock()))

    def quarantine_overdue(self) -> None:
        """A run whose query has been on the database well past its timeout quarantines
        its invariant now, not when (if ever) it returns: a daemon restarted meanwhile must
        not run it again. (The tick's first step.)"""
        overdue = self.scheduler.overdue(self.config.daemon.overrun_margin, self._held_for)
        for done, (inv, reason) in enumerate(overdue):
            if not self.evaluator.quarantine(inv, reason):
                # The store failed: this one and the rest are judged again at the next tick.
                self.scheduler.not_overdue([i.name for i, _ in overdue[done:]])
                return

    def _held_for(self, inv: Invariant) -> timedelta | None:
        """How long `inv`'s query in flight has held its connection (Scheduler.overdue)."""
        if inv.target not in self.databases:
            return None
        return self.databases[inv.target].runner.held_for(inv.name)

    def _next_tick_in(self) -> float:
        """Seconds until the timetable's next start (the tick loop's wait, jobs.py)."""
        at = self.scheduler.next_tick()
        return TICK.total_seconds() if at is None else (at - self.clock()).total_seconds()

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

    # --- the long-running part -----------------------------------------------------------

    def turns(self) -> Turns:
        """What the jobs call. The turns that call Slack outside the alerts turn (the check
        of the alert path, reminders, the daily summary) are each bounded like it: a Slack
        that trickles its answer held them for good, unwatched, with /healthz at 200."""
        return Turns(
            tick=self.tick,
            tick_in=self._next_tick_in,
            tick_woken=self._tick_woken,
            beat=self.beat,
            beat_every=self.scheduler.beat_every,
            deliver=self.deliver,
            deliver_in=lambda: self.pump.next_turn_in(TICK.total_seconds()),
            deliver_woken=self.pump.woken,
            delivery_path=self._watched(
                "the check of the alert path", self.delivery.tick, self._path_check_limit()
            ),
            remind=self._watched("the reminders", self.housekeeping.remind),
            prune=self.housekeeping.prune,
            prune_claims=self.housekeeping.prune_claims,
            summarise=self._watched("the daily summary", self.housekeeping.summarise),
            daily_summary=self.config.slack.daily_summary,
        )

    def _path_check_limit(self) -> timedelta:
        """The check of the alert path makes a few Slack calls per channel it names, each
        up to slack.timeout: with a raised timeout, or a big workspace's channel list, 5
        minutes could be a working check's time, and a bound that ended it a restart."""
        return max(ALERTS_LIMIT, 30 * self.config.slack.timeout)

    def _watched(
        self, part: str, turn: Callable[[], object], limit: timedelta | None = None
    ) -> Callable[[], object]:
        def watched() -> object:
            bound = ALERTS_LIMIT if limit is None else limit
            with self.liveness.busy(part, bound.total_seconds()):
                return turn()

        return watched

    def start(self) -> None:
        if self.config.http.listen:
            # Bound first: a port in use stops start-up before anything runs.
            routes = self.probes.routes()
            self.page = routes.page if isinstance(routes.page, StatusPage) else None
            self.listener = Listener(self.config.http.listen, routes)
        self.databases.start_workers()
        self._started = True
        self.reload()  # every loaded invariant is due at once: the first run is at start-up
        self.jobs.start(self.turns())
        self.liveness.expect("the scheduler's tick", HEARTBEAT_LIMIT.total_seconds())
        self.liveness.expect(
            "the fleet's heartbeat", 3 * self.scheduler.beat_every.total_seconds() + 15
        )
        self.liveness.expect("the alerts turn", ALERTS_LIMIT.total_seconds())
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
                    **build_info(),  # version, commit, store_schema: as /metrics says
                    "invariants": len(self.invariants),
                    "concurrency": self.config.concurrency,
                }
            },
        )

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
        if self.reconfigurer is not None:
            self.config = self.reconfigurer.reconfigure(self.config)
        log.info("SIGHUP: reloading invariants")
        self.reload()

    def shutdown(self, supervise: bool = False) -> int:
        """Stop within daemon.shutdown_grace + STOP_MARGIN: the runs in flight get the
        grace, every later step a share of what is left. The exit code: 0, or 1 when runs
        were still in flight at the end (their threads are abandoned). With `supervise`, a
        step that ignores its bound ends the process at the deadline, naming the step."""
        stop = StopDeadline(self.config.daemon.shutdown_grace)
        step, left, grace = stop.step, stop.left, stop.grace
        log.info("stopping: no new runs; waiting up to %.0fs for runs in flight", grace)
        self._stopping = True
        if supervise:
            self.supervisor.stop_by(stop.seconds + 2, lambda: stop.doing)
        for part in ("the scheduler's tick", "the fleet's heartbeat", "the alerts turn"):
            self.liveness.forget(part)
        # No new job or self-check turn from now on; the ones under way end before the store
        # is left (below), so nothing writes to it once the process closes it.
        self.watchdog.halt()
        self.jobs.pause()
        step("the runs in flight to finish")
        if not self.scheduler.wait_idle(grace):
            cancelled = self.databases.interrupt(left(5) / 2)
            log.warning("cancelled %d queries still running after the grace period", cancelled)
            step("the cancelled runs to end")
            self.scheduler.wait_idle(left(5))
        step("the workers to stop")
        self.databases.stop_workers()
        self.scheduler.hand_back_queued(self.clock())
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
        self.threads_left = not self.jobs.stop(left(5))
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

    def close(self) -> None:
        """Release the monitored database's connections (after `run_once`, or `serve`)."""
        self.databases.close()
