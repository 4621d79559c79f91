"""A real daemon's parts, made from its config: the store's health, the targets' databases
with their masking key, the definitions and the alerter, then the Daemon that wires them."""

from __future__ import annotations

import secrets
from collections.abc import Callable

from alerts.alerter import Alerter
from alerts.transport import Transport
from monitor.clock import Clock, utc_now
from monitor.config import Config
from monitor.daemon.daemon import Daemon
from monitor.daemon.databases import Databases
from monitor.daemon.liveness import Liveness
from monitor.daemon.process import SignalLoop
from monitor.invariants.definitions import Definitions
from monitor.store.state import StateStore
from monitor.store.store_health import StoreHealth


def stored_key(store: StateStore, name: str) -> bytes:
    """A random key made once and kept in the state store, so every daemon sharing it, and
    every restart, masks a value the same way."""
    return bytes.fromhex(store.kept_value(name, lambda: secrets.token_hex(32)))


def assemble(
    config: Config,
    dsn: str | None,
    store: StateStore,
    clock: Clock = utc_now,
    transport: Transport | None = None,
    signals: SignalLoop | None = None,
    reread: Callable[[], Config] | None = None,
) -> Daemon:
    """The parts a real daemon needs, from its config; `dsn` is the default target's
    (from --dsn or INVMON_DSN), the other targets' come from `targets:`."""
    where = "state.dsn" if config.state.dsn else f"state.path {str(config.state.path)!r}"
    health = StoreHealth(where)
    redaction = config.redact.redaction(
        None if config.redact.key else stored_key(store, "redaction_key")
    )
    # The supervisor records the process's pauses here, and a run's time on the database is
    # judged past them: the liveness is the runners' as much as the daemon's.
    liveness = Liveness()
    databases = Databases.build(
        config, store, health, redaction, dsn or None, clock, liveness.resumed
    )
    definitions = Definitions()
    alerter = Alerter(
        store,
        config.slack,
        definitions.describe,
        clock,
        transport,
        several_targets=len(databases.by_name) > 1,
    )
    return Daemon(
        config, store, databases, alerter, definitions, clock, health, signals, reread, liveness
    )
