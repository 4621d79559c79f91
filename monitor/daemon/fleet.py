"""Several daemons sharing one schedule through one PostgreSQL state store. Pure: which
daemon should take a slot, and when the others step in.

Every daemon computes the same slots (slots.py), so a slot is a name the fleet agrees on.
Each due slot has one *preferred* daemon, chosen by rendezvous hashing over the daemons
seen alive: every daemon computes the same answer without talking to the others, the work
spreads evenly, and when a daemon joins or leaves only its own share moves. The preferred
daemon claims the slot at once; any other waits `handoff` first, so a preferred daemon that
died (but is still listed as alive) delays the slot by at most that long. Whoever claims
first evaluates: the claim itself is one conditional INSERT in the store (claims.py), the
single rule that makes a slot run once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from monitor.store.claims import Due


def preferred(name: str, slot: datetime, members: Collection[str]) -> str | None:
    """The daemon that should take this slot: the highest hash of (daemon, slot), the
    same on every daemon that sees the same members; None when there are none."""
    if not members:
        return None

    def weight(member: str) -> bytes:
        return hashlib.sha256(f"{member}\x00{name}\x00{slot.isoformat()}".encode()).digest()

    return max(sorted(members), key=weight)


@dataclass(frozen=True)
class Waiting:
    """A due slot not yet claimed here: tried from `try_at` on."""

    slot: datetime
    try_at: datetime


class Queue:
    """The due slots this daemon is about to claim: at most one per invariant (a newer slot
    replaces an older one still waiting, as a late single daemon coalesces missed slots).
    Not thread-safe: its owner serialises calls."""

    def __init__(self, me: str, handoff: timedelta) -> None:
        self.me = me
        self.handoff = handoff
        self._waiting: dict[str, Waiting] = {}

    def add(self, due: Iterable[Due], members: Collection[str], now: datetime) -> None:
        for item in due:
            mine = preferred(item.name, item.slot, {*members, self.me}) == self.me
            self._waiting[item.name] = Waiting(item.slot, now if mine else now + self.handoff)

    def ready(self, now: datetime) -> list[Due]:
        """The slots to try to claim now."""
        return [Due(n, w.slot) for n, w in sorted(self._waiting.items()) if w.try_at <= now]

    def settle(self, item: Due) -> None:
        """Claimed here or by another daemon: no longer waiting."""
        if (waiting := self._waiting.get(item.name)) is not None and waiting.slot == item.slot:
            del self._waiting[item.name]

    def keep_only(self, names: Collection[str]) -> None:
        """Forget the slots of invariants no longer loaded. (At every tick: it looks at the
        slots waiting, not at every name loaded.)"""
        for name in [n for n in self._waiting if n not in names]:
            del self._waiting[name]

    def next_try(self) -> datetime | None:
        """When the earliest slot waiting here is to be tried; None when none waits."""
        return min((w.try_at for w in self._waiting.values()), default=None)

    def __len__(self) -> int:
        return len(self._waiting)
