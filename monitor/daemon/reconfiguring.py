"""SIGHUP re-reads the config file: what can change live is taken at once (config/changes.py
says which keys), every other change is logged by key as waiting for a restart, and a file
that no longer loads is said in one line and changes nothing.

Each part reads its settings through one attribute when it uses them, so taking a new
value is one assignment, atomic for the threads that read it: a run in flight finishes with
the settings it started with.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from alerts.alerter import Alerter
from alerts.delivery_health import DeliveryHealth
from alerts.interactions import Interactions
from monitor.config import Config, ConfigError
from monitor.config.changes import config_change, with_live
from monitor.daemon.databases import Databases
from monitor.daemon.reloading import Reloader
from monitor.logs import setup_logging
from monitor.web.page import StatusPage

log = logging.getLogger("invmon.daemon")


@dataclass
class Reconfigurer:
    reread: Callable[[], Config]  # the file and flags the daemon started from, read again
    alerter: Alerter
    interactions: Interactions
    reloader: Reloader
    databases: Databases
    page: Callable[[], StatusPage | None]  # the listener's page, once it listens
    delivery: DeliveryHealth  # checks the channels the config names

    def reconfigure(self, current: Config) -> Config:
        """The config to run with from now on: `current` with the new file's live keys."""
        try:
            new = self.reread()
        except ConfigError as exc:
            log.error("SIGHUP: the config was not re-read, the one loaded stays: %s", exc)
            return current
        change = config_change(current, new)
        for key in change.restart:
            log.warning("SIGHUP: config %s changed; it takes effect after a restart", key)
        if not change.live:
            if not change.restart:
                log.info("SIGHUP: the config is unchanged")
            return current
        # Said before it is applied: a new log level may silence this very line.
        log.info("SIGHUP: config taken live: %s", ", ".join(change.live))
        merged = with_live(current, new)
        self._apply(merged)
        return merged

    def _apply(self, config: Config) -> None:
        setup_logging(config.log.format, config.log.level)
        self.alerter.config = config.slack
        self.interactions.config = config.slack
        self.delivery.reconfigure(config)
        self.reloader.config = config
        for name, target in config.resolved_targets().items():
            if name in self.databases.by_name:
                self.databases.by_name[name].runner.database = target.database
        page = self.page()
        if page is not None:
            page.settle(config.http)
