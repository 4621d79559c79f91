"""What alerts report about themselves, as the narrow protocol they own: the daemon's
Prometheus metrics (daemon/metrics.py) satisfy it, so alerts never import the daemon."""

from __future__ import annotations

from typing import Protocol


class DeliveryMetrics(Protocol):
    def observe_deliveries(self, by_state: dict[str, int], failures: int) -> None:
        """The ledger's deliveries by state, and the permanent failures counted so far."""

    def observe_delivery_path(self, ok: bool | None, failures: int) -> None:
        """A check of the alert path: its verdict (None: it could not complete)."""
