"""When each invariant runs: its slots, and a timetable of what is due. Pure: no threads,
no clock of its own (`now` is always given), like arq's `next_cron` beside its worker.

A *slot* is a nominal fire time computed from the schedule alone: an interval's slots are
anchored at the Unix epoch (every 15 minutes means :00, :15, :30, :45), a cron's are its
fire times. Slots are the same on every daemon, so several daemons can agree on which run
is which. A slot actually starts a little after its nominal time (a jitter that is a stable
function of the invariant and the slot, at most a tenth of the period), so a thousand
invariants on the same schedule do not hit the replica in the same second.

Missed slots are not caught up: a run that starts late evaluates the latest slot
(coalescing), and an invariant never runs twice at once.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from monitor.durations import CronSchedule, IntervalSchedule, Schedule, cron_trigger
from monitor.store.claims import Due

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@cache
def _cron(expression: str) -> Any:
    return cron_trigger(expression)


def next_slot(schedule: Schedule, after: datetime) -> datetime:
    """The first slot strictly after `after`."""
    if isinstance(schedule, IntervalSchedule):
        every = schedule.every
        elapsed = (after - EPOCH) // every
        return EPOCH + (elapsed + 1) * every
    fire = _cron(schedule.expression).get_next_fire_time(None, after + timedelta(seconds=1))
    return fire.astimezone(UTC)  # type: ignore[no-any-return]


def latest_slot(schedule: Schedule, now: datetime) -> datetime:
    """The last slot at or before `now`."""
    if isinstance(schedule, IntervalSchedule):
        every = schedule.every
        return EPOCH + ((now - EPOCH) // every) * every
    # A cron has no "previous fire time": look back twice as far each step until a slot is
    # found, then walk forward to the last one not after `now`.
    assert isinstance(schedule, CronSchedule)
    lookback = timedelta(minutes=1)
    while True:
        candidate = next_slot(schedule, now - lookback)
        if candidate <= now:
            break
        lookback *= 2
    while (following := next_slot(schedule, candidate)) <= now:
        candidate = following
    return candidate


def period(schedule: Schedule, slot: datetime) -> timedelta:
    if isinstance(schedule, IntervalSchedule):
        return schedule.every
    return next_slot(schedule, slot) - slot


def spread(name: str, slot: datetime, schedule: Schedule, max_jitter: timedelta) -> timedelta:
    """How long after its nominal time this slot starts: stable for (name, slot), below
    `max_jitter` and a tenth of the period."""
    ceiling = min(max_jitter, period(schedule, slot) / 10)
    digest = hashlib.sha256(f"{name}@{slot.isoformat()}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return ceiling * fraction


@dataclass
class _Entry:
    schedule: Schedule
    next_slot: datetime
    run_at: datetime


class Timetable:
    """What is due when. Not thread-safe: its owner serialises calls.

    The entries are kept in a heap by start time as well, so a turn costs what is due, not
    the number of invariants: the daemon ticks when the next start comes (jobs.py), up to
    ten times a second, rather than once a second over every entry."""

    def __init__(self, max_jitter: timedelta) -> None:
        self.max_jitter = max_jitter
        self._entries: dict[str, _Entry] = {}
        # (run_at, name) of every entry, and of entries since replaced: an item whose
        # run_at is no longer its entry's is stale, skipped when it comes to the top.
        self._heap: list[tuple[datetime, str]] = []
        # Due, but their run was still in flight at the last turn: tried at every turn.
        self._deferred: set[str] = set()

    def _put(self, name: str, entry: _Entry) -> None:
        self._entries[name] = entry
        heapq.heappush(self._heap, (entry.run_at, name))
        if len(self._heap) > 2 * len(self._entries) + 64:  # replaced entries pile up
            self._heap = [(e.run_at, n) for n, e in self._entries.items()]
            heapq.heapify(self._heap)

    def sync(self, schedules: Mapping[str, Schedule], now: datetime) -> None:
        """Follow the loaded invariants: a new one is due now (its first run happens at
        start-up or when its file appears); one whose schedule changed waits for its next
        slot; a removed one is dropped."""
        for name in set(self._entries) - set(schedules):
            del self._entries[name]
            self._deferred.discard(name)
        for name, schedule in schedules.items():
            entry = self._entries.get(name)
            if entry is None:
                self._put(name, _Entry(schedule, latest_slot(schedule, now), now))
            elif entry.schedule != schedule:
                self._deferred.discard(name)
                self._put(name, self._after(name, schedule, now))

    def _after(self, name: str, schedule: Schedule, moment: datetime) -> _Entry:
        slot = next_slot(schedule, moment)
        return _Entry(schedule, slot, slot + spread(name, slot, schedule, self.max_jitter))

    def due(self, now: datetime, busy: Collection[str] = ()) -> list[Due]:
        """Every invariant whose start time has come and that is not running, with the slot
        it evaluates (the latest one: missed slots are coalesced); each is then scheduled
        for its next slot."""
        ready = [n for n in self._deferred if n not in busy]
        self._deferred.difference_update(ready)
        while self._heap and self._heap[0][0] <= now:
            run_at, name = heapq.heappop(self._heap)
            entry = self._entries.get(name)
            if entry is None or entry.run_at != run_at:
                continue  # removed, or rescheduled since
            if name in busy:
                self._deferred.add(name)
            else:
                ready.append(name)
        started = []
        for name in sorted(set(ready)):
            entry = self._entries[name]
            slot = max(entry.next_slot, latest_slot(entry.schedule, now))
            started.append(Due(name, slot))
            self._put(name, self._after(name, entry.schedule, slot))
        return started

    def next_start(self) -> datetime | None:
        """When the earliest entry not yet due starts; None when there is none. (Those due
        but still running wait for their run to end: tried at every turn.)"""
        while self._heap:
            run_at, name = self._heap[0]
            entry = self._entries.get(name)
            if entry is not None and entry.run_at == run_at and name not in self._deferred:
                return run_at
            heapq.heappop(self._heap)  # stale, or deferred (it is back once it runs)
        return None

    def next_run(self, name: str) -> datetime | None:
        entry = self._entries.get(name)
        return None if entry is None else entry.run_at

    def __contains__(self, name: object) -> bool:
        return name in self._entries
