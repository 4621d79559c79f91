"""Prometheus metrics for the daemon, on a registry of its own (no global state)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, generate_latest

from alerts.deliveries import DELIVERY_STATES
from monitor.execution.results import RunResult
from monitor.singleflight import SingleFlight
from monitor.store.migrations import schema_version
from monitor.store.store_health import STORE_ERRORS
from monitor.version import commit, version

STATUSES = ["ok", "violated", "error", "stale"]


# The longest a scrape waits for the state store's figures; past it they are NaN.
FIGURES_WAIT = 2.0


class StoreFigures:
    """The state store's figures for /metrics: read once for all the gauges of a scrape
    (Metrics.render), never while the store is failing, and never waited for past
    FIGURES_WAIT. Each gauge read them on its own, each waiting the store's connection
    timeout: a reviewer's scrape took 25 s with the store refusing connections, Prometheus
    gave up at its 10 s, and `invmon_state_store_ok 0` was never seen."""

    def __init__(self, counts: Callable[[], dict[str, int]], store_ok: Callable[[], bool]) -> None:
        self._counts = counts
        self._store_ok = store_ok
        self._flight: SingleFlight[dict[str, int]] = SingleFlight()

    def read(self) -> dict[str, int] | None:
        """The figures, or None (NaN on the page) when the store fails or is slow."""
        if not self._store_ok():
            return None
        try:
            return self._flight.within(self._counts, FIGURES_WAIT, "invmon-store-figures")
        except TimeoutError:
            return None  # the read goes on; a scrape after it ends takes a new one
        except STORE_ERRORS:
            return None


class Metrics:
    def __init__(
        self, counts: Callable[[], dict[str, int]], store_ok: Callable[[], bool] = lambda: True
    ) -> None:
        self._figures = StoreFigures(counts, store_ok)
        # The figures of the scrape this thread renders (render): its gauges read them.
        self._scrape = threading.local()

        def figures() -> dict[str, int] | None:
            scraped: dict[str, int] | None = getattr(self._scrape, "figures", None)
            return scraped

        self.registry = CollectorRegistry()
        self._target_of: dict[str, str] = {}  # the target each invariant was observed on
        built = build_info()
        Gauge(
            "invmon_build_info",
            "Always 1: which invmon this is, in its labels. version and commit as "
            "`invmon --version` says them; store_schema, the state store's schema version "
            "(its migrations, applied when the daemon opened it: a newer store is refused).",
            list(built),
            registry=self.registry,
        ).labels(**built).set(1)
        self.status = Enum(
            "invmon_invariant_status",
            "The last run's status of each invariant.",
            ["invariant", "target"],
            states=STATUSES,
            registry=self.registry,
        )
        self.offending_rows = Gauge(
            "invmon_offending_rows",
            "Offending rows found by the last successful run.",
            ["invariant", "target"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "invmon_run_duration_seconds",
            "How long one evaluation took, from the replica check to the stored result.",
            ["invariant", "target"],
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=self.registry,
        )
        self.listing = Histogram(
            "invmon_source_listing_seconds",
            "How long listing an invariant's sources (object store, folder) took, apart from "
            "its query; only invariants with a `source:`.",
            ["invariant", "target"],
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=self.registry,
        )
        self.last_success = Gauge(
            "invmon_last_success_timestamp_seconds",
            "When the invariant was last evaluated successfully (ok or violated).",
            ["invariant", "target"],
            registry=self.registry,
        )
        self.replica_lag = Gauge(
            "invmon_replica_lag_seconds",
            "Replay lag of each target's database at the last check (0 on a primary).",
            ["target"],
            registry=self.registry,
        )
        open_incidents = Gauge(
            "invmon_open_incidents", "Incidents not yet resolved.", registry=self.registry
        )
        pending = Gauge(
            "invmon_events_pending", "Events not yet dispatched.", registry=self.registry
        )
        open_incidents.set_function(_reading(figures, "open_incidents"))
        pending.set_function(_reading(figures, "events_pending"))
        closed = Gauge(
            "invmon_closed_incidents",
            "Incidents in the state store that are closed, by how they ended: resolved (the "
            "condition ended) or retired (the invariant was removed while it was open, so "
            "nothing says it was fixed).",
            ["ended_as"],
            registry=self.registry,
        )
        for ended in ("resolved", "retired"):
            closed.labels(ended).set_function(_reading(figures, f"{ended}_incidents"))
        Gauge(
            "invmon_mutes_active",
            "Mutes in force (`invmon mutes`): their incidents are recorded and shown, and "
            "post once the mute ends.",
            registry=self.registry,
        ).set_function(_reading(figures, "mutes_active"))
        Gauge(
            "invmon_state_store_ok",
            "1 when the state store's last use succeeded; 0 when it fails (damaged, locked, "
            "unreachable): nothing is stored and no alert is planned.",
            registry=self.registry,
        ).set_function(lambda: 1.0 if store_ok() else 0.0)
        self.deliveries = Gauge(
            "invmon_deliveries",
            "Alert deliveries in the ledger, by state (PENDING, UNKNOWN, SENT, FAILED). SENT "
            "is finished: posted, or a thread reply an acknowledgement or snooze silenced "
            "before it went out (finished with nothing posted).",
            ["state"],
            registry=self.registry,
        )
        self.delivery_failures = Gauge(
            "invmon_delivery_failures",
            "Permanent delivery failures in this process: deliveries that failed for good "
            "(bad channel, auth, ...), and each new reason a check of the alert path found.",
            registry=self.registry,
        )
        self.delivery_path_ok = Gauge(
            "invmon_delivery_path_ok",
            "1 when the last check of the alert path (Slack's token and its chat:write, each "
            "configured channel) "
            "passed, 0 when it found that alerts cannot be delivered; NaN until a check "
            "completed (Slack not answered yet).",
            registry=self.registry,
        )
        self.delivery_path_ok.set(float("nan"))
        self.invalid_files = Gauge(
            "invmon_invalid_files",
            "Invariant files that failed validation.",
            registry=self.registry,
        )
        self.quarantined = Gauge(
            "invmon_quarantined",
            "Invariants held out of the schedule because a run overran its timeout.",
            registry=self.registry,
        )
        self.period = Gauge(
            "invmon_schedule_period_seconds",
            "Each loaded invariant's time between slots: alert rules compare the age of its "
            "last success with it.",
            ["invariant", "target"],
            registry=self.registry,
        )
        self.target_up = Gauge(
            "invmon_target_up",
            "1 when the target's database answered at its last run, 0 when it did not.",
            ["target"],
            registry=self.registry,
        )
        self.fleet_daemons = Gauge(
            "invmon_fleet_daemons",
            "Daemons this one saw alive on the state store at its last heartbeat (itself "
            "included); they share the schedule.",
            registry=self.registry,
        )
        self.slots_taken_over = Counter(
            "invmon_slots_taken_over",
            "Slots this daemon took over from a daemon that stopped renewing its lease.",
            registry=self.registry,
        )

    def observe_deliveries(self, by_state: dict[str, int], failures: int) -> None:
        for state in DELIVERY_STATES:
            self.deliveries.labels(state).set(by_state.get(state, 0))
        self.delivery_failures.set(failures)

    def observe_delivery_path(self, ok: bool | None, failures: int) -> None:
        """After a check of the alert path: its verdict (None: it could not complete) and the
        permanent failures counted so far, so the figures move without waiting for a
        delivery."""
        self.delivery_path_ok.set(float("nan") if ok is None else float(ok))
        self.delivery_failures.set(failures)

    def observe(self, result: RunResult, finished_at_epoch: float) -> None:
        labels = (result.invariant, result.target)
        self._target_of[result.invariant] = result.target
        self.status.labels(*labels).state(result.status)
        self.duration.labels(*labels).observe(result.duration_ms / 1000)
        if result.listing_ms is not None:
            self.listing.labels(*labels).observe(result.listing_ms / 1000)
        if result.status in ("ok", "violated") and result.count is not None:
            self.offending_rows.labels(*labels).set(result.count)
            self.last_success.labels(*labels).set(finished_at_epoch)
        if result.replica_lag is not None:
            self.replica_lag.labels(result.target).set(result.replica_lag)
        self.target_up.labels(result.target).set(0 if result.unreachable else 1)

    def scheduled(self, invariant: str, target: str, seconds: float) -> None:
        self._target_of[invariant] = target
        self.period.labels(invariant, target).set(seconds)

    def forget(self, invariant: str) -> None:
        target = self._target_of.pop(invariant, None)
        if target is None:
            return
        metrics = (
            self.status,
            self.offending_rows,
            self.duration,
            self.listing,
            self.last_success,
            self.period,
        )
        for metric in metrics:
            with contextlib.suppress(KeyError):
                metric.remove(invariant, target)

    def render(self) -> bytes:
        self._scrape.figures = self._figures.read()
        if self._scrape.figures is None:
            # The ledger's counts come from the alerts turn, which cannot read the store now
            # either: the last ones would pass for current through a whole outage.
            for state in DELIVERY_STATES:
                self.deliveries.labels(state).set(float("nan"))
        try:
            return bytes(generate_latest(self.registry))
        finally:
            self._scrape.figures = None


def build_info() -> dict[str, str]:
    """Which invmon this is: invmon_build_info's labels, and fields of the daemon's start-up
    log line, so that the two and `invmon --version` say the same."""
    return {"version": version, "commit": commit, "store_schema": str(schema_version())}


def _reading(counts: Callable[[], dict[str, int] | None], name: str) -> Callable[[], float]:
    return lambda: _count(counts, name)


def _count(counts: Callable[[], dict[str, int] | None], name: str) -> float:
    """A figure read from the state store at scrape time; NaN when the store fails."""
    value = (counts() or {}).get(name)
    return float("nan") if value is None else float(value)
