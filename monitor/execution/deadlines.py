"""Client-side deadlines: a bound on the waits the server cannot end.

statement_timeout and lock_timeout fire inside the server process. One that is stopped
(SIGSTOP, a paused VM), wedged in code that never looks for a cancel, or cut off by a network
that drops packets without closing the connection never ends the wait, and libpq waits on
its socket for as long as the kernel keeps it open: a blocked read has no bound of its own.
The thread so blocked holds one of its target's workers, or, reading the replica status,
every run of its target, and the daemon looks alive meanwhile.

`Deadlines.bounded` arms a bound around one wait on a connection. Once it has passed, the
watcher shuts the connection's socket: the blocked read returns at once, the connection is
broken (the pool discards it, the next wait gets a new one) and the waiter gets `Cut`, which
says what went unanswered, for how long, and which bound it passed, where psycopg would say
"server closed the connection unexpectedly", which is not what happened.

Time is `monotonic`'s, counted from the process's latest pause (`resumed`, the daemon's
Liveness.resumed): a process stopped with a wait armed has not been waiting on the database.
The watcher also takes a look of its own more than a second later than it meant for such a
pause, since the supervisor records one only at its next look.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg

from monitor.durations import precise_duration

log = logging.getLogger("invmon.deadlines")

# The watcher looks at least this often while a wait is armed, so a clock moved by hand in a
# test is seen within it; and a look later than meant by more than this is a pause.
_LOOK = 1.0


CUT = "invmon closed the connection"  # how Cut's text, and so a cut run's error, begins
CAUSES = (
    "a server process stopped, or busy in code that does not look for a cancel, or a network "
    "that drops packets without closing the connection"
)


class Cut(psycopg.OperationalError):
    """A wait that invmon ended by closing its connection (Deadlines). Its text says what
    was waited for, how long, and past which bound."""


def own_questions(connect_timeout: timedelta, margin: timedelta) -> tuple[timedelta, str]:
    """The bound on one of invmon's own questions (the replica status, the role, a
    connection's reset), which the server answers in milliseconds: as long as a connection
    may take to open, and the overrun margin; and the bound in words, for Cut's text."""
    bound = connect_timeout + margin
    return bound, (
        f"the bound of invmon's own questions, {precise_duration(bound)} "
        "(database.connect_timeout and daemon.overrun_margin)"
    )


def past_timeout(timeout: timedelta, margin: timedelta) -> tuple[timedelta, str]:
    """The bound on a statement the server stops at `timeout` (statement_timeout): the
    overrun margin later it is overdue (quarantine.py); and the bound in words."""
    return timeout + margin, (
        f"its timeout, {precise_duration(timeout)}, and daemon.overrun_margin, "
        f"{precise_duration(margin)}"
    )


@dataclass(eq=False)  # each wait is itself, however alike two are
class _Wait:
    what: str  # "the query", "the replica status": the subject of Cut's sentence
    bound: float  # seconds
    past: str  # the bound in words: "its timeout, 30s, and daemon.overrun_margin, 10s"
    began: float  # on the monotonic clock, moved on by the pauses the watcher saw
    fd: int  # the connection's socket, open while the wait is armed
    causes: str = CAUSES  # what can hold an answer that long, for Cut's text
    cut_after: float | None = None  # seconds waited when the watcher cut it

    def cut(self) -> Cut:
        waited = precise_duration(timedelta(seconds=self.cut_after or 0))
        return Cut(
            f"{CUT}: {self.what} had no answer after {waited}, past {self.past}; the server "
            f"did not end it ({self.causes})"
        )


def never_paused(began: float) -> float:
    """`resumed` where nothing records pauses (`check`): a wait counts whole."""
    return began


