"""The monitored databases of one daemon, one per target, kept apart: each has its own pool
and concurrency (its Runner), its own replica gate, and its own workers, so a target that is
down or stale holds only its own invariants back, never another target's.

Each also knows what the role it connects as can do (role_check.py), read at start and at
every reload (and before a run, if the database did not answer then): a target whose role
can change the database is not run unless its config allows it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from monitor.clock import Clock, utc_now
from monitor.config import Config, Target
from monitor.daemon.replica_gate import ConditionRecorder, ReplicaGate
from monitor.durations import precise_duration
from monitor.execution.deadlines import never_paused
from monitor.execution.redaction import Redaction
from monitor.execution.runner import Runner, describe_error, interrupt_all
from monitor.fence.role_check import RoleVerdict, verdict
from monitor.invariants.header import DEFAULT_TARGET
from monitor.invariants.loader import Invariant
from monitor.problems import Problem
from monitor.singleflight import SingleFlight
from monitor.store.context import IncidentContext
from monitor.store.state import StateStore
from monitor.store.store_health import StoreHealth

# The longest /readyz waits for a target to answer: inside the shipped readinessProbe's 5 s.
READY_WAIT = 3.0


class Database:
    """One target's parts."""

    def __init__(self, target: Target, runner: Runner, gate: ReplicaGate) -> None:
        self.target = target
        self.runner = runner
        self.gate = gate
        self.workers: ThreadPoolExecutor | None = None
        self.role: RoleVerdict | None = None  # None until read (see check_role)
        self._reading_role: SingleFlight[RoleVerdict] = SingleFlight()
        self._probing: SingleFlight[str | None] = SingleFlight()

    @property
    def name(self) -> str:
        return self.target.name

    def probe(self) -> str | None:
        """Why the database cannot be reached, or None; READY_WAIT at most. A database that
        does not answer held /readyz for its connect timeout (10 s by default), past the
        shipped readinessProbe's 5 s: the probe failed without the reason, and one silent
        target of several made the whole daemon not ready."""
        try:
            return self._probing.within(self.runner.probe, READY_WAIT, f"invmon-probe-{self.name}")
        except TimeoutError:
            allowed = precise_duration(self.target.database.connect_timeout)
            return (
                f"no answer within {READY_WAIT:g}s (connecting may take up to "
                f"database.connect_timeout, {allowed})"
            )

    def check_role(self) -> RoleVerdict:
        """Read what the role can do, now; psycopg's error or PoolTimeout when the database
        does not answer (the verdict is then unknown, and read again before a run)."""
        self.role = None
        facts = self.runner.role_facts()
        self.role = verdict(
            self.name,
            facts,
            self.target.allow_privileged_role,
            f"set {self.target.allowance_field}: true",
        )
        return self.role

    def refusal(self) -> str | None:
        """Why this target's invariants must not run now (its role can change the database,
        or what it can do is unknown); None when they may. Read once if never read yet."""
        role = self.role
        if role is None:
            wait = 3 * self.runner.database.connect_timeout.total_seconds() + 10
            try:
                role = self._reading_role.run(self.check_role, wait)
            except (psycopg.Error, PoolTimeout) as exc:
                reason = describe_error(exc) if isinstance(exc, psycopg.Error) else str(exc)
                return (
                    f"target {self.name}: not running its invariants until what its role can "
                    f"do is known; reading it failed: {reason}"
                )
            if role is None:
                return (
                    f"target {self.name}: what its role can do was still being read after "
                    f"{wait:.0f}s"
                )
        return role.refusal()


