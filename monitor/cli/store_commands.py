"""`invmon store status|migrate|backup|restore`: the state store, inspectable, migrated
ahead of a rollout, copied and put back. What is read is in monitor/store/inspection.py, a
restore in monitor/store/restore.py; this module opens the store the config names, prints
and picks the exit code. Nothing here changes a store but `migrate` without `--check`, and
`restore`.

The store modules are imported inside the commands: `invmon --help` stays light.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from monitor.cli.options import CONFIG, fail, output_format
from monitor.cli.render import text_table, to_json
from monitor.cli.resolving import open_store, read_store, require, resolve_config, store_where
from monitor.config import Config
from monitor.logs import redact
from monitor.text import counted

if TYPE_CHECKING:
    from monitor.store.inspection import StoreReport


@click.group("store")
def store() -> None:
    """The state store: its schema version and size, migrations, a backup and its restore."""


@store.command("status")
@CONFIG
@output_format("text", "json")
def status(config_path: Path | None, fmt: str) -> None:
    """Schema version, size, rows, runs kept.

    Where the store is, its schema version (applied, and the newest this invmon knows),
    its size, the rows of each table and the oldest and newest run kept. Opens the store
    read-only and never migrates it."""
    from monitor.store.inspection import inspect

    config = resolve_config(config_path)
    report = read_store(config, lambda s: inspect(s.storage))
    if fmt == "json":
        click.echo(to_json(status_document(config, report)))
        return
    click.echo(status_text(config, report))


def status_document(config: Config, report: StoreReport) -> dict[str, Any]:
    where: dict[str, Any] = (
        {"server": _server(config)} if config.state.dsn else {"path": str(config.state.path)}
    )
    return {
        "kind": report.kind,
        **where,
        "schema_version": report.schema_version,
        "known_schema_version": report.known_version,
        "pending_migrations": report.pending,
        "newer_than_known": report.too_new,
        "size_bytes": report.size_bytes,
        "rows": report.rows,
        "oldest_run": report.oldest_run,
        "newest_run": report.newest_run,
    }


def status_text(config: Config, report: StoreReport) -> str:
    kind = "PostgreSQL" if report.kind == "postgresql" else "SQLite"
    what = (
        "invmon's tables with their indexes"
        if report.kind == "postgresql"
        else "the file and its -wal"
    )
    runs = (
        f"oldest finished {report.oldest_run}, newest {report.newest_run}"
        if report.oldest_run
        else "none kept"
    )
    lines = [
        f"store   {kind}, {store_where(config)}",
        f"schema  {schema_line(report)}",
        f"size    {_size(report.size_bytes)}: {what}",
        f"runs    {runs}",
        "",
        text_table(("table", "rows"), sorted(report.rows.items())),
    ]
    return "\n".join(lines)


def schema_line(report: StoreReport) -> str:
    version, known = report.schema_version, report.known_version
    if report.too_new:
        return (
            f"version {version}, newer than this invmon knows ({known}): a newer release "
            "migrated it, and this one refuses to run on it"
        )
    if not report.pending:
        return f"version {version}, the newest this invmon knows"
    never = " (never migrated)" if version == 0 else ""
    return (
        f"version {version}{never}, this invmon knows {known}: "
        f"{counted(report.pending, 'migration')} pending (`invmon store migrate`)"
    )


def _size(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{counted(size, 'byte')} ({size / scale:.1f} {unit})"
    return counted(size, "byte")


def _server(config: Config) -> str:
    from monitor.store.storage import server_address

    return server_address(config.state.dsn or "")


@store.command("migrate")
@CONFIG
@click.option(
    "--check",
    is_flag=True,
    help="Change nothing: exit 1 when migrations are pending, 0 when up to date.",
)
def migrate(config_path: Path | None, check: bool) -> None:
    """Apply pending migrations (--check: only tell).

    For a rollout: `invmon store migrate --check` (exit 1 when migrations are pending),
    then `invmon store migrate`, then start the new release's daemons."""
    from monitor.store.inspection import applied_version
    from monitor.store.migrations import schema_version
    from monitor.store.storage import StoreTooNew

    config = resolve_config(config_path)
    where = store_where(config)
    known = schema_version()
    # An empty store (a database made for it, before any daemon) is migrated from nothing:
    # the step a first deploy takes before starting its daemons.
    before = read_store(config, lambda s: applied_version(s.storage), empty_ok=True)
    if before > known:
        fail(f"cannot migrate the state store ({where}): {StoreTooNew.at(before, known)}")
    if before == known:
        click.echo(f"state store up to date at schema version {known} ({where})")
        return
    if check:
        now = "holds nothing yet" if before == 0 else f"at schema version {before}"
        click.echo(
            f"state store {now}, this invmon knows {known}: "
            f"{counted(known - before, 'migration')} pending ({where}); "
            "apply with `invmon store migrate`"
        )
        sys.exit(1)
    # The daemon's own path: the same migrations, logged as `state store migrated 8→13`.
    opened = open_store(config, must_exist=True, announce=False)
    try:
        after = applied_version(opened.storage)
        applied = opened.storage.migrated
    finally:
        opened.close()
    if not applied:  # another invmon migrated it meanwhile
        click.echo(f"state store up to date at schema version {after} ({where})")
        return
    # What this process applied: several run together, each says only its own steps.
    click.echo(f"state store migrated {applied[0] - 1}→{applied[-1]} ({where})")