class Deadlines:
    """Bounds on waits on connections, and one watcher thread that enforces them."""

    def __init__(
        self,
        name: str,
        monotonic: Callable[[], float] = time.monotonic,
        resumed: Callable[[float], float] = never_paused,
    ) -> None:
        self._name = name  # the watcher thread's, for a thread dump
        self._monotonic = monotonic
        self._resumed = resumed
        self._lock = threading.Lock()  # guards _waits, _thread, _closed and _look_by
        self._changed = threading.Condition(self._lock)  # a wait armed, or close()
        self._waits: set[_Wait] = set()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._look_by: float | None = None  # when the watcher meant to look next

    @contextlib.contextmanager
    def bounded(
        self,
        conn: psycopg.Connection[Any],
        bound: timedelta,
        what: str,
        past: str,
        causes: str = CAUSES,
    ) -> Iterator[None]:
        """Wait on `conn` inside the block for `bound` at most: past it, the connection is
        closed under the wait and the block raises Cut. `what` is what is waited for, `past`
        the bound in words, `causes` what can hold an answer that long, for Cut's text."""
        try:
            fd = conn.pgconn.socket
        except psycopg.Error:  # closed or lost: the block meets that itself
            yield
            return
        wait = _Wait(what, bound.total_seconds(), past, self._monotonic(), fd, causes)
        start = None
        with self._lock:
            self._waits.add(wait)
            # A watcher that looks within _LOOK anyway, sooner than this bound can pass, is
            # not woken: that cost a thread switch on each of the store's many quick
            # statements (about 60 µs each, a review measured).
            looking = self._thread is not None and self._look_by is not None
            if not (looking and wait.bound > _LOOK):
                # The watcher is woken to look now: a look much later is a pause (_pauses).
                self._look_by = min(self._look_by or wait.began, wait.began)
                self._changed.notify()
            if self._thread is None and not self._closed:
                start = self._thread = threading.Thread(
                    target=self._watch, name=f"invmon-deadlines-{self._name}", daemon=True
                )
        if start is not None:
            start.start()
        answered: BaseException | None = None
        try:
            yield
        except BaseException as exc:
            if wait.cut_after is None:
                raise
            answered = exc  # whatever ended the block, the connection was cut under it
        finally:
            # Disarmed before the caller can close `conn`: the watcher never touches a
            # socket number that may since belong to another connection.
            with self._lock:
                self._waits.discard(wait)
        if wait.cut_after is not None:
            # Cut: the socket is shut, or about to be, even where an answer (or an error)
            # came as the bound passed; so the connection is done for, closed now (never
            # lent again with a shut socket) and said so, not as the driver's words at its
            # next use.
            conn.close()
            raise wait.cut() from answered

    def cut_all(self, why: str) -> int:
        """Cut every wait armed now, as its bound passing would: for an interrupt whose
        cancels did not reach the server (one that stopped answering), so that no thread
        waits on it on the way out. `why` takes the bound's place in Cut's text. How many."""
        now = self._monotonic()
        due = []
        with self._lock:
            for armed in self._waits:
                if armed.cut_after is not None:
                    continue
                try:
                    fd = os.dup(armed.fd)  # as _due: the socket outlives a disarm
                except OSError:
                    continue
                armed.cut_after = now - armed.began
                armed.past = why
                due.append(fd)
        for fd in due:
            _shut(fd)
        return len(due)

    @property
    def waiting(self) -> int:
        """How many waits are armed now."""
        with self._lock:
            return len(self._waits)

    def close(self) -> None:
        """End the watcher (the waits still armed are no longer bounded); 2 s at most."""
        with self._lock:
            self._closed = True
            thread = self._thread
            self._changed.notify()
        if thread is not None:
            thread.join(timeout=2)
            if thread.is_alive():
                log.warning("the deadline watcher %s did not end within 2s", thread.name)

    def _watch(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                now = self._monotonic()
                self._pauses(now)
                armed = [(w, w.began) for w in self._waits if w.cut_after is None]
            # Outside the lock: the daemon's Liveness.resumed can wait for the supervisor's
            # next look, and arming and disarming must not wait with it.
            since = [(w, self._resumed(began)) for w, began in armed]
            with self._lock:
                due, wait = self._due(now, since)
                if not due:
                    self._changed.wait(wait)
                    continue
            for fd, cut in due:
                _shut(fd)
                # The waiter says it too, with its own subject (the run, the gate): info here.
                log.info("%s", cut.cut())

    def _pauses(self, now: float) -> None:
        """A look this much later than meant: the process did not run meanwhile (SIGSTOP,
        a paused VM), and no wait armed was on the database for that time; the supervisor
        records a pause only at its next look. Judged on the reading the bounds are then
        judged on, so a pause that ends in between cannot be missed. Under _lock."""
        if self._look_by is not None and now - self._look_by > _LOOK:
            for armed in self._waits:
                armed.began += now - self._look_by

    def _due(
        self, now: float, since: list[tuple[_Wait, float]]
    ) -> tuple[list[tuple[int, _Wait]], float | None]:
        """The waits past their bound at `now`, counted from `since`, each marked cut with
        its socket duplicated, and how long to wait for the next otherwise (None: until one
        is armed). Under _lock."""
        due, nearest = [], None
        for armed, start in since:
            if armed not in self._waits or armed.cut_after is not None:
                continue  # ended since the list was taken
            left = start + armed.bound - now
            if left > 0:
                nearest = left if nearest is None else min(nearest, left)
                continue
            try:
                # A duplicate keeps the socket itself open after `bounded` disarms and the
                # owner closes its connection; dup is a system call that does not block.
                fd = os.dup(armed.fd)
            except OSError:
                continue
            armed.cut_after = now - start
            due.append((fd, armed))
        if self._waits:
            nearest = min(nearest or _LOOK, _LOOK)
        self._look_by = None if nearest is None else now + nearest
        return due, nearest


def _shut(fd: int) -> None:
    """Shut the socket both ways, which wakes a read blocked on it, and close `fd` (a
    duplicate: the connection's own descriptor is its owner's to close)."""
    with socket.socket(fileno=fd) as sock, contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
