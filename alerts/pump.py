"""The delivery pump: moves pending events into the delivery ledger (planning: fast, no
network) and performs the deliveries that are due (network), on the daemon's alerts thread,
so a slow Slack never delays an evaluation."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from alerts.alerter import Alerter
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
    ) -> None:
        self.health = health
        self.alerter = alerter
        self.store = store
        self.metrics = metrics
        self.clock = clock
        # One planner at a time in this process; taken without waiting (see dispatch).
        self._planning = threading.Lock()

    def dispatch(self, force: bool = False) -> list[StoredEvent]:
        """Plan pending events into the ledger; returns the events planned. A burst is held
        until quiet so it can become one digest (`force`: plan now)."""
        # Another thread (the alerts job or the watchdog's turn) planning now plans these
        # same events: this one goes straight on to delivering rather than wait behind it.
        if not self._planning.acquire(blocking=False):
            return []
        try:
            planned = self.alerter.plan(self.store.pending_events(limit=1000), force)
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
