"""Replica gating: an invariant is evaluated only on data fresh enough to trust.

Before a run the gate reads the monitored server's recovery state and lag (replica.py),
at most once a second however many invariants run in that second, and opens or resolves the
single `replica_stale` incident only when staleness changes, not with a write per run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
from psycopg_pool import PoolTimeout

from monitor.replica import is_stale
from monitor.runner import Runner, describe_error
from monitor.state import REPLICA_SUBJECT, StateStore
from monitor.store_health import StoreHealth

FRESH_FOR = timedelta(seconds=1)  # one reading of the lag serves the runs of one second


@dataclass(frozen=True)
class Gate:
    """What the gate says about running now."""

    lag: float | None = None
    stale: str | None = None  # why the data is too old to evaluate
    error: str | None = None  # why the replica status could not be read


class ReplicaGate:
    def __init__(
        self, runner: Runner, store: StateStore, max_lag: timedelta, health: StoreHealth
    ) -> None:
        self.health = health
        self.runner = runner
        self.store = store
        self.max_lag = max_lag
        self._lock = threading.Lock()
        self._read: tuple[datetime, Gate] | None = None
        self._recorded: bool | None = None  # the staleness last written to the store

    def check(self, now: datetime) -> Gate:
        with self._lock:
            if self._read is not None and now - self._read[0] < FRESH_FOR:
                return self._read[1]
            gate = self._measure()
            self._read = (now, gate)
            if gate.error is None and (gate.stale is not None) != self._recorded:
                stale = gate.stale is not None
                with self.health.guard("recording the replica's staleness"):
                    self.store.record_condition(
                        "replica_stale", REPLICA_SUBJECT, stale, now, gate.stale
                    )
                    self._recorded = stale  # written: else tried again at the next check
            return gate

    def _measure(self) -> Gate:
        try:
            status = self.runner.replica_status()
        except (psycopg.Error, PoolTimeout) as exc:
            reason = self.runner.probe() or describe_error(exc)
            return Gate(error=f"cannot read replica status: {reason}")
        lag = status.lag_seconds
        if not is_stale(status, self.max_lag):
            return Gate(lag=lag)
        shown = "unknown" if lag is None else f"{lag:.0f}s"
        return Gate(
            lag=lag,
            stale=f"replica lag {shown} exceeds max_replica_lag "
            f"{self.max_lag.total_seconds():.0f}s",
        )
