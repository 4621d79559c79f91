"""One evaluation of one invariant, start to finish: ask the replica gate, run the query,
store the run (which moves its incidents on and writes their events), count it in the
metrics and log it. The daemon's scheduler, `invmon run --once` and the tests all come here.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from monitor.clock import stamp
from monitor.config import DaemonConfig, Target
from monitor.daemon.databases import Databases
from monitor.daemon.services import Services
from monitor.execution.deadlines import CUT
from monitor.execution.quarantine import overrun, version_of
from monitor.execution.results import RunResult
from monitor.invariants.loader import Invariant
from monitor.store.claims import Claim, LostClaim
from monitor.store.context import IncidentContext
from monitor.store.records import StoredEvent
from monitor.store.state import RemovedWhileRunning

log = logging.getLogger("invmon.daemon")


def context_of(inv: Invariant, target: Target | None = None) -> IncidentContext:
    """What an incident opened by this invariant keeps of its file and of its target."""
    return IncidentContext.of(inv.header, inv.severity, inv.target, target)


@dataclass(frozen=True)
class Evaluated:
    result: RunResult
    events: int  # the events storing it wrote: the alerts turn is woken for them


class Evaluator:
    def __init__(
        self,
        databases: Databases,
        settings: DaemonConfig,
        services: Services,
        count_moved: Callable[[int, str, str], None] = lambda *_: None,
    ) -> None:
        self.databases = databases
        # Alerting's (Alerter.count_moved): the root of a violation whose count moved with
        # no event of its own to edit it.
        self.count_moved = count_moved
        self.settings = settings
        self.store, self.health = services.store, services.health
        self.metrics, self.clock = services.metrics, services.clock

    def evaluate(self, inv: Invariant, claim: Claim | None = None) -> Evaluated | None:
        """Run and store one evaluation; None when `claim` was taken over meanwhile (another
        daemon stores that slot's run, so this one is dropped). A run that overran its
        timeout on the database quarantines the invariant (quarantine.py)."""
        result = self._run(inv)
        finished = self.clock()
        # The database's own time: a wait for the replica gate, a connection or the store
        # (a network blip, a locked store) says nothing about what the query can be stopped by.
        if result.held_ms is not None:
            took = timedelta(milliseconds=result.held_ms)
            closed = (result.error or "").startswith(CUT)
            reason = overrun(took, inv, self.settings.overrun_margin, closed)
            if reason is not None and not (closed and self._silent(inv)):
                self.quarantine(inv, reason)
        events: list[StoredEvent] = []
        before = None
        with self.health.guard(f"recording a run of {inv.name}"):
            if result.status == "violated":
                before = self.store.open_violation(inv.name)
            try:
                events = self.store.record_run(
                    inv.name,
                    result,
                    finished,
                    inv.header.for_runs,
                    self.settings.cannot_evaluate_after,
                    context_of(
                        inv,
                        self.databases[inv.target].target if inv.target in self.databases else None,
                    ),
                    claim,
                )
            except LostClaim as lost:
                log.warning("run not stored: %s by another daemon", lost)
                return None
            except RemovedWhileRunning as removed:
                log.info(
                    "run of %s not stored: %s",
                    inv.name,
                    removed,
                    extra={"fields": {"invariant": inv.name}},
                )
                return None
        if (
            before is not None
            and before[1] != result.count
            and not any(e.incident_id == before[0] for e in events)
        ):
            # The root shows the count: no event of this violation edits it this time.
            with self.health.guard(f"updating the root of {inv.name}"):
                self.count_moved(before[0], inv.name, stamp(finished))
        self.metrics.observe(result, finished.timestamp())
        log.info(
            "evaluated %s: %s",
            inv.name,
            result.status,
            extra={
                "fields": {
                    "invariant": inv.name,
                    "status": result.status,
                    "count": result.count,
                    "ms": round(result.duration_ms),
                    **({"error": result.error} if result.error else {}),
                }
            },
        )
        return Evaluated(result, len(events))

    def _silent(self, inv: Invariant) -> bool:
        """After invmon closed a run's connection: whether the target does not answer a new
        one either (a paused server, a network that drops packets). That is no finding
        about the invariant, and quarantining every run in flight would hold them all out
        until someone lifted each; the run's error says what happened, and stays one."""
        if inv.target not in self.databases:
            return False
        down = self.databases[inv.target].runner.probe()
        if down is None:
            return False
        log.warning(
            "not quarantining %s: invmon closed its connection, and target %s does not "
            "answer a new one either (%s)",
            inv.name,
            inv.target,
            down,
            extra={"fields": {"invariant": inv.name}},
        )
        return True

    def quarantine(self, inv: Invariant, reason: str) -> bool:
        """Quarantine `inv` in the store, and say so once it is stored; False when the store
        failed (its health says that), to be tried again."""
        target = self.databases[inv.target].target if inv.target in self.databases else None
        stored = False
        with self.health.guard(f"quarantining {inv.name}"):
            self.store.quarantine(
                inv.name, version_of(inv), reason, self.clock(), context_of(inv, target)
            )
            stored = True
        if stored:
            log.error(
                "quarantined %s: %s; not scheduled again until its file changes or "
                "`invmon unquarantine %s`",
                inv.name,
                reason,
                inv.name,
                extra={"fields": {"invariant": inv.name}},
            )
        return stored

    def lift_changed_quarantines(self, current: Mapping[str, Invariant]) -> None:
        """A quarantine whose file has changed since is lifted (after each reload)."""
        with self.health.guard("reading the quarantined invariants", reads_only=True):
            for name, q in self.store.quarantined().items():
                inv = current.get(name)
                if inv is not None and version_of(inv) != q.version:
                    self.store.lift_quarantine(name, "its file changed", self.clock())
                    log.info("quarantine lifted: %s changed", name)

    def _run(self, inv: Invariant) -> RunResult:
        started = self.clock()
        clock = time.monotonic()

        def elapsed() -> float:
            return (time.monotonic() - clock) * 1000

        if inv.target not in self.databases:
            return RunResult.failed(
                inv.name,
                f"target {inv.target} has no database: set targets.{inv.target}.dsn",
                started_at=started,
                target=inv.target,
            )
        database = self.databases[inv.target]
        gate = database.gate.check(started)
        if gate.error is not None:
            return RunResult.failed(
                inv.name,
                gate.error,
                started_at=started,
                duration_ms=elapsed(),
                target=inv.target,
                unreachable=gate.unreachable,
            )
        if gate.stale is not None:
            return RunResult(
                inv.name,
                "stale",
                None,
                error=f"not evaluated: {gate.stale}",
                started_at=started,
                replica_lag=gate.lag,
                duration_ms=elapsed(),
                target=inv.target,
            )
        # A role that can change the database is refused unless the target allows it
        # (role_check.py): each run says so, as an error, so its invariant shows why.
        refusal = database.refusal()
        if refusal is not None:
            return RunResult.failed(
                inv.name,
                refusal,
                started_at=started,
                duration_ms=elapsed(),
                target=inv.target,
                replica_lag=gate.lag,
            )
        result = database.runner.run_one(inv)
        return dataclasses.replace(result, replica_lag=gate.lag, duration_ms=elapsed())
