"""A SQLite store put back from a backup (`invmon store restore`).

Copying the backup over the store's file is not a restore: a daemon that was killed (the
usual reason to restore) leaves the store's `-wal` beside it, and SQLite replays that over
the copy when the store is next opened, silently bringing back what the restore meant to
undo. SQLite's backup API writes the backup's pages into the store through its own
connection instead, which first recovers (and then supersedes) whatever `-wal` is there.

Refused, before anything is written: a backup that is not an invmon store, is damaged, or
was migrated by a newer release; and a store a daemon is running on (one seen in the
`daemons` table within `alive_within`: a daemon renews its row every third of its lease, and
a clean stop removes it).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from monitor.clock import parse_stamp, stamp
from monitor.store.inspection import StoreReport, inspect
from monitor.store.migrations import schema_version
from monitor.store.storage import SqliteStorage


class RestoreRefused(Exception):
    """Why nothing was restored, in a sentence."""


@dataclass(frozen=True)
class Restored:
    backup: StoreReport  # the store as restored: the backup's contents
    replaced: StoreReport | None  # what the store held before; None when there was no file


def restore_sqlite(backup: Path, store: Path, now: datetime, alive_within: timedelta) -> Restored:
    """Write the backup at `backup` into the SQLite store at `store` (created when absent),
    with SQLite's backup API; RestoreRefused, with nothing written, when it may not be."""
    copy = _checked_backup(backup)
    replaced = None
    if store.exists():
        replaced = _stopped_store(store, now, alive_within)
    reading = sqlite3.connect(f"file:{backup.resolve().as_posix()}?mode=ro", uri=True)
    try:
        writing = sqlite3.connect(store, isolation_level=None, timeout=30)
        try:
            reading.backup(writing)
            # A backup is a rollback-journal file (backup_sqlite); the store's mode is WAL.
            writing.execute("PRAGMA journal_mode=WAL")
        finally:
            writing.close()
    finally:
        reading.close()
    return Restored(copy, replaced)


def _checked_backup(backup: Path) -> StoreReport:
    if not backup.is_file():
        raise RestoreRefused(f"{str(backup)!r} is not a file")
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
        raise RestoreRefused(f"{str(backup)!r} is not an invmon state store (no schema version)")
    if report.schema_version > schema_version():
        raise RestoreRefused(
            f"{str(backup)!r} is at schema version {report.schema_version}, newer than this "
            f"invmon knows ({schema_version()}): restore it with that release (or newer)"
        )
    return report


def _stopped_store(store: Path, now: datetime, alive_within: timedelta) -> StoreReport:
    """What the store holds, when no daemon is running on it. Opened for writing, so that a
    `-wal` left beside it is recovered now, not replayed over the restored pages later."""
    try:
        opened = SqliteStorage(store)
    except sqlite3.Error as exc:
        raise RestoreRefused(_unreadable(exc)) from None
    try:
        report = inspect(opened)
        if "daemons" in report.rows:
            with opened.transaction() as tx:
                alive = tx.rows(
                    "SELECT host, pid, seen_at FROM daemons WHERE seen_at > ? ORDER BY seen_at",
                    (stamp(now - alive_within),),
                )
            if alive:
                host, pid, seen = alive[-1]
                ago = max(0, int((now - parse_stamp(seen)).total_seconds()))
                raise RestoreRefused(
                    f"a daemon is running on it ({host}, pid {pid}, seen {ago}s ago): stop "
                    "every daemon on the store first"
                )
        return report
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
