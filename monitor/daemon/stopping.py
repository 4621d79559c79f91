"""The bound of one stop: `daemon.shutdown_grace` for the runs in flight, then a margin
for the rest, each later step given a share of what is left; and the step under way,
which the supervisor names if the stop runs past its deadline (supervision.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

# A stop takes at most daemon.shutdown_grace for the runs in flight, then this for the rest
# (cancelling, the last deliveries, closing connections); past it the process exits 70.
STOP_MARGIN = timedelta(seconds=10)


class StopDeadline:
    """Read and written by the stopping thread only (the supervisor reads `doing`, a str
    swapped whole, so no lock)."""

    def __init__(self, grace: timedelta, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.grace = grace.total_seconds()
        self.seconds = self.grace + STOP_MARGIN.total_seconds()  # the whole stop's bound
        self._monotonic = monotonic
        self._deadline = monotonic() + self.seconds
        self.doing = "nothing yet"  # what the stop waits for now

    def left(self, most: float) -> float:
        """At most `most` seconds, and never past the deadline."""
        return max(0.0, min(most, self._deadline - self._monotonic()))

    def step(self, doing: str) -> None:
        self.doing = doing
