"""`invmon check` (every invariant once) and `invmon run` (the daemon)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import IO

import click

from monitor.cli.options import (
    CONFIG,
    DSN,
    INVARIANTS,
    SELECT,
    TABLE_ALIAS,
    TARGETS,
    InvmonError,
    fail,
    output_format,
)
from monitor.cli.render import (
    problems_text,
    results_document,
    results_markdown,
    results_table,
    to_json,
)
from monitor.cli.resolving import (
    known_targets,
    open_store,
    require,
    require_every_target,
    require_targets,
    resolve_config,
    store_where,
)
from monitor.config import Config, ConfigError
from monitor.execution.check import CheckOutcome, run_check
from monitor.execution.results import exit_code
from monitor.invariants.selection import NothingSelected
from monitor.store.storage import StoreInUse, hold_single_daemon
from monitor.version import commit, version


@click.command()
@CONFIG
@DSN
@INVARIANTS
@SELECT
@TARGETS
@click.option("--only", multiple=True, metavar="NAME", hidden=True)  # the old spelling
@output_format("text", "json", "markdown", aliases=TABLE_ALIAS)
@click.option(
    "--counts-only",
    is_flag=True,
    help="Statuses and counts only: no row values and no database error text (which can "
    "quote data). For previews whose reader may not read the data.",
)
@click.option(
    "--show-values",
    is_flag=True,
    help="Print values that `redact:` would mask (emails, card numbers, …) as they are.",
)
@click.option(
    "--allow-privileged-role",
    is_flag=True,
    help="Run even as a role that can change the database (a superuser, an owner, …), e.g. "
    "your own on a development database. Without it such a target is refused, as by the "
    "daemon; deploy/readonly-role.sql makes a role that needs no such flag.",
)
def check(
    config_path: Path | None,
    dsn: str | None,
    invariants_dir: Path | None,
    selectors: tuple[str, ...],
    only: tuple[str, ...],
    fmt: str,
    counts_only: bool,
    show_values: bool,
    allow_privileged_role: bool,
    targets: tuple[str, ...],
) -> None:
    """Evaluate every invariant once and exit 0 (all hold), 1 (violated) or 2 (error)."""
    config = resolve_config(config_path, dsn, invariants_dir)
    require_targets(config, "check")
    known_targets(config, targets)
    if show_values:
        click.echo(
            "invmon: warning: --show-values prints offending rows unmasked; they may hold "
            "personal data",
            err=True,
        )
    try:
        outcome = run_check(
            config, config.invariants, selectors + only, show_values, targets, allow_privileged_role
        )
    except NothingSelected as exc:
        fail(str(exc))
    if counts_only:
        outcome = outcome.counts_only()
    if fmt == "json":
        document = results_document(
            outcome.results, outcome.invariants, outcome.problems, routes_of(config, outcome)
        )
        click.echo(to_json(document))
    elif fmt == "markdown":
        click.echo(results_markdown(outcome.results, outcome.problems))
    else:
        if outcome.problems:
            click.echo(problems_text(outcome.problems), err=True)
        click.echo(results_table(outcome.results))
    sys.exit(exit_code(outcome.results))


def routes_of(config: Config, outcome: CheckOutcome) -> dict[str, tuple[str, str]]:
    """Each checked invariant's Slack channel and the rule that chose it, as the daemon
    would route an incident it opened."""
    from alerts.routing import route
    from monitor.store.records import IncidentContext

    targets = config.resolved_targets()
    routes = {}
    for inv in outcome.invariants:
        # As monitor.daemon.evaluation.context_of says it, without loading the daemon (its
        # scheduler and metrics) into a one-shot `check`.
        context = IncidentContext.of(inv.header, inv.severity, inv.target, targets.get(inv.target))
        chosen = route(config.slack, context)
        routes[inv.name] = (chosen.channel, chosen.why)
    return routes


@click.command()
@CONFIG
@DSN
@INVARIANTS
@click.option("--once", is_flag=True, help="Evaluate every invariant once, store it, and exit.")
def run(config_path: Path | None, dsn: str | None, invariants_dir: Path | None, once: bool) -> None:
    """Run the daemon: evaluate every invariant on its schedule until SIGTERM."""
    from monitor.daemon.assembly import assemble
    from monitor.daemon.process import SignalLoop, Stopped
    from monitor.logs import setup_logging

    config = resolve_config(config_path, dsn, invariants_dir)
    require(config)  # a daemon starts with every reference set, or not at all
    setup_logging(config.log.format, config.log.level)
    # Which invmon this is, first: before anything slow or anything that can fail.
    logging.getLogger("invmon.daemon").info(
        "invmon starting", extra={"fields": {"version": version, "commit": commit}}
    )
    require_every_target(config)
    if once:
        sys.exit(_run_once(config))
    signals = SignalLoop()
    # The handlers go in before anything slow (reaching the state store, loading and
    # vetting the invariants): a SIGTERM meanwhile stops cleanly, a SIGHUP waits its turn.
    with signals.installed():
        try:
            lock = _single_daemon_lock(config)
            logging.getLogger("invmon.daemon").info(
                "opening the state store (%s)", store_where(config)
            )
            store = signals.wait_for(lambda: open_store(config), "reaching the state store")
        except Stopped as stopped:
            logging.getLogger("invmon.daemon").info("stopped before start, %s", stopped.doing)
            sys.exit(0)
        try:
            daemon = assemble(
                config,
                config.dsn,
                store,
                signals=signals,
                reread=lambda: reread_config(config_path, dsn, invariants_dir),
            )
            code = daemon.serve(supervise=True)
        except OSError as exc:
            fail(f"cannot listen on http.listen {config.http.listen}: {exc.strerror or exc}")
        finally:
            store.close()
            if lock is not None:
                lock.close()
    if code != 0:
        # Runs still in flight past every bound: their threads would hold the interpreter's
        # exit (it joins the workers), so end here, the reason already logged.
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(code)
    sys.exit(code)


def reread_config(config_path: Path | None, dsn: str | None, invariants_dir: Path | None) -> Config:
    """The config as `run` read it at start, read again for SIGHUP: an error is a
    ConfigError (the daemon logs it and keeps the config it has), never an exit."""
    try:
        return resolve_config(config_path, dsn, invariants_dir)
    except InvmonError as exc:
        raise ConfigError(exc.format_message()) from None


def _single_daemon_lock(config: Config) -> IO[str] | None:
    """A SQLite store serves one daemon: its lock file, held for the process's life."""
    if config.state.dsn:
        return None
    try:
        return hold_single_daemon(config.state.path)
    except StoreInUse as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot lock the state store {str(config.state.path)!r}: {exc.strerror}")


def _run_once(config: Config) -> int:
    """`run --once`: burst mode, every invariant once through the daemon's full path."""
    from monitor.daemon.assembly import assemble

    lock = _single_daemon_lock(config)
    store = open_store(config)
    daemon = assemble(config, config.dsn, store)
    try:
        change, results = daemon.run_once()
        return exit_code(results, load_failed=bool(change.invalid))
    finally:
        daemon.close()
        store.close()
        if lock is not None:
            lock.close()