class Databases:
    def __init__(self, databases: Mapping[str, Database]) -> None:
        self.by_name = dict(databases)
        self._down: dict[str, str] = {}  # from the last readiness check

    @classmethod
    def build(
        cls,
        config: Config,
        store: StateStore,
        health: StoreHealth,
        redaction: Redaction,
        default_dsn: str | None = None,
        clock: Clock = utc_now,
        resumed: Callable[[float], float] = never_paused,
    ) -> Databases:
        """One Database per target with a DSN (`default_dsn` overrides the default's).
        `resumed`: the daemon's record of the process's pauses (Liveness.resumed), which a
        run's time on the database is judged past."""
        built = {}
        for name, target in config.resolved_targets().items():
            dsn = default_dsn if name == DEFAULT_TARGET and default_dsn else target.dsn
            if not dsn:
                continue
            runner = Runner(
                dsn,
                target.concurrency,
                target.database,
                track_keys=config.daemon.track_keys,
                allow=config.fence.allowances(),
                limits=config.limits.rows(),
                redaction=redaction,
                target=name,
                clock=clock,
                resumed=resumed,
                overrun_margin=config.daemon.overrun_margin,
            )
            runner.open()
            context = IncidentContext(
                "critical",
                f"invmon evaluates the invariants of target {name}",
                target.owner,
                None,
                None,
                name,
                target.channel,
            )
            recorder = ConditionRecorder(store, health, name, context)
            gate = ReplicaGate(runner, target.max_replica_lag, recorder)
            built[name] = Database(target, runner, gate)
        return cls(built)

    def __getitem__(self, name: str) -> Database:
        return self.by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def start_workers(self) -> None:
        for database in self.by_name.values():
            database.workers = ThreadPoolExecutor(
                database.target.concurrency, f"invmon-run-{database.name}"
            )

    def submit(self, inv: Invariant, work: Any, *args: Any) -> Future[Any] | None:
        database = self.by_name.get(inv.target)
        if database is None or database.workers is None:
            return None
        try:
            return database.workers.submit(work, *args)
        except RuntimeError:  # shut down by a stop under way: the caller hands the claim back
            return None

    def vet(self, invariants: Sequence[Invariant]) -> dict[str, list[Problem]]:
        """The fence's word on each invariant against its own target's catalog; the targets
        side by side, so one that is slow to answer holds up none of the others."""
        groups = {
            name: [i for i in invariants if i.target == name]
            for name in self.by_name
            if any(i.target == name for i in invariants)
        }
        refused: dict[str, list[Problem]] = {}
        if not groups:
            return refused
        with ThreadPoolExecutor(len(groups), "invmon-vet") as pool:
            for found in pool.map(lambda n: self.by_name[n].runner.vet(groups[n]), groups):
                refused.update(found)
        return refused

    def check_roles(self) -> dict[str, RoleVerdict | str]:
        """What each target's role can do, read again (at start and at every reload), side by
        side; a target that does not answer has why instead (its role is read before a
        run)."""
        found: dict[str, RoleVerdict | str] = {}
        if not self.by_name:
            return found

        def read(database: Database) -> RoleVerdict | str:
            # A refused port is said at once, not after the pool's whole connect timeout.
            database.role = None
            down = database.runner.probe()
            if down is not None:
                return down
            try:
                return database.check_role()
            except (psycopg.Error, PoolTimeout) as exc:
                return describe_error(exc) if isinstance(exc, psycopg.Error) else str(exc)

        with ThreadPoolExecutor(len(self.by_name), "invmon-role") as pool:
            for name, answer in zip(
                self.by_name, pool.map(read, self.by_name.values()), strict=True
            ):
                found[name] = answer
        return found

    def role_notes(self) -> list[str]:
        """For the status page and /readyz: each target refused for its role, and each one
        running as a privileged role because its config allows it."""
        notes = []
        for database in self.by_name.values():
            role = database.role
            if role is not None and (note := role.refusal() or role.allowance()):
                notes.append(note)
        return notes

    def not_ready(self) -> dict[str, str]:
        """Each target that cannot be evaluated now, with why, saying which it is: refused
        for its role, `unreachable` (it does not answer), or `stale` (its replica was past
        max_replica_lag at its last run, so every run of it is `stale`, not evaluated)."""
        problems = {}
        refused = {
            name: database.role.short()
            for name, database in self.by_name.items()
            if database.role is not None and database.role.refused
        }
        asked = [name for name in self.by_name if name not in refused]
        # Side by side: one after another, each stalled target added its connect timeout to
        # the answer, and a probe's own timeout could fail on a daemon that was ready.
        reasons: dict[str, str | None] = {}
        if asked:
            with ThreadPoolExecutor(len(asked), "invmon-ready") as pool:
                probes = pool.map(lambda n: self.by_name[n].probe(), asked)
                reasons = dict(zip(asked, probes, strict=True))
        for name, database in self.by_name.items():
            if name in refused:
                problems[name] = refused[name]
            elif (reason := reasons.get(name)) is not None:
                problems[name] = f"unreachable: {reason}"
            elif (stale := database.gate.stale()) is not None:
                problems[name] = f"stale: {stale}"
        return problems

    def readiness(self) -> str | None:
        """None when at least one target can be evaluated (`partly` names the others),
        else why none can. A stale target counts as one that cannot: like an unreachable
        one, none of its invariants is evaluated."""
        self._down = down = self.not_ready()
        if self.by_name and len(down) == len(self.by_name):
            return "no target can be evaluated: " + _listed(down)
        return None

    def partly(self) -> str | None:
        """The targets the last readiness check found down or stale, while others work;
        and those running as a privileged role because their config allows it."""
        notes = [f"not evaluating: {_listed(self._down)}"] if self._down else []
        notes += [
            note
            for d in self.by_name.values()
            if d.role is not None and (note := d.role.allowance())
        ]
        return "\n".join(notes) or None

    def interrupt(self, within: float) -> int:
        """No run starts any more, and the runs in flight are cancelled (interrupt_all)."""
        return interrupt_all([d.runner for d in self.by_name.values()], within, cut=False)

    def stop_workers(self) -> None:
        for database in self.by_name.values():
            if database.workers is not None:
                database.workers.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        for database in self.by_name.values():
            database.runner.close()


def _listed(down: Mapping[str, str]) -> str:
    return "; ".join(f"{name} ({why})" for name, why in sorted(down.items()))
