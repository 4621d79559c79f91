"""What the daemon's parts share, as one value: the state store and its health, the
metrics, and the one clock. Built once by Daemon and handed to each part."""

from __future__ import annotations

from dataclasses import dataclass

from monitor.clock import Clock
from monitor.daemon.metrics import Metrics
from monitor.store.state import StateStore
from monitor.store.store_health import StoreHealth


@dataclass(frozen=True)
class Services:
    store: StateStore
    health: StoreHealth  # every store call goes through its guard
    metrics: Metrics
    clock: Clock
