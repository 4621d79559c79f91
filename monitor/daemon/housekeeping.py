"""The daemon's upkeep, each a job of its own (jobs.py): old runs and finished alert
deliveries pruned past `state.retention`, finished fleet claims past CLAIMS_KEPT, reminders
and the daily summary planned. Each goes through the store's guard, so a failing store turns
/healthz red instead of ending the job's thread."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from alerts.alerter import Alerter
from monitor.daemon.scheduling import Scheduler
from monitor.daemon.services import Services
from monitor.store.claims import CLAIMS_KEPT

log = logging.getLogger("invmon.daemon")


@dataclass(frozen=True)
class Housekeeping:
    services: Services
    alerter: Alerter
    scheduler: Scheduler  # its fleet claims are pruned by prune_claims
    retention: timedelta  # state.retention
    # Whether the daemon goes on: a prune stops between batches once it stops, rather than
    # run on into the store's closing (and a "store failed" line after "stopped").
    going_on: Callable[[], bool]

    def prune(self) -> None:
        with self.services.health.guard("pruning old runs and deliveries"):
            before = self.services.clock() - self.retention
            removed = self.services.store.prune_runs(before, self.going_on)
            deliveries = self.alerter.prune(before, self.going_on)
            if removed or deliveries:
                log.info(
                    "pruned old runs and deliveries",
                    extra={"fields": {"runs": removed, "deliveries": deliveries}},
                )

    def prune_claims(self) -> None:
        with self.services.health.guard("pruning finished claims"):
            self.scheduler.claims.prune(self.services.clock() - CLAIMS_KEPT)

    def summarise(self) -> None:
        with self.services.health.guard("planning the daily summary"):
            self.alerter.summarise(self.services.clock())

    def remind(self) -> None:
        with self.services.health.guard("planning reminders"):
            self.alerter.remind()
