"""Is the state store working? A damaged SQLite file, a locked or unreachable PostgreSQL:
every write fails, nothing is stored, no alert is planned. That must not be silent.

Each use of the store by the daemon goes through `guard`: a failure is caught (the daemon
goes on scheduling), remembered, logged as one clear line per minute at most, shown on
/healthz (503) and /metrics (`invmon_state_store_ok 0`); the next successful write clears
it. Only a write: a read-only store (a promoted replica, a full disk) still answers reads,
and a read that went through said nothing about whether runs and alerts can be stored.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg_pool import PoolTimeout

from monitor.logs import redact

log = logging.getLogger("invmon.state")

STORE_ERRORS: tuple[type[BaseException], ...] = (
    sqlite3.Error,
    psycopg.Error,
    PoolTimeout,
    OSError,
)
LOG_EVERY = 60.0  # seconds between two log lines about the same trouble


class StoreHealth:
    def __init__(self, where: str) -> None:
        self.where = where  # "state.path 'invmon-state.db'" or "state.dsn"
        self._problem: str | None = None  # guarded by _lock
        self._logged_at = float("-inf")  # guarded by _lock
        self._lock = threading.Lock()

    @property
    def problem(self) -> str | None:
        """Why the store does not work, or None since the last failure was followed by a
        successful write."""
        with self._lock:
            return self._problem

    @contextmanager
    def guard(self, doing: str, reads_only: bool = False) -> Iterator[None]:
        """`doing` says what failed, in the log line. A success of a use that writes clears
        the problem; one that `reads_only` does not."""
        try:
            yield
        except STORE_ERRORS as exc:
            self._failed(doing, exc)
        else:
            if not reads_only:
                with self._lock:
                    self._problem = None

    def _failed(self, doing: str, exc: BaseException) -> None:
        reason = redact(
            str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        )
        problem = f"the state store ({self.where}) failed while {doing}: {reason}"
        with self._lock:
            self._problem = problem
            now = time.monotonic()
            if now - self._logged_at < LOG_EVERY:
                return
            self._logged_at = now
        log.error(
            "%s; nothing is stored and no alert is planned until it works again "
            "(docs/operating.md: Recovering the state store)",
            problem,
        )
