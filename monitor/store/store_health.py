"""Is the state store working? A damaged SQLite file, a locked or unreachable PostgreSQL:
every write fails, nothing is stored, no alert is planned. That must not be silent.

Each use of the store by the daemon goes through `guard`: a failure is caught (the daemon
goes on scheduling), remembered, logged as one clear line per minute at most, shown on
/healthz (503) and /metrics (`invmon_state_store_ok 0`). A failure of a use that recurs
(recording runs, claiming slots, the heartbeat, the alerts turn) is cleared only by a
success of that use: a store that takes the heartbeat and the reads but refuses every run
(one table's disk or index broken, a grant revoked) stores nothing that matters, and must
not look healthy. A failure of a one-off use (quarantining, a reload's record) is cleared
by the next success of any use, as it may never be tried again.
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
ONE_OFF = ""  # the key of the one-off uses' last failure


class StoreHealth:
    def __init__(self, where: str) -> None:
        self.where = where  # "state.path 'invmon-state.db'" or "state.dsn"
        # Each use whose last attempt failed -> why, the latest last (guarded by _lock).
        self._problems: dict[str, str] = {}
        self._logged_at = float("-inf")  # guarded by _lock
        self._lock = threading.Lock()

    @property
    def problem(self) -> str | None:
        """Why the store does not work (the latest of the uses whose last attempt failed),
        or None when every use's last attempt succeeded."""
        with self._lock:
            return next(reversed(self._problems.values()), None)

    @contextmanager
    def guard(self, doing: str, recurring: str | None = None) -> Iterator[None]:
        """`doing` says what failed, in the log line. `recurring` names a use that comes
        round again (one name for all invariants: `recording runs`): its failure lasts
        until it succeeds. Without it, the use is one-off: any success clears its failure."""
        key = recurring or ONE_OFF
        try:
            yield
        except STORE_ERRORS as exc:
            self._failed(doing, key, exc)
        else:
            with self._lock:
                self._problems.pop(ONE_OFF, None)
                if recurring is not None:
                    self._problems.pop(recurring, None)

    def _failed(self, doing: str, key: str, exc: BaseException) -> None:
        reason = redact(
            str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        )
        problem = f"the state store ({self.where}) failed while {doing}: {reason}"
        with self._lock:
            self._problems.pop(key, None)  # re-added: the latest comes last
            self._problems[key] = problem
            now = time.monotonic()
            if now - self._logged_at < LOG_EVERY:
                return
            self._logged_at = now
        log.error(
            "%s; nothing is stored and no alert is planned until it works again "
            "(docs/operating.md: Recovering the state store)",
            problem,
        )
