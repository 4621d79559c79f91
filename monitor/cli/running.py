"""`invmon run`: the daemon, every invariant on its schedule until SIGTERM. Apart from
`check` (evaluating.py), so that a one-shot check loads none of what only the daemon needs:
the state store, and the build's version (a call to git in a checkout)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import IO, NoReturn

import click

from monitor.cli.options import CONFIG, DSN, INVARIANTS, InvmonError, fail
from monitor.cli.resolving import (
    open_store,
    require,
    require_every_target,
    resolve_config,
    store_where,
)
from monitor.config import Config, ConfigError
from monitor.execution.results import exit_code
from monitor.store.storage import StoreInUse, hold_single_daemon
from monitor.text import counted
from monitor.version import commit, version


@click.command()
@CONFIG
@DSN
@INVARIANTS
@click.option("--once", is_flag=True, help="Evaluate every invariant once, store it, and exit.")
def run(config_path: Path | None, dsn: str | None, invariants_dir: Path | None, once: bool) -> None:
    """Run the daemon: evaluate every invariant on its schedule until SIGTERM."""
    from monitor.daemon.assembly import assemble
    from monitor.daemon.http import CannotListen
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
                config.default_dsn(),
                store,
                signals=signals,
                reread=lambda: reread_config(config_path, dsn, invariants_dir),
            )
            code = daemon.serve(supervise=True)
        except CannotListen as exc:
            fail(str(exc))
        finally:
            store.close()
            if lock is not None:
                lock.close()
    end_process(code, threads_left=daemon.threads_left)


def end_process(code: int, threads_left: bool) -> NoReturn:
    """Exit with `code`. Runs still in flight past every bound (code 1), or a scheduler job
    the stop left running, have threads that would hold the interpreter's exit (it joins
    the workers of concurrent.futures), so the process ends here without that join, the
    reason already logged."""
    if code != 0 or threads_left:
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def undelivered_note(waiting: int) -> str | None:
    """What `run --once` says of the alerts it could not deliver within its 30 s: nothing
    said it, and its exit code is the invariants' (slack-sdk's own error lines name no
    setting)."""
    if not waiting:
        return None
    return (
        f"invmon: {counted(waiting, 'alert')} not delivered yet (Slack's errors are above; "
        "check slack.api_url and slack.token); they stay queued in the state store, and "
        "`invmon run` delivers them"
    )


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
    daemon = assemble(config, config.default_dsn(), store)
    try:
        change, results = daemon.run_once()
        if note := undelivered_note(daemon.alerter.ledger.undelivered(daemon.clock())):
            click.echo(note, err=True)
        return exit_code(results, load_failed=bool(change.invalid))
    finally:
        daemon.close()
        store.close()
        if lock is not None:
            lock.close()
