"""Seeded concurrency and seeded faults for the refunds soak: one seed, one history.

Turns are generators that yield between their steps. The scheduler advances one turn by one
step at a time, choosing which by the seed, so two turns on one dispute interleave at every
point where a real request could be preempted, and a seed replays exactly the same history.
Threads would interleave too, but no seed would bring their interleaving back.

A step is one database transaction, committed before the turn yields: no transaction spans
a yield, so one connection serves every turn and no turn waits on another's lock.

The fault injector sits at the boundary between the client and the service (a remote call)
and makes that call mislead its caller in the three ways a network does:

- lost reply: the effect landed, the caller saw a timeout;
- reset: nothing landed, the caller saw the connection reset;
- duplicate: the request was delivered twice (a proxy retried it while the first was still
  running), the caller saw one reply.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")
Turn = Generator[None, None, T]

MAX_STEPS = 100_000  # a turn that never ends is a bug of the soak, not a long soak


class Timeout(Exception):
    """The caller gave up waiting: the request may or may not have landed."""


class Reset(Exception):
    """The connection dropped before the request reached the service."""


@dataclass
class Scheduler:
    rng: random.Random
    turns: list[Turn[object]] = field(default_factory=list)
    steps: int = 0

    def spawn(self, turn: Turn[object]) -> None:
        self.turns.append(turn)

    def run(self) -> None:
        """Advance a turn the seed chooses, one step at a time, until every turn is done."""
        while self.turns:
            if self.steps >= MAX_STEPS:
                raise RuntimeError(f"the soak ran {MAX_STEPS} steps without finishing")
            index = self.rng.randrange(len(self.turns))
            self.steps += 1
            try:
                next(self.turns[index])
            except StopIteration:
                self.turns.pop(index)


def arriving(after: int, turn: Turn[T]) -> Turn[T]:
    """`turn`, starting once the scheduler has given it `after` steps: a request that arrives
    later than the others."""
    for _ in range(after):
        yield
    return (yield from turn)


@dataclass
class Faults:
    """Decides, per call and by the seed, how a remote call misleads its caller."""

    rng: random.Random
    scheduler: Scheduler
    lost_reply: float = 0.15
    reset: float = 0.10
    duplicate: float = 0.10
    injected: Counter[str] = field(default_factory=Counter)

    def call(self, request: Callable[[], Turn[T]]) -> Turn[T]:
        roll = self.rng.random()
        if roll < self.reset:
            self.injected["reset"] += 1
            raise Reset("connection reset by peer")
        roll -= self.reset
        if roll < self.duplicate:
            # The copy runs as a turn of its own, side by side with the original.
            self.injected["duplicate"] += 1
            self.scheduler.spawn(request())
        elif roll - self.duplicate < self.lost_reply:
            self.injected["lost_reply"] += 1
            yield from request()
            raise Timeout("no reply within the deadline")
        return (yield from request())
