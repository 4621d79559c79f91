"""Replica gating: an invariant is evaluated only on data fresh enough to trust.

Before a run the gate (the checker: it reads) reads the monitored server's recovery state
and lag (replica.py), at most once a second however many invariants run in that second; its
recorder (it writes) opens or resolves the target's single `replica_stale` and
`target_unreachable` incidents only when they change, not with a write per run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
from psycopg_pool import PoolTimeout

from monitor.execution.replica import is_stale
from monitor.execution.runner import Runner, describe_error
from monitor.singleflight import SingleFlight
from monitor.store.context import IncidentContext
from monitor.store.state import StateStore, replica_subject, target_subject
from monitor.store.store_health import StoreHealth

FRESH_FOR = timedelta(seconds=1)  # one reading of the lag serves the runs of one second


@dataclass(frozen=True)
class Gate:
    """What the gate says about running now."""

    lag: float | None = None
    stale: str | None = None  # why the data is too old to evaluate
    error: str | None = None  # why the replica status could not be read
    unreachable: bool = False  # the error is that the database does not answer


class ConditionRecorder:
    """The target's two conditions in the store, written only when a reading changes one.
    Called by one thread at a time (the gate's single flight), so its two fields have one
    writer; it takes no lock."""

    def __init__(
        self,
        store: StateStore,
        health: StoreHealth,
        target: str = "default",
        context: IncidentContext | None = None,
    ) -> None:
        self.store = store
        self.health = health
        self.target = target
        self.context = context  # where its incidents go: the target's channel and owner
        self.stale: bool | None = None  # the staleness last written to the store
        self.down: bool | None = None  # the unreachability last written to the store

    def record(self, gate: Gate, now: datetime) -> None:
        if gate.error is None and (gate.stale is not None) != self.stale:
            stale = gate.stale is not None
            with self.health.guard("recording the replica's staleness"):
                self.store.record_condition(
                    "replica_stale",
                    replica_subject(self.target),
                    stale,
                    now,
                    gate.stale,
                    self.context,
                )
                self.stale = stale  # written: else tried again at the next check
        # The first reading is written whatever it is: a target_unreachable incident
        # opened before a restart is closed by the first run that reaches the target.
        if gate.unreachable != self.down:
            with self.health.guard("recording whether the target answers"):
                self.store.record_condition(
                    "target_unreachable",
                    target_subject(self.target),
                    gate.unreachable,
                    now,
                    gate.error,
                    self.context,
                )
                self.down = gate.unreachable


class ReplicaGate:
    def __init__(self, runner: Runner, max_lag: timedelta, recorder: ConditionRecorder) -> None:
        self.target = recorder.target
        self.runner = runner
        self.max_lag = max_lag
        self.recorder = recorder
        self._lock = threading.Lock()  # guards `_read` only, never held across a call
        self._flight: SingleFlight[Gate] = SingleFlight()
        self._read: tuple[datetime, Gate] | None = None

    def check(self, now: datetime) -> Gate:
        """The gate for a run at `now`: one reading serves every run of a second, and the
        runs that arrive while it is read wait for it (bounded) rather than read again."""
        with self._lock:
            if self._read is not None and now - self._read[0] < FRESH_FOR:
                return self._read[1]
        wait = 3 * self.runner.database.connect_timeout.total_seconds() + 10
        gate = self._flight.run(lambda: self._read_and_record(now), wait)
        if gate is None:
            return Gate(
                error=f"the replica status of target {self.target} was still being "
                f"read by another run after {wait:.0f}s"
            )
        return gate

    def stale(self) -> str | None:
        """Why the target's data was too old to evaluate at its last reading (the last run's
        gate), or None: for /readyz, which must not read the lag itself (a probe answers
        in moments; a reading is the gate's job, once a second at most)."""
        with self._lock:
            return self._read[1].stale if self._read is not None else None

    def _read_and_record(self, now: datetime) -> Gate:
        # One thread at a time (the single flight); the store is written with no lock held.
        gate = self._measure()
        with self._lock:
            self._read = (now, gate)
        self.recorder.record(gate, now)
        return gate

    def _measure(self) -> Gate:
        # A target that was down, or not yet seen up, is first probed with a connection of
        # its own: the pool would wait its whole timeout for a connection that a refused
        # port refuses at once. A target known to be up costs no extra connection.
        if self.recorder.down is not False:
            down = self.runner.probe()
            if down is not None:
                return Gate(error=f"target {self.target} does not answer: {down}", unreachable=True)
        try:
            status = self.runner.replica_status()
        except (psycopg.Error, PoolTimeout) as exc:
            down = self.runner.probe()
            if down is not None:
                return Gate(error=f"target {self.target} does not answer: {down}", unreachable=True)
            return Gate(error=f"cannot read replica status: {describe_error(exc)}")
        lag = status.lag_seconds
        if not is_stale(status, self.max_lag):
            return Gate(lag=lag)
        shown = "unknown" if lag is None else f"{lag:.0f}s"
        return Gate(
            lag=lag,
            stale=f"replica lag {shown} exceeds max_replica_lag "
            f"{self.max_lag.total_seconds():.0f}s",
        )
