"""The state store's database: a SQLite file (the default, one daemon) or PostgreSQL (shared
by several daemons), behind one small interface, and the migrations that shape it.

It holds no table of its own. Each table has one owner that alone writes and reads it:
  runs, invariant_state, incidents, incident_keys, incident_actions, events  monitor/store/state.py
  deliveries (planning's writes: alerts/planned.py)                          alerts/ledger.py
  alert_roots                                                                alerts/roots.py
  slack_requests                                                             alerts/replays.py
Owners that must change their tables together share one `Tx` (the events outbox and the
delivery ledger are written in one transaction).

Never the monitored database: a replica is read-only, and the monitor's memory must not
depend on what it watches.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import socket
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO, Any, Protocol

import psycopg

from monitor.clock import stamp, utc_now
from monitor.durations import precise_duration, reconnect_attempt
from monitor.execution.deadlines import CAUSES, Cut, Deadlines
from monitor.store.migrations import migrations

log = logging.getLogger("invmon.store")


class Tx(Protocol):
    """One transaction. SQL uses `?` placeholders; `for_update` is " FOR UPDATE" where the
    database has row locks (PostgreSQL) and "" where the whole file is locked (SQLite)."""

    for_update: str

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def run(self, sql: str, params: Sequence[Any] = ()) -> None: ...

    def script(self, sql: str) -> None: ...


class _SqliteTx:
    for_update = ""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql, tuple(params)).fetchall())

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._conn.execute(sql, tuple(params))

    def script(self, sql: str) -> None:
        for statement in filter(str.strip, sql.split(";")):
            self._conn.execute(statement)


class _PostgresTx:
    """One transaction on the PostgreSQL store; each statement's wait is bounded apart
    (StoreBounds)."""

    for_update = " FOR UPDATE"

    def __init__(
        self, conn: Any, bounded: Callable[[], AbstractContextManager[None]] = nullcontext
    ) -> None:
        self._conn = conn
        self._bounded = bounded

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._bounded():
            return list(self._conn.execute(sql.replace("?", "%s"), tuple(params)).fetchall())

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        with self._bounded():
            self._conn.execute(sql.replace("?", "%s"), tuple(params))

    def script(self, sql: str) -> None:
        with self._bounded():
            self._conn.execute(sql)


class Storage(Protocol):
    """A database for the state store. Open one with `open_storage`."""

    kind: str  # "sqlite" or "postgresql"
    migrated: tuple[int, ...]  # the schema versions this process applied when it opened it
    # Bytes of a SQLite store's -wal a read-only open could not read (open_read_only).
    unread_wal: int

    def transaction(self) -> AbstractContextManager[Tx]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class StoreBounds:
    """How long the PostgreSQL store may keep a daemon waiting.

    - A peer stopped inside a transaction (SIGSTOP, a paused VM) holds its row locks, and
      the rest of the fleet waits on them: the server ends its session once it has been
      idle in the transaction for `idle` (idle_in_transaction_session_timeout), or, stopped
      while the server was sending it a result, once that has gone unacknowledged as long
      (tcp_user_timeout, over TCP), which frees them. invmon's own transactions run their
      statements back to back (0.7 s at most between two, storing a run with 100,000 keys),
      so only a stopped process is ever idle in one that long.
    - A statement, or a wait for a lock, has no bound on the server: a healthy transaction
      may hold a row for long (storing a run with a hundred thousand keys from far away
      takes minutes), and whoever needs the row must wait for it, not fail and retry.
    - A server that never answers (stopped, or behind a network that drops packets
      silently) is cut by invmon itself after `answer` for one answer (Deadlines): the
      connection is closed and the transaction fails as if the store were down. The
      supervisor's backstop ends a daemon whose tick waits on the store long before; the
      bound is what frees every other thread, and a command, for good."""

    idle: timedelta = timedelta(seconds=8)
    answer: timedelta = timedelta(minutes=10)

    def settings(self) -> str:
        """A connection's session, as it is opened (no round trip more per transaction).
        tcp_user_timeout ends a peer stopped while the server sends it a result (its
        session is busy writing then, not idle), once what was sent has gone unacknowledged
        as long; over TCP only, where the store is on another host."""
        ms = round(self.idle.total_seconds() * 1000)
        return f"SET idle_in_transaction_session_timeout = {ms}; SET tcp_user_timeout = {ms}"

    def cut(self) -> tuple[timedelta, str]:
        """How long invmon waits for one answer of the store, and that bound in words."""
        return self.answer, (
            f"the state store's bound on one answer, {precise_duration(self.answer)}"
        )


def open_read_only(path: Path) -> tuple[sqlite3.Connection, int]:
    """A connection that reads the SQLite store at `path` and can never change it, and the
    bytes of its -wal it cannot read. `mode=ro`; where SQLite cannot open the store so (in
    WAL mode it must make the -shm file beside it, which a read-only mount refuses),
    `immutable=1`, which reads the file as it is and not the -wal beside it."""
    where = f"file:{path.resolve().as_posix()}?mode=ro"
    try:
        conn = _connect_uri(where)
        conn.execute("SELECT count(*) FROM sqlite_master")  # opening is lazy
        return conn, 0
    except sqlite3.OperationalError as exc:
        if "unable to open" not in str(exc) or not path.is_file():
            raise
    wal = path.with_name(path.name + "-wal")
    return _connect_uri(f"{where}&immutable=1"), wal.stat().st_size if wal.is_file() else 0


def _connect_uri(uri: str) -> sqlite3.Connection:
    return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30)


class SqliteStorage:
    kind = "sqlite"
    migrated: tuple[int, ...] = ()
    unread_wal = 0  # see open_read_only

    def __init__(self, path: Path, read_only: bool = False) -> None:
        self.read_only = read_only
        if read_only:
            # For `status` and `history`: a file they may not write (or one mounted read
            # only) must still be readable, and reading must never change it.
            self._conn, self.unread_wal = open_read_only(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=30
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        # One connection shared by the daemon's threads; sqlite3 serialises access to it,
        # the lock makes each transaction atomic with respect to the others.
        self._lock = threading.RLock()
        self.migrations = migrations("INTEGER PRIMARY KEY AUTOINCREMENT", "INTEGER", "REAL")

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self._lock:
            self._conn.execute("BEGIN" if self.read_only else "BEGIN IMMEDIATE")
            try:
                yield _SqliteTx(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()


class PostgresStorage:
    kind = "postgresql"
    migrated: tuple[int, ...] = ()
    unread_wal = 0

    def __init__(
        self, dsn: str, connect_timeout: float = 10, bounds: StoreBounds | None = None
    ) -> None:
        from psycopg_pool import ConnectionPool

        self.bounds = bounds or StoreBounds()
        self._deadlines = Deadlines("state-store")

        # One connection first, on its own: the pool would retry a refused password or a
        # missing database in the background until its timeout, where the first answer is
        # already final. Unreachable or refusing, it is one error naming host:port.
        timeout = max(1, round(connect_timeout))
        try:
            psycopg.connect(dsn, connect_timeout=timeout, application_name="invmon-state").close()
        except psycopg.Error as exc:
            raise StoreUnreachable(dsn, timeout, exc) from None
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=4,
            open=True,
            timeout=connect_timeout,
            reconnect_timeout=reconnect_attempt(timedelta(seconds=connect_timeout)),
            name="invmon-state",
            kwargs={"application_name": "invmon-state", "connect_timeout": timeout},
            configure=self._configure,
        )
        self.migrations = migrations(
            "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "BIGINT", "DOUBLE PRECISION"
        )

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self._pool.connection() as conn:
            tx = _PostgresTx(conn, lambda: self._bounded(conn))
            try:
                yield tx
            except BaseException:
                if not conn.closed:  # one a cut closed is the pool's to discard
                    with suppress(psycopg.Error), self._bounded(conn):
                        conn.rollback()
                raise
            committed = False
            try:
                with self._bounded(conn):
                    conn.commit()
                    committed = True
            except Cut:
                if not committed:
                    raise
                # The COMMIT was answered as the bound passed: it holds, and the connection,
                # which the cut closed, is not lent again.

    def _bounded(self, conn: psycopg.Connection[Any]) -> AbstractContextManager[None]:
        bound, past = self.bounds.cut()
        # The store has no lock_timeout (StoreBounds): a lock held that long is a cause too.
        causes = f"{CAUSES}, or a lock that another transaction held that long"
        return self._deadlines.bounded(conn, bound, "the state store", past, causes)

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        """A new connection's session: the idle bound (StoreBounds)."""
        with self._bounded(conn):
            conn.execute(self.bounds.settings().encode())
            conn.commit()

    def close(self) -> None:
        self._pool.close()
        self._deadlines.close()


