"""Is the state store working? A damaged SQLite file, a locked or unreachable PostgreSQL:
every write fails, nothing is stored, no alert is planned. That must not be silent.

Each use of the store by the daemon goes through `guard`: a failure is caught (the daemon
goes on scheduling), remembered, logged as one clear line per minute at most, shown on
/healthz (503) and /metrics (`invmon_state_store_ok 0`); the next successful write clears
it. Only a write: a read-only store (a promoted replica, a full disk) still answers reads,
and a read that went through said nothing about whether runs and alerts can be stored.

Unless the same use failed twice in a row: that is no passing blip, and only its own
success clears it. A damaged SQLite file failed every run's write while writes to its
other pages (the claims' renewals) went through, and each of those said the store was
fine again: /healthz stayed 200 while no run was stored, no incident opened and nothing
reached Slack. Such a failure counts while it is retried; one not tried again for
STALE_AFTER (its invariant removed) no longer does.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

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


def store_error(exc: BaseException) -> str:
    """A store error in one line, with any secret in it (a DSN's password) masked."""
    text = str(exc).strip()
    return redact(text.splitlines()[0] if text else type(exc).__name__)


LOG_EVERY = 60.0  # seconds between two log lines about the same trouble
# A use failing again and again is retried within a minute (a run's slot every lease); one
# not tried again for this long says nothing about the store now.
STALE_AFTER = 600.0


@dataclass
class _Failing:
    times: int  # failures in a row, with no success of this use between
    problem: str
    at: float  # the latest, on StoreHealth's monotonic clock


class StoreHealth:
    def __init__(self, where: str, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.where = where  # "state.path 'invmon-state.db'" or "state.dsn"
        self._monotonic = monotonic
        self._problem: str | None = None  # guarded by _lock
        self._failing: dict[str, _Failing] = {}  # by `doing`; guarded by _lock
        # Failures so far by what failed (`doing`); guarded by _lock.
        self._failures: Counter[str] = Counter()
        self._logged_at = float("-inf")  # guarded by _lock
        self._told = False  # a failure was logged since the last return; guarded by _lock
        self._lock = threading.Lock()

    @property
    def problem(self) -> str | None:
        """Why the store does not work: a use failing twice in a row, until it succeeds;
        else the latest failure, until a successful write. None when neither."""
        with self._lock:
            return self._problem_now()

    def _problem_now(self) -> str | None:
        """`problem`; the caller holds _lock."""
        now = self._monotonic()
        for failing in self._failing.values():
            if failing.times >= 2 and now - failing.at < STALE_AFTER:
                return failing.problem
        return self._problem

    def failures(self, *uses: str) -> int:
        """How many uses of the store have failed since the daemon started: those whose
        `doing` begins with one of `uses`, or all when none is given."""
        with self._lock:
            return sum(n for doing, n in self._failures.items() if doing.startswith(uses))

    @contextmanager
    def guard(self, doing: str, reads_only: bool = False) -> Iterator[None]:
        """`doing` says what failed, in the log line, and which use a later success is of. A
        success of a use that writes clears a single failure; one that `reads_only` does
        not. A use's own success clears its failures in a row."""
        try:
            yield
        except STORE_ERRORS as exc:
            self._failed(doing, exc)
        else:
            with self._lock:
                self._failing.pop(doing, None)
                was = self._problem
                if not reads_only:
                    self._problem = None
                back = was is not None and self._problem_now() is None and self._told
                if back:
                    self._told = False
            if back:  # its failure was logged: its return is too
                log.info("the state store (%s) works again", self.where)

    def _failed(self, doing: str, exc: BaseException) -> None:
        reason = store_error(exc)
        problem = f"the state store ({self.where}) failed while {doing}: {reason}"
        now = self._monotonic()
        with self._lock:
            self._problem = problem
            self._failures[doing] += 1
            before = self._failing.get(doing)
            self._failing = {d: f for d, f in self._failing.items() if now - f.at < STALE_AFTER}
            self._failing[doing] = _Failing(before.times + 1 if before else 1, problem, now)
            if now - self._logged_at < LOG_EVERY:
                return
            self._logged_at = now
            self._told = True
        log.error(
            "%s; nothing is stored and no alert is planned until it works again "
            "(docs/operating.md: Recovering the state store)",
            problem,
        )
