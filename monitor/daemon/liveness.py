"""Alive means doing its job: each part of the daemon that must keep moving says so here.

A part is either *periodic* (the scheduler's tick, the fleet's beat, the alerts turn, the
self-check turn: each says `beat(part)` every time it comes round, and is stalled when it
has not for longer than its bound) or an *activity* with an end (one run on a worker, a
reload: `busy(part, bound)` while it lasts, stalled when it lasts longer than its bound).
`/healthz` answers with the first stalled part, and so do the supervisor pings
(systemd's watchdog, below): a wedged thread turns the process unhealthy, so whatever
supervises it restarts it, instead of a green health check over a monitor that stopped.

Pure apart from `monotonic`, which the tests replace.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from monitor.durations import format_duration


@dataclass(frozen=True)
class Stall:
    part: str
    seconds: float  # since it last moved, or since the activity began
    bound: float

    def __str__(self) -> str:
        seconds, bound = (
            format_duration(timedelta(seconds=round(x))) for x in (self.seconds, self.bound)
        )
        return f"{self.part} has not moved for {seconds} (its bound is {bound})"


# The supervisor looks every second (supervision.TURN); a last look older than this may
# mean the process was just stopped, with its pause not recorded yet (Liveness.resumed).
LOOK_OVERDUE = 3.0


class Liveness:
    """Thread-safe: `_lock` guards the two tables and the record of looks and pauses below,
    and is never held across a call; `_looked` (on the same lock) wakes whoever waits for
    the supervisor's next look."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._looked = threading.Condition(self._lock)
        self._periodic: dict[str, tuple[float, float]] = {}  # part -> (last beat, bound)
        self._active: dict[int, tuple[str, float, float]] = {}  # token -> (part, start, bound)
        self._tokens = itertools.count()
        self._looks = 0  # the supervisor's looks so far; none: nobody watches for pauses
        self._last_look: float | None = None
        self._pause_end: float | None = None  # when the process's latest pause ended
        self._pauses = 0  # how many the supervisor found

    def expect(self, part: str, bound: float) -> None:
        """From now on `part` beats at least every `bound` seconds (counted from now)."""
        with self._lock:
            self._periodic[part] = (self._monotonic(), bound)

    def forget(self, part: str) -> None:
        """`part` stopped on purpose (the daemon is stopping)."""
        with self._lock:
            self._periodic.pop(part, None)

    def beat(self, part: str) -> None:
        now = self._monotonic()
        with self._lock:
            known = self._periodic.get(part)
            if known is not None:
                self._periodic[part] = (now, known[1])

    @contextmanager
    def busy(self, part: str, bound: float) -> Iterator[None]:
        """`part` is under way and must end within `bound` seconds."""
        started = self._monotonic()
        with self._lock:
            token = next(self._tokens)
            self._active[token] = (part, started, bound)
        try:
            yield
        finally:
            with self._lock:
                del self._active[token]

    def shift(self, seconds: float) -> None:
        """Every part's clock moved on `seconds` while no part could move (the process was
        stopped or its host suspended): each starts that much later, and the pause, which
        ends now, is recorded (`resumed`)."""
        now = self._monotonic()
        with self._lock:
            self._periodic = {p: (last + seconds, b) for p, (last, b) in self._periodic.items()}
            self._active = {t: (p, s + seconds, b) for t, (p, s, b) in self._active.items()}
            self._pause_end = now
            self._pauses += 1

    @property
    def pauses(self) -> int:
        """How many pauses of the process (SIGSTOP, a suspended host) the supervisor found."""
        with self._lock:
            return self._pauses

    def looked(self) -> None:
        """The supervisor looked (each turn, after `shift` when it found a pause)."""
        now = self._monotonic()
        with self._looked:
            self._looks += 1
            self._last_look = now
            self._looked.notify_all()

    def resumed(self, began: float, wait: float = 2 * LOOK_OVERDUE) -> float:
        """When something under way since `began` (a query on its connection) started to
        count: after the process's latest pause, if one ended since. The database went on
        while the process was stopped and then read its answer late, so the pause is no
        time the database took. Right after a pause the supervisor may not have looked yet:
        when its last look is older than LOOK_OVERDUE this waits for its next one, at most
        `wait` seconds (a process whose supervisor looks every second waits once, on
        resuming). With no supervisor looking, `began` itself."""
        now = self._monotonic()
        with self._looked:
            if self._last_look is not None and now - self._last_look > LOOK_OVERDUE:
                looks = self._looks
                self._looked.wait_for(lambda: self._looks != looks, wait)
            end = self._pause_end
        return began if end is None or end <= began else end

    def stalls(self) -> list[Stall]:
        """Every part that is stalled now, the longest overdue first."""
        now = self._monotonic()
        with self._lock:
            periodic = list(self._periodic.items())
            active = list(self._active.values())
        found = [Stall(p, now - last, bound) for p, (last, bound) in periodic if now - last > bound]
        found += [Stall(p, now - start, bound) for p, start, bound in active if now - start > bound]
        return sorted(found, key=lambda s: s.bound - s.seconds)

    def problem(self) -> str | None:
        stalls = self.stalls()
        return None if not stalls else str(stalls[0])