class StoreUnreachable(Exception):
    """The PostgreSQL state store did not accept a connection: where, and why."""

    def __init__(self, dsn: str, timeout: int, error: psycopg.Error) -> None:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        reason = first or type(error).__name__
        # Only libpq's own words after the address it tried: they never hold the password.
        if "timeout expired" in reason:
            reason = f"no answer within {timeout}s (database.connect_timeout)"
        code = f" (SQLSTATE {error.sqlstate})" if error.sqlstate else ""
        super().__init__(f"cannot connect to {server_address(dsn)}: {_after_address(reason)}{code}")


def _after_address(reason: str) -> str:
    """libpq's reason without the address it repeats ('connection to server at "h"
    (1.2.3.4), port 5432 failed: <why>'), since the message names host:port already."""
    return _LIBPQ_ADDRESS.sub("", reason, count=1)


_LIBPQ_ADDRESS = re.compile(
    r'^(?:connection failed: )?connection to server (?:at "[^"]*"(?: \([^)]*\))?, port \d+'
    r'|on socket "[^"]*") failed: '
)


def server_address(dsn: str) -> str:
    """`host:port` a DSN points at, as libpq would read it (the PG* environment fills in
    what the DSN leaves out); never its user or password."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "an unreadable DSN"
    host = str(parts.get("host") or os.environ.get("PGHOST") or "the local socket")
    port = str(parts.get("port") or os.environ.get("PGPORT") or "5432")
    return f"{host}:{port}"


def open_storage(
    path: Path | None = None,
    dsn: str | None = None,
    read_only: bool = False,
    connect_timeout: float = 10,
) -> SqliteStorage | PostgresStorage:
    """PostgreSQL when `dsn` is given, else the SQLite file at `path`; migrated, unless
    `read_only` (for commands that only look: they must not change a shared store)."""
    storage = (
        PostgresStorage(dsn, connect_timeout)
        if dsn
        else SqliteStorage(path or Path("invmon-state.db"), read_only)
    )
    if not read_only:
        storage.migrated = migrate(storage, storage.migrations)
    return storage


MIGRATION_LOCK = 0x696E766D6F6E  # "invmon": the advisory lock that orders migrations


def _serialise_migrations(storage: Storage, tx: Tx) -> None:
    """Daemons starting together on one PostgreSQL store migrate one after the other: a row
    lock cannot do it (an empty table has no row to lock), and concurrent CREATE TABLE IF
    NOT EXISTS collide in the catalog. SQLite's BEGIN IMMEDIATE already serialises."""
    if storage.kind == "postgresql":
        tx.rows("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))


class StoreInUse(Exception):
    """Another daemon holds this SQLite store."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder  # as its lock file says it: `pid 4242 on box`


def hold_single_daemon(path: Path) -> IO[str]:
    """The lock that keeps a SQLite store to one daemon, held until the returned file is
    closed or the process dies (the kernel drops it then, so a crash never leaves a stale
    lock). Several daemons need the shared, PostgreSQL store."""
    lock_path = path.with_name(path.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    handle = lock_path.open("a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip()[:200] or "another process"
        handle.close()
        raise StoreInUse(
            f"another daemon ({holder}) already runs on the SQLite state store {str(path)!r}; "
            "SQLite serves one daemon: for several, set state.dsn to a PostgreSQL database",
            holder,
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    handle.flush()
    return handle


class StoreTooNew(Exception):
    """The store was migrated by a newer release than this one."""

    @classmethod
    def at(cls, version: int, known: int) -> StoreTooNew:
        return cls(
            f"the state store is at schema version {version}, newer than this invmon knows "
            f"({known}): a newer release migrated it; run that release (or newer) here"
        )


def migrate(storage: Storage, steps: Sequence[str]) -> tuple[int, ...]:
    """Bring the store to the code's schema, logging `state store migrated 8→13` when
    steps were applied (nothing when it was up to date); the versions this call applied
    (none when another process did them meanwhile). A store at a newer schema than
    the code knows is refused, never used: this release cannot know what the newer one
    keeps there."""
    with storage.transaction() as tx:
        _serialise_migrations(storage, tx)
        tx.script(
            "CREATE TABLE IF NOT EXISTS invmon_schema (version INTEGER PRIMARY KEY,"
            " applied_at TEXT NOT NULL)"
        )
        [(newest,)] = tx.rows("SELECT max(version) FROM invmon_schema")
    if newest is not None and int(newest) > len(steps):
        raise StoreTooNew.at(int(newest), len(steps))
    applied: list[int] = []
    for version, ddl in enumerate(steps, start=1):
        with storage.transaction() as tx:
            # Re-checked inside the transaction: two daemons may start together.
            _serialise_migrations(storage, tx)
            if tx.rows("SELECT 1 FROM invmon_schema WHERE version = ?", (version,)):
                continue
            tx.script(ddl)
            tx.run(
                "INSERT INTO invmon_schema (version, applied_at) VALUES (?, ?)",
                (version, stamp(utc_now())),
            )
        applied.append(version)
    if applied:
        log.info("state store migrated %d→%d", applied[0] - 1, applied[-1])
    return tuple(applied)
