"""What the daemon answers about itself: /healthz (the store works and every part moves),
/readyz (a target to evaluate and a path for the alerts), what the dead man's switch
reports, and the routes the listener serves (probes, metrics, Slack actions, the page).

Reads only: each answer is computed from the parts' own state at the time it is asked.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from alerts.delivery_health import DeliveryHealth
from alerts.interactions import Interactions
from alerts.socket_mode import SocketModeReceiver
from monitor.config import Config
from monitor.daemon.databases import Databases
from monitor.daemon.http import Probe, Routes
from monitor.daemon.jobs import Jobs
from monitor.daemon.liveness import Liveness
from monitor.daemon.services import Services
from monitor.invariants.definitions import Definitions
from monitor.web.page import StatusPage

log = logging.getLogger("invmon.daemon")


@dataclass(frozen=True)
class Probes:
    config: Config
    services: Services
    databases: Databases
    definitions: Definitions
    delivery: DeliveryHealth  # can alerts reach anyone
    interactions: Interactions
    liveness: Liveness
    jobs: Jobs
    buttons: SocketModeReceiver | None = None  # Socket Mode, when slack.app_token is set

    def routes(self) -> Routes:
        http = self.config.http
        if http.listen is not None and not http.page_is_local and not http.page_token:
            log.warning(
                "the status page is not served: http.listen is not a loopback address and "
                "http.page_token is not set"
            )
        return Routes(
            healthz=Probe(self.health_problem),
            readyz=Probe(self.readiness, self.readiness_note),
            metrics=self.services.metrics.render,
            slack_actions=self.interactions.http if self.config.slack.signing_secret else None,
            page=StatusPage(
                self.services.store,
                lambda: self.definitions.current,
                http,
                self.services.clock,
                roles=self.databases.role_notes,
            ),
        )

    def readiness(self) -> str | None:
        """/readyz: a target to evaluate, a path for the alerts (DeliveryHealth), and an app
        token Slack takes, when one is set."""
        buttons = self.buttons.problem() if self.buttons else None
        found = [p for p in (self.databases.readiness(), self.delivery.problem(), buttons) if p]
        return "; ".join(found) or None

    def readiness_note(self) -> str | None:
        """Said under /readyz's "ok": the targets that cannot be evaluated (unreachable,
        refused or stale, each saying which), an alert path not yet verified, Slack not
        reached yet for Socket Mode."""
        buttons = self.buttons.note() if self.buttons else None
        found = [n for n in (self.databases.partly(), self.delivery.note(), buttons) if n]
        return "\n".join(found) or None

    def switch_problem(self) -> str | None:
        """What the dead man's switch reports as a failure: /healthz's reason, or alerts
        that cannot reach anyone (the switch is then the one path left to say so)."""
        return self.health_problem() or self.delivery.problem()

    def health_problem(self) -> str | None:
        """/healthz: None while the store works and every part of the daemon moves."""
        if self.services.health.problem is not None:
            return self.services.health.problem
        if not self.jobs.running:
            return "scheduler is not running"
        return self.liveness.problem()
