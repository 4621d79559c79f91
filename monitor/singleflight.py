"""One computation at a time, its answer shared: for work that many threads may want at
once (a replica's lag, the status page's read of the store) and that must not be held
behind a lock while it calls out.

The first caller computes with no lock held; callers that arrive meanwhile wait, at most
`wait` seconds, for that answer (or its exception) instead of computing it again, and get
None when it does not come in time, so a caller can say what it waited for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    def __init__(self) -> None:
        # `_done` (and its lock) guards the three fields below; it is never held while
        # `compute` runs.
        self._done = threading.Condition()
        self._running = False
        self._round = 0  # how many computations have ended
        self._last: tuple[T | None, BaseException | None] = (None, None)

    def run(self, compute: Callable[[], T], wait: float) -> T | None:
        with self._done:
            if self._running:
                waiting_for = self._round + 1
                ended = self._done.wait_for(lambda: self._round >= waiting_for, timeout=wait)
                if not ended:
                    return None
                shared, failed = self._last
                if failed is not None:
                    raise failed
                return shared
            self._running = True
        value, error = self._compute(compute)
        if error is not None:
            raise error
        return value

    def within(self, compute: Callable[[], T], wait: float, name: str) -> T:
        """As `run`, but computed in a thread of its own (named `name`), so that the caller
        that starts it waits `wait` seconds at most too: TimeoutError past it. The
        computation goes on, and callers meanwhile wait for it rather than start another:
        a database that stopped answering holds one thread, not one per request."""
        with self._done:
            waiting_for = self._round + 1
            if not self._running:
                self._running = True
                threading.Thread(
                    target=self._compute, args=(compute,), name=name, daemon=True
                ).start()
            if not self._done.wait_for(lambda: self._round >= waiting_for, timeout=wait):
                raise TimeoutError(f"no answer within {wait:g}s")
            shared, failed = self._last
        if failed is not None:
            raise failed
        return shared  # type: ignore[return-value]  # set with failed None

    def _compute(self, compute: Callable[[], T]) -> tuple[T | None, BaseException | None]:
        """`compute` run with no lock held, its answer (or exception) kept and handed to
        the callers waiting for it."""
        value: T | None = None
        error: BaseException | None = None
        try:
            value = compute()
        except BaseException as exc:  # shared with the waiters, then raised to the caller
            error = exc
        with self._done:
            self._running = False
            self._round += 1
            self._last = (value, error)
            self._done.notify_all()
        return value, error
