"""A SQLite store put back from a backup (`invmon store restore`).

Copying the backup over the store's file is not a restore: a daemon that was killed (the
usual reason to restore) leaves the store's `-wal` beside it, and SQLite replays that over
the copy when the store is next opened, silently bringing back what the restore meant to
undo. SQLite's backup API writes the backup's pages into the store through its own
connection instead, which first recovers (and then supersedes) whatever `-wal` is there.

Refused, before anything is written: a backup that is not an invmon store, is damaged, was
migrated by a newer release, or is the store itself; and a store a daemon is running on.
That is the daemon's own lock (storage.hold_single_daemon), held by this restore from its
check to its end: the kernel drops it when a daemon dies, so a killed daemon never stands
in the way, and a paused one always does.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from monitor.store.inspection import StoreReport, inspect
from monitor.store.migrations import schema_version
from monitor.store.storage import SqliteStorage, StoreInUse, hold_single_daemon


class RestoreRefused(Exception):
    """Why nothing was restored, in a sentence."""


@dataclass(frozen=True)
class Restored:
    backup: StoreReport  # the store as restored: the backup's contents, as it now holds them
    replaced: StoreReport | None  # what the store held before; None when there was no file


def restore_sqlite(backup: Path, store: Path) -> Restored:
    """Write the backup at `backup` into the SQLite store at `store` (created when absent),
    with SQLite's backup API; RestoreRefused, with nothing written, when it may not be."""
    if store.is_dir():
        raise RestoreRefused(f"the store's path {str(store)!r} is a folder")
    copy = _checked_backup(backup, store)
    try:
        lock = hold_single_daemon(store)
    except StoreInUse as exc:
        raise RestoreRefused(f"a daemon is running on it ({exc.holder}): stop it first") from None
    try:
        replaced = _current(store) if store.exists() else None
        reading = sqlite3.connect(f"file:{backup.resolve().as_posix()}?mode=ro", uri=True)
        try:
            writing = sqlite3.connect(store, isolation_level=None, timeout=30)
            try:
                reading.backup(writing)
                # A backup is a rollback-journal file (backup_sqlite); the store's mode is WAL.
                writing.execute("PRAGMA journal_mode=WAL")
                # Which daemons were alive when the backup was taken is not history: a
                # daemon started on the store would see them leave the fleet. (A backup
                # from before schema step 8 has no such table: its migration makes it.)
                if "daemons" in copy.rows:
                    writing.execute("DELETE FROM daemons")
            finally:
                writing.close()
        finally:
            reading.close()
        restored = _current(store)
    finally:
        lock.close()
    return Restored(restored, replaced)


def _checked_backup(backup: Path, store: Path) -> StoreReport:
    if not backup.is_file():
        raise RestoreRefused(f"{str(backup)!r} is not a file")
    if store.exists() and os.path.samefile(backup, store):
        raise RestoreRefused(f"{str(backup)!r} is the store itself")
    try:
        opened = SqliteStorage(backup, read_only=True)
    except sqlite3.Error as exc:
        raise RestoreRefused(f"{str(backup)!r} cannot be read as a SQLite store: {exc}") from None
    try:
        with opened.transaction() as tx:
            [(verdict,)] = tx.rows("PRAGMA quick_check")
        if verdict != "ok":
            raise RestoreRefused(f"{str(backup)!r} is damaged: {verdict}")
        report = inspect(opened)
    except sqlite3.Error as exc:
        raise RestoreRefused(f"{str(backup)!r} cannot be read as a SQLite store: {exc}") from None
    finally:
        opened.close()
    if report.schema_version == 0:
        raise RestoreRefused(f"{str(backup)!r} is not an invmon state store")
    if report.schema_version > schema_version():
        raise RestoreRefused(
            f"{str(backup)!r} is at schema version {report.schema_version}, newer than this "
            f"invmon knows ({schema_version()}): restore it with that release (or newer)"
        )
    return report


def _current(store: Path) -> StoreReport:
    """What the store holds. Opened for writing, so that a `-wal` left beside it is
    recovered now, not replayed over the restored pages later."""
    try:
        opened = SqliteStorage(store)
    except sqlite3.Error as exc:
        raise RestoreRefused(_unreadable(exc)) from None
    try:
        return inspect(opened)
    except sqlite3.Error as exc:
        raise RestoreRefused(_unreadable(exc)) from None
    finally:
        opened.close()


def _unreadable(exc: sqlite3.Error) -> str:
    # SQLite's backup API cannot write into a file that is not a database; and a store
    # moved aside is kept for whoever wants to salvage what it held (operating.md).
    return (
        f"the store cannot be read ({exc}); if it is damaged, move it aside with its -wal and "
        "-shm files, then restore again"
    )