# How a PostgreSQL store's pg_dump is put back. Not over the store itself: pg_restore then
# fails on every table it already holds, and with --clean a table a newer schema step added
# would stay beside the older copy and stop its migration.
PG_RESTORE = (
    "restore it, with every daemon stopped, into an empty database: pg_restore --dbname "
    '"$EMPTY_DATABASE_DSN" {file}, then point state.dsn at that database'
)


@store.command("backup")
@CONFIG
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
def backup(config_path: Path | None, file: Path) -> None:
    """Copy a SQLite store to a new FILE, online.

    SQLite's backup API: one consistent copy, safe while the daemon writes; never
    overwrites FILE. A PostgreSQL store is backed up with pg_dump (the refusal says how)."""
    from monitor.store.inspection import BackupTargetExists, backup_sqlite
    from monitor.store.store_health import STORE_ERRORS

    config = resolve_config(config_path)
    require(config, "state")
    where = store_where(config)
    if config.state.dsn:
        target = shlex.quote(str(file))
        fail(
            f"`invmon store backup` copies a SQLite store; this one is PostgreSQL ({where}): "
            "back it up with pg_dump, e.g. "
            f'pg_dump --format=custom --file {target} "$INVMON_STATE_DSN" (the DSN of '
            f"state.dsn); {PG_RESTORE.format(file=target)}"
        )
    if file.exists():
        fail(f"{str(file)!r} exists already: a backup never overwrites; name a new file")
    open_store(config, must_exist=True, read_only=True).close()  # there, and a store
    try:
        copy = backup_sqlite(config.state.path, file)
    except BackupTargetExists:
        fail(f"{str(file)!r} exists already: a backup never overwrites; name a new file")
    except STORE_ERRORS as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        fail(f"cannot back up the state store ({where}) to {str(file)!r}: {redact(reason)}")
    rows = sum(copy.rows.values())
    click.echo(
        f"wrote {str(file)!r}: {_size(copy.size_bytes)}, schema version {copy.schema_version}, "
        f"{counted(rows, 'row')} in {counted(len(copy.rows), 'table')} (from {where})"
    )


@store.command("restore")
@CONFIG
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
def restore(config_path: Path | None, file: Path) -> None:
    """Put a backup FILE in a SQLite store's place, every daemon on it stopped.

    Through SQLite's backup API: copying the file over the store is undone by the `-wal` a
    killed daemon leaves beside it. Refuses a FILE that is not an intact invmon store or was
    migrated by a newer release, and a store a daemon is running on. A FILE of an older
    schema version is migrated when the store is next opened. A PostgreSQL store is
    restored with pg_restore (the refusal says how)."""
    from monitor.store.restore import RestoreRefused, restore_sqlite
    from monitor.store.store_health import STORE_ERRORS

    config = resolve_config(config_path)
    require(config, "state")
    where = store_where(config)
    if config.state.dsn:
        fail(
            f"`invmon store restore` writes a SQLite store; this one is PostgreSQL ({where}): "
            f"{PG_RESTORE.format(file=shlex.quote(str(file)))}"
        )
    try:
        done = restore_sqlite(file, config.state.path)
    except RestoreRefused as exc:
        fail(f"nothing restored to the state store ({where}): {redact(str(exc))}")
    except STORE_ERRORS as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        fail(f"cannot restore {str(file)!r} to the state store ({where}): {redact(reason)}")
    held = "it had no file before"
    if done.replaced is not None:
        rows = sum(done.replaced.rows.values())
        held = f"it held schema version {done.replaced.schema_version}, {counted(rows, 'row')}"
    rows = sum(done.backup.rows.values())
    click.echo(
        f"restored {str(file)!r} to the state store ({where}): schema version "
        f"{done.backup.schema_version}, {counted(rows, 'row')} in "
        f"{counted(len(done.backup.rows), 'table')} ({held})"
    )
