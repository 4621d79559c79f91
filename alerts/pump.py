"""The delivery pump: moves pending events into the delivery ledger (planning: fast, no
network) and performs the deliveries that are due (network), on the daemon's alerts thread,
so a slow Slack never delays an evaluation."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from datetime import datetime, timedelta

from alerts.alerter import Alerter
from alerts.bursts import Decision
from alerts.observed import DeliveryMetrics
from monitor.clock import Clock
from monitor.execution.rows import key_values
from monitor.store.records import StoredEvent
from monitor.store.state import StateStore
from monitor.store.store_health import StoreHealth

log = logging.getLogger("invmon.daemon")


class DeliveryPump:
    def __init__(
        self,
        alerter: Alerter,
        store: StateStore,
        metrics: DeliveryMetrics,
        clock: Clock,
        health: StoreHealth,
        running: Callable[[], Collection[str]] = frozenset,
    ) -> None:
        """`running`: the invariants with a run due or in flight on this daemon (a burst in
        their channels may still be arriving: alerts/bursts.py)."""
        self.health = health
        self.alerter = alerter
        self.store = store
        self.metrics = metrics
        self.clock = clock
        self.running = running
        # Set when an alerts turn has work now (a run stored events, or ended while a batch
        # waited for it); the alerts thread waits on it between turns (daemon/jobs.py).
        self.woken = threading.Event()
        # One planner at a time in this process; taken without waiting (see dispatch).
        self._planning = threading.Lock()
        # Guards `_held_until`: when the batch the last planning held goes at the latest
        # (None: nothing held). Written by the planner, read by the threads that wake it.
        self._held = threading.Lock()
        self._held_until: datetime | None = None

    def dispatch(self, force: bool = False) -> list[StoredEvent]:
        """Plan pending events into the ledger; returns the events planned. A burst arriving
        in a channel is held so it can become one digest (`force`: plan everything now)."""
        # Another thread (the alerts job or the watchdog's turn) planning now plans these
        # same events: this one goes straight on to delivering rather than wait behind it.
        if not self._planning.acquire(blocking=False):
            return []
        try:
            pending = self.store.pending_events(limit=1000)
            decision = Decision(tuple(pending), None)
            if not force:
                decision = self.alerter.hold(pending, self.running())
            planned = self.alerter.plan(decision.go)
            with self._held:
                self._held_until = decision.held_until
        finally:
            self._planning.release()
        for event in planned:
            # Where its root goes and which rule chose it, so a misrouted alert can be
            # explained from the log alone (alerts/routing.py).
            route = self.alerter.route(self.store.incident(event.incident_id), event.invariant)
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
                        "channel": route.channel,
                        "route": route.why,
                        **event.payload,
                        # Keys are stored as JSON text; logged as the values they are.
                        **(
                            {"keys": [key_values(k) for k in event.payload["keys"]]}
                            if isinstance(event.payload.get("keys"), list)
                            else {}
                        ),
                    }
                },
            )
        return planned

    def holding(self) -> bool:
        """Whether the last planning held a batch back."""
        with self._held:
            return self._held_until is not None

    def ran(self, wrote_events: bool) -> None:
        """A run ended (stored, or not): wake the alerts turn when it wrote events, or when
        a batch is held, which may have waited for this very run."""
        if wrote_events or self.holding():
            self.woken.set()

    def next_turn_in(self, every: float) -> float:
        """Seconds until the alerts turn is next needed: when the held batch goes at the
        latest, or `every` (deliveries due later, retries) if sooner."""
        with self._held:
            until = self._held_until
        if until is None:
            return every
        return min(every, max(0.0, (until - self.clock()).total_seconds()))

    def deliver(self, force: bool = False) -> int:
        """Plan what is pending, then perform the deliveries that are due."""
        handled = 0
        with self.health.guard("planning and delivering alerts"):
            self.dispatch(force)
            handled = self.alerter.deliver()
            self.metrics.observe_deliveries(
                self.alerter.ledger.counts(), self.alerter.worker.failures
            )
        return handled

    def deliver_until_idle(self, seconds: float) -> None:
        """For burst mode and shutdown: deliver until nothing is due, within a deadline."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.deliver(force=True)
            if self.health.problem is not None:
                return  # the store does not work: nothing to deliver from
            due = self.alerter.ledger.next_due()
            if due is None or due > self.clock() + timedelta(seconds=seconds):
                return
            # Never a hot loop: at least a short pause between rounds, at most 0.2s.
            wait = (due - self.clock()).total_seconds()
            time.sleep(min(0.2, max(0.02, wait)))
