"""The daemon's upkeep, each a job of its own (jobs.py): old runs and claims pruned past
`state.retention`, reminders and the daily summary planned. Each goes through the store's
guard, so a failing store turns /healthz red instead of ending the job's thread."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from alerts.alerter import Alerter
from monitor.daemon.scheduling import Scheduler
from monitor.daemon.services import Services

log = logging.getLogger("invmon.daemon")


@dataclass(frozen=True)
class Housekeeping:
    services: Services
    alerter: Alerter
    scheduler: Scheduler  # its fleet claims are pruned with the runs
    retention: timedelta  # state.retention

    def prune(self) -> None:
        with self.services.health.guard("pruning old runs"):
            before = self.services.clock() - self.retention
            removed = self.services.store.prune_runs(before)
            self.scheduler.claims.prune(before)
            if removed:
                log.info("pruned old runs", extra={"fields": {"runs": removed}})

    def summarise(self) -> None:
        with self.services.health.guard("planning the daily summary"):
            self.alerter.summarise(self.services.clock())

    def remind(self) -> None:
        with self.services.health.guard("planning reminders"):
            self.alerter.remind()
