"""What the state store holds, read without changing it: the schema version applied (and
the one this release knows), the size on disk, the rows of each of invmon's tables and the
oldest and newest run kept; and a SQLite store's online copy. For `invmon store status`,
`migrate --check` and `backup`, and for anyone who must look at a store before migrating it.

Only reads. PostgreSQL reads in one READ ONLY, REPEATABLE READ transaction (one snapshot,
and the server itself refuses a write); SQLite in one transaction on the connection it is
given (a store opened read-only reads a `mode=ro` file). invmon's tables are the ones its
schema files create, and `invmon_schema`: a PostgreSQL database may hold others.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from monitor.store.migrations import migrations, schema_version
from monitor.store.storage import SqliteStorage, Storage, Tx, open_read_only

SCHEMA_TABLE = "invmon_schema"
_CREATED = re.compile(r"\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_]*)", re.I)


@dataclass(frozen=True)
class StoreReport:
    kind: str  # "sqlite" or "postgresql"
    schema_version: int  # applied; 0 for a store no invmon has migrated yet
    known_version: int  # the newest this release knows
    size_bytes: int  # SQLite: the file and its -wal; PostgreSQL: invmon's tables, indexes, TOAST
    rows: dict[str, int]  # invmon's tables present in the store, by name
    oldest_run: str | None  # finished_at of the oldest run kept, None when there is none
    newest_run: str | None

    @property
    def pending(self) -> int:
        """Migrations this release would apply."""
        return max(0, self.known_version - self.schema_version)

    @property
    def too_new(self) -> bool:
        """Migrated by a newer release: this one refuses to run on it."""
        return self.schema_version > self.known_version


@cache
def invmon_tables() -> tuple[str, ...]:
    """Every table invmon's schema files create, and invmon_schema, sorted by name."""
    created = {
        name.lower()
        for step in migrations("INTEGER PRIMARY KEY AUTOINCREMENT", "INTEGER", "REAL")
        for name in _CREATED.findall(step)
    }
    return tuple(sorted(created | {SCHEMA_TABLE}))


def inspect(storage: Storage) -> StoreReport:
    """The store as it is, in one snapshot."""
    with storage.transaction() as tx:
        _read_only(storage, tx)
        present = _present(storage, tx)
        version = _version(tx, present)
        rows = {name: _count(tx, name) for name in present}
        oldest, newest = _runs_kept(tx) if "runs" in present else (None, None)
        size = _postgres_size(tx, present) if storage.kind == "postgresql" else _sqlite_size(tx)
    return StoreReport(
        kind=storage.kind,
        schema_version=version,
        known_version=schema_version(),
        size_bytes=size,
        rows=rows,
        oldest_run=oldest,
        newest_run=newest,
    )


def applied_version(storage: Storage) -> int:
    """The schema version the store is at: 0 when no invmon has migrated it."""
    with storage.transaction() as tx:
        _read_only(storage, tx)
        return _version(tx, _present(storage, tx))


def _read_only(storage: Storage, tx: Tx) -> None:
    if storage.kind == "postgresql":
        tx.run("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")


def _present(storage: Storage, tx: Tx) -> list[str]:
    """invmon's tables this store has (an older one lacks the later ones), sorted."""
    known = list(invmon_tables())
    if storage.kind == "postgresql":
        found = tx.rows(
            "SELECT name FROM unnest(?::text[]) AS t(name) WHERE to_regclass(name) IS NOT NULL",
            (known,),
        )
    else:
        found = tx.rows("SELECT lower(name) FROM sqlite_master WHERE type = 'table'")
    have = {str(name) for (name,) in found}
    return [name for name in known if name in have]


def _version(tx: Tx, present: list[str]) -> int:
    if SCHEMA_TABLE not in present:
        return 0
    [(newest,)] = tx.rows(f"SELECT max(version) FROM {SCHEMA_TABLE}")
    return int(newest or 0)


def _count(tx: Tx, table: str) -> int:
    # `table` is one of invmon_tables(): a name from the schema files, never input.
    [(count,)] = tx.rows(f"SELECT count(*) FROM {table}")
    return int(count)


def _runs_kept(tx: Tx) -> tuple[str | None, str | None]:
    """When the oldest and the newest run kept finished (pruning goes by finished_at)."""
    [(oldest, newest)] = tx.rows("SELECT min(finished_at), max(finished_at) FROM runs")
    return oldest, newest


def _postgres_size(tx: Tx, present: list[str]) -> int:
    """Tables, their indexes and TOAST, as `pg_total_relation_size` counts them."""
    [(total,)] = tx.rows(
        "SELECT coalesce(sum(pg_total_relation_size(to_regclass(name))), 0)"
        " FROM unnest(?::text[]) AS t(name)",
        (present,),
    )
    return int(total)


def _sqlite_size(tx: Tx) -> int:
    """The database file and its write-ahead log, as on disk now (the -shm index is not
    data). The file is the one this connection has open, not a path given again."""
    [(file,)] = tx.rows("SELECT file FROM pragma_database_list WHERE name = 'main'")
    if not file:  # an in-memory database
        return 0
    return sum(_file_size(Path(str(file) + suffix)) for suffix in ("", "-wal"))


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class BackupTargetExists(Exception):
    """The backup's file is there already: a backup never overwrites."""


def backup_sqlite(source: Path, target: Path) -> StoreReport:
    """Copy the SQLite store at `source` to a new file `target` with SQLite's online backup
    API: one consistent snapshot, safe while a daemon writes (in WAL mode a reader blocks
    no writer), read from a `mode=ro` connection, so the store is never changed. The copy
    is a single file (rollback journal, no -wal beside it), owner-only (0600) like what it
    holds deserves. An existing `target` is refused (BackupTargetExists); a copy that fails
    part way is removed. Returns the copy as read back, opened read-only."""
    reading, _ = open_read_only(source)  # what it cannot read, `store backup` has said
    try:
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            raise BackupTargetExists(str(target)) from None
        try:
            writing = sqlite3.connect(target, isolation_level=None)
            try:
                reading.backup(writing)
                writing.execute("PRAGMA journal_mode=DELETE")
            finally:
                writing.close()
        except BaseException:
            target.unlink(missing_ok=True)
            raise
    finally:
        reading.close()
    copy = SqliteStorage(target, read_only=True)
    try:
        return inspect(copy)
    finally:
        copy.close()
