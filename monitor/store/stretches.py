"""Held stretches: the rule for keeping consecutive runs that held as one row. Pure.

A run that held (status ok, count 0) and changed nothing (no incident opened, resolved
or moved on, no event) says only "it still held": one row per such run made a day of
runs at 5,000 invariants every minute 5.5 GB (bench/README.md, "The fleet at scale").
Instead, such a run extends the invariant's latest row when that row is a stretch it
continues; otherwise it is stored as a row of its own, which later runs may extend.

What a stretch keeps: how many runs it stands for (`repeats`), its first run's start and
slot, its last run's start, end and slot, and its last run's duration, lag and listing
time. What it drops: the times of the runs between, which all counted 0 on the same
target with the same columns. A violated, errored or stale run is always a row of its own
with everything it saw.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from monitor.clock import stamp
from monitor.execution.results import RunResult
from monitor.store.incidents import Decision

# A stretch closes an hour after its first run started: the history keeps a point at
# least every hour, retention prunes stretches at that grain, and a stretch row is still
# one of 24 a day per invariant.
STRETCH = timedelta(hours=1)

# What the latest stored row must be for a held run to extend it, besides being the
# invariant's latest: held too, on the same target, with the same columns, and begun
# within STRETCH of this run. Checked in the UPDATE itself (writes.extend_stretch), so a
# row that is not a stretch this run continues is never changed. Parameters: the run's
# id, target, columns JSON, and the earliest start a stretch it continues may have.
CONTINUES = (
    "id = ? AND status = 'ok' AND count = 0 AND target = ? AND columns_json = ? AND started_at >= ?"
)


def held_quietly(result: RunResult, decision: Decision) -> bool:
    """This run held and changed nothing: it may extend a stretch."""
    return (
        result.status == "ok"
        and result.count == 0
        and not decision.events
        and not decision.open_violation
        and not decision.resolve_violation
        and not decision.open_cannot_evaluate
        and not decision.resolve_cannot_evaluate
        and not decision.keys_appeared
        and not decision.keys_gone
        and not decision.keys_seen
    )


def earliest_start(started: datetime) -> str:
    """The earliest first start of a stretch a run that started at `started` continues."""
    return stamp(started - STRETCH)
