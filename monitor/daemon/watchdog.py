"""The daemon watching itself, on a thread of its own: not a job of the scheduler it
watches, so a stopped scheduler is noticed and said.

Each turn (`watchdog.interval`) it runs invmon's own invariants (self_checks.py), records
them like any other (incidents, events, Slack), and when the scheduler has stopped
ticking it also moves the alerts on itself, since delivering is normally a scheduler job.
With `watchdog.ping_url` it is a dead man's switch too: a ping after each healthy turn,
`/fail` after an unhealthy one, `/start` at start-up (healthchecks.io's convention), so
something outside notices when invmon dies.
"""

from __future__ import annotations

import logging
import threading
import urllib.request
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from alerts.pump import DeliveryPump
from monitor.config import WatchdogConfig
from monitor.daemon.liveness import Liveness
from monitor.daemon.self_checks import (
    CONTEXT,
    STALLED,
    STUCK,
    Loaded,
    stalled,
    store_results,
    stuck,
)
from monitor.daemon.services import Services
from monitor.execution.results import RunResult

log = logging.getLogger("invmon.watchdog")
PART = "the self-check turn"  # its name in liveness.py


class Pinger:
    """The dead man's switch. The URL holds the check's secret, so it is never logged."""

    def __init__(self, url: str, timeout: float = 10) -> None:
        self._url = url.rstrip("/")
        self._timeout = timeout

    def ping(self, suffix: str = "") -> bool:
        try:
            with urllib.request.urlopen(self._url + suffix, timeout=self._timeout) as answer:
                return bool(200 <= answer.status < 300)
        except (OSError, ValueError) as exc:
            log.warning("the dead man's switch ping failed: %s", type(exc).__name__)
            return False


class Watchdog:
    def __init__(
        self,
        settings: WatchdogConfig,
        services: Services,
        pump: DeliveryPump,
        loaded: Callable[[], Mapping[str, Loaded]],
        in_flight: Callable[[], Mapping[str, datetime]],
        problem: Callable[[], str | None],
        started_at: datetime,
        max_jitter: timedelta,
        disturbed: Callable[[], int] = lambda: 0,
    ) -> None:
        self.settings = settings
        self.store, self.health, self.clock = services.store, services.health, services.clock
        self.pump = pump
        self.loaded = loaded
        self.in_flight = in_flight
        self.problem = problem  # the daemon's /healthz reason, None when healthy
        self.started_at = started_at
        self.max_jitter = max_jitter
        # When this daemon first had each loaded invariant: its start for those it started
        # with, the first check after the reload that added it for the others. Only `check`
        # touches it, on the watchdog's own thread.
        self._had_since: dict[str, datetime] = {}
        self._checked = False
        # How many times the process paused or the state store failed (`disturbed`), as the
        # last check saw it: while either lasts, no run is recorded through no fault of the
        # schedule. Only `check` touches it.
        self.disturbed = disturbed
        self._disturbances = disturbed()
        self.pinger = Pinger(settings.ping_url) if settings.ping_url else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self, now: datetime) -> list[RunResult]:
        """Run every self-check at `now` and record it; the results."""
        results = store_results(self.store.read, now, self.settings.slo)
        loaded = self.loaded()
        first = self.started_at if not self._checked else now
        self._had_since = {n: self._had_since.get(n, first) for n in loaded}
        self._checked = True
        disturbances = self.disturbed()
        if disturbances != self._disturbances:
            # A pause or a store outage since the last check: each window starts again.
            # Counted through them, a reviewer's 25 s SIGSTOP, and a store back after an
            # outage, each opened a critical schedule_stalled naming invariants that ran
            # in that same second (and resolved 20 s later).
            self._disturbances = disturbances
            self._had_since = dict.fromkeys(loaded, now)
        last = self.store.last_recorded()
        late = stalled(loaded, last, self._had_since, now, self.max_jitter, self.clock())
        results.append(RunResult.of_rows(STALLED, late, now, "invariant"))
        results.append(
            RunResult.of_rows(STUCK, stuck(self.in_flight(), loaded, now), now, "invariant")
        )
        for result in results:
            self.store.record_run(result.invariant, result, now, context=CONTEXT[result.invariant])
        return results

    def turn(self) -> list[RunResult]:
        """One turn: check, move the alerts on, ping. Delivering here too is what lets a
        stopped scheduler be said in Slack; the ledger's leases make two deliverers safe."""
        now = self.clock()
        results: list[RunResult] = []
        with self.health.guard("checking invmon itself"):
            results = self.check(now)
        self.pump.deliver()
        problem = self.problem()
        if self.pinger is not None:
            healthy = problem is None and not any(r.status == "violated" for r in results)
            self.pinger.ping("" if healthy else "/fail")
        return results

    def start(self, liveness: Liveness | None = None, turn_limit: timedelta = timedelta(0)) -> None:
        """On a thread of its own; with `liveness`, each turn says it came round (a turn
        delivers alerts too, so it may take as long as `turn_limit` past the interval)."""
        if self.pinger is not None:
            self.pinger.ping("/start")
        if liveness is not None:
            liveness.expect(PART, (self.settings.interval + turn_limit).total_seconds())
        self._thread = threading.Thread(
            target=self._loop, args=(liveness,), name="invmon-watchdog", daemon=True
        )
        self._thread.start()

    def halt(self) -> None:
        """No new turn from now on; a turn under way goes on (`stop` waits for it)."""
        self._stop.set()

    def stop(self, seconds: float = 30) -> None:
        """Ask the thread to stop and wait for it at most `seconds` (a turn under way may
        be inside a Slack call): it is a daemon thread, so one still in a turn then is
        left to end with the process."""
        self.halt()
        if self._thread is not None:
            self._thread.join(timeout=seconds)
            if self._thread.is_alive():
                log.warning("the watchdog's turn did not end within %.0fs; leaving it", seconds)

    def _loop(self, liveness: Liveness | None) -> None:
        # Event.wait is the pause between turns and wakes at once on stop.
        while not self._stop.wait(self.settings.interval.total_seconds()):
            try:
                self.turn()
            except Exception as exc:  # the watchdog must outlive whatever it watches
                log.error("the watchdog's turn failed: %s: %s", type(exc).__name__, exc)
            if liveness is not None and not self._stop.is_set():
                liveness.beat(PART)
        if liveness is not None:
            liveness.forget(PART)
