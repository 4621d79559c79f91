"""From flags to what a command works on: the config, its targets and their schemas, the
selected invariants, the state store. Each refusal is one sentence naming the flag or key."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from monitor.cli.options import checked_dsn, fail
from monitor.cli.render import (
    problems_text,
)
from monitor.config import Config, ConfigError, Target, load_config
from monitor.invariants.header import DEFAULT_TARGET
from monitor.invariants.loader import Invariant, load_directory
from monitor.invariants.selection import NothingSelected, select
from monitor.logs import redact

if TYPE_CHECKING:
    from monitor.store.state import StateStore

T = TypeVar("T")


def resolve_config(
    config_path: Path | None, dsn: str | None = None, invariants: Path | None = None
) -> Config:
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        fail(str(exc))
    updates: dict[str, Any] = {}
    if dsn:
        updates["dsn"] = checked_dsn(dsn, "--dsn / INVMON_DSN")
    if invariants:
        updates["invariants"] = invariants
    resolved = config.model_copy(update=updates)
    return resolved.without_unresolved("dsn") if dsn else resolved


def require(config: Config, *fields: str) -> None:
    """The fields this command needs must have their ${VAR}s set (Config.require)."""
    try:
        config.require(*fields)
    except ConfigError as exc:
        fail(str(exc))


def test_server_dsn(admin_dsn: str | None) -> str | None:
    """The server for scratch databases: --dsn, else INVMON_TEST_DSN, else None (a throwaway
    server is started); checked here so a malformed one is a sentence without its password."""
    if admin_dsn:
        return checked_dsn(admin_dsn, "--dsn")
    from_env = os.environ.get("INVMON_TEST_DSN")
    return checked_dsn(from_env, "INVMON_TEST_DSN") if from_env else None


def require_targets(config: Config, purpose: str) -> dict[str, Target]:
    """The targets; at least one must have a database (the others' invariants report why
    they could not run)."""
    targets = config.resolved_targets()
    if list(targets) == [DEFAULT_TARGET]:
        require_database(config, purpose)
    elif not any(t.dsn for t in targets.values()):
        fail(f"no database to {purpose}: no target has a dsn ({', '.join(sorted(targets))})")
    require_folder(config)
    return targets


def require_every_target(config: Config) -> None:
    """A daemon watches every target it is configured with: one without a DSN is a mistake
    in the config, refused at start with each such target named, not a quiet gap."""
    targets = config.resolved_targets()
    if list(targets) == [DEFAULT_TARGET]:
        require_database(config, "monitor")
        return
    missing = [config.no_dsn_reason(name) for name, t in sorted(targets.items()) if not t.dsn]
    if missing:
        fail("cannot start: " + "; ".join(missing))
    require_folder(config)


def require_database(config: Config, purpose: str) -> str:
    require(config, "dsn")
    dsn = config.default_dsn()
    if not dsn:
        fail(f"no database to {purpose}: pass --dsn, set INVMON_DSN, or set dsn in invmon.yaml")
    require_folder(config)
    return dsn


def require_folder(config: Config) -> None:
    if not config.invariants.is_dir():
        fail(
            f"invariants folder {str(config.invariants)!r} not found "
            f"(looked for {str(config.invariants.absolute())!r}{_read_from(config)}); "
            "pass --invariants DIR"
        )


def _read_from(config: Config) -> str:
    """Where a relative path in the config was read from, for a "not found"."""
    if config.file is None:
        return ", from the working directory: no config file"
    return f", relative paths of {str(config.file)!r} are read from its folder"


def schema_paths(config: Config, override: Path | None) -> dict[str, Path | None]:
    """Which schema file applies to each target: --schema for all when given, else each
    target's own `schema:` (the default target's is the top-level `schema:`)."""
    return {name: override or t.schema_path for name, t in config.resolved_targets().items()}


def read_schema(config: Config, schema_file: Path | None) -> str | None:
    return read_schema_file(schema_file or config.schema_path)


def read_schema_file(schema: Path | None) -> str | None:
    if schema is None:
        return None
    if not schema.is_file():
        fail(f"schema file {str(schema)!r} not found")
    return schema.read_text(encoding="utf-8")


def known_targets(config: Config, targets: Sequence[str]) -> None:
    """Every `--target` names a target of the config."""
    known = config.resolved_targets()
    unknown = sorted(set(targets) - set(known))
    if unknown:
        names = ", ".join(sorted(known))
        fail(f"no target named {', '.join(map(repr, unknown))}; targets: {names}")


def by_target(invariants: Sequence[Invariant]) -> dict[str, list[Invariant]]:
    groups: dict[str, list[Invariant]] = {}
    for inv in invariants:
        groups.setdefault(inv.target, []).append(inv)
    return groups


def selected_invariants(
    config: Config, selectors: Sequence[str], targets: Sequence[str] = ()
) -> list[Invariant]:
    """The selected invariants (all when none) of these targets (all when none), refusing
    to go on past an invalid file."""
    if not config.invariants.is_dir():
        # Not an invalid file: nothing to fix in one, so it is said alone.
        fail(f"invariants folder not found: {config.invariants}; pass --invariants DIR")
    loaded = load_directory(config.invariants, config.loading(with_database=True))
    if loaded.errors:
        click.echo(problems_text(loaded.errors), err=True)
        fail("fix the invalid invariant files first (see `invmon lint`)")
    known_targets(config, targets)
    try:
        chosen = select(loaded.invariants, selectors, config.invariants)
    except NothingSelected as exc:
        fail(str(exc))
    return [i for i in chosen if not targets or i.target in targets]


def store_where(config: Config) -> str:
    if config.state.dsn:
        from monitor.store.storage import server_address

        return f"state.dsn, {server_address(config.state.dsn)}"
    return f"state.path {str(config.state.path)!r}"


def open_store(
    config: Config, must_exist: bool = False, read_only: bool = False, announce: bool = True
) -> StateStore:
    """The state store; `must_exist` for commands that use what `invmon run` stored,
    `read_only` for those that only look (a read-only file, a shared store not migrated).
    Opening it migrates it, and says so (`announce`: see _migrations_told)."""
    require(config, "state")
    from monitor.store.state import StateStore

    if must_exist and not config.state.dsn and not config.state.path.exists():
        fail(
            f"no state store at {str(config.state.path)!r} "
            f"(looked for {str(config.state.path.absolute())!r}{_read_from(config)}): "
            "pass the --config that `invmon run` uses, or start it first"
        )
    try:
        with _migrations_told(announce and not read_only):
            opened = StateStore.open(
                path=config.state.path,
                dsn=config.state.dsn,
                read_only=read_only,
                connect_timeout=config.database.connect_timeout.total_seconds(),
            )
    except Exception as exc:  # sqlite3 and psycopg errors alike: say where, not a traceback
        fail(f"cannot open the state store ({store_where(config)}): {redact(str(exc))}")
    unread = opened.storage.unread_wal
    if unread:
        click.echo(
            f"invmon: warning: the state store ({store_where(config)}) is on a read-only "
            f"mount, where SQLite cannot read the {unread:,} bytes of its -wal file: what the "
            "last writes hold is not shown",
            err=True,
        )
    return opened


@contextmanager
def _migrations_told(announce: bool) -> Iterator[None]:
    """A migration is logged, `state store migrated 8→13` (logger invmon.store): the daemon's
    logging shows it; a one-shot command (ack, mute…) has none set up, so meanwhile the
    line goes to stderr as `invmon: state store migrated 8→13`."""
    logger = logging.getLogger("invmon.store")
    if not announce or logger.hasHandlers():
        yield
        return
    handler = _ToStderr(logging.INFO)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


class _ToStderr(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"invmon: {redact(record.getMessage())}", err=True)


def read_store(config: Config, reading: Callable[[StateStore], T], empty_ok: bool = False) -> T:
    """What a reading command needs from the store, or one sentence saying why not (a store
    no daemon has started on is one, unless `empty_ok`: `store migrate` fills it)."""
    from monitor.store.inspection import applied_version
    from monitor.store.store_health import STORE_ERRORS

    store = open_store(config, must_exist=True, read_only=True)
    try:
        if not empty_ok and applied_version(store.storage) == 0:
            # Not a broken store: `relation "incidents" does not exist`, and a pointer to
            # recovering one, sent a reviewer after a fault there was none of.
            fail(
                f"the state store ({store_where(config)}) holds nothing yet: no daemon has "
                "started on it. `invmon run` creates its tables, or `invmon store migrate`"
            )
        return reading(store)
    except STORE_ERRORS as exc:
        fail(
            f"cannot read the state store ({store_where(config)}): {redact(str(exc))}; "
            "see docs/operating.md, 'Recovering the state store'"
        )
    finally:
        store.close()
