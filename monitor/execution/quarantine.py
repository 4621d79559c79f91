"""Quarantine: an invariant whose run went on well past its timeout is a finding about the
invariant, not a bad turn of luck. The database could not stop it (an uninterruptible
function: libxml2, numeric arithmetic that never checks for a cancel), or the server was
too loaded to; either way, run every 15 minutes it would hold a replica's CPU forever. It
is held out of the schedule, on every daemon sharing the store, until its file changes
(its version: what runs, below) or an operator lifts it (`invmon unquarantine`); its owner
gets one alert saying why and by how much.

Pure: the decision and the record. The store keeps it (state.py), the daemon applies it.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import TYPE_CHECKING

from monitor.durations import precise_duration as _shown
from monitor.execution.deadlines import CAUSES

if TYPE_CHECKING:
    from monitor.invariants.loader import Invariant


def version_of(inv: Invariant) -> str:
    """What runs, as a short digest: the SQL, its header and its timeout and target. A
    change to any of them is a new invariant as far as a quarantine goes."""
    what = json.dumps(
        [inv.sql, inv.header.model_dump(mode="json"), inv.timeout.total_seconds(), inv.target],
        sort_keys=True,
    )
    return hashlib.sha256(what.encode()).hexdigest()[:16]


def overrun(took: timedelta, inv: Invariant, margin: timedelta, closed: bool = False) -> str | None:
    """Why a run whose query held its connection for `took` quarantines `inv`, or None: the
    database went on more than `margin` past the invariant's timeout. Only the database's
    time is judged (RunResult.held_ms): its sources are listed before, within their own
    timeouts, and a wait for the replica gate, a connection or the store is no finding
    about the query. `closed`: invmon ended the wait by closing the connection (Cut)."""
    longest = inv.timeout
    if took <= longest + margin:
        return None
    ran, over = _past(took, longest, margin)
    said = (
        f"a run took {ran}, {over} past its timeout of {_shown(longest)} (the margin is "
        f"{_shown(margin)}): the database did not stop it"
    )
    return f"{said}, and invmon closed the connection ({CAUSES})" if closed else said


def still_running(running_for: timedelta, inv: Invariant, margin: timedelta) -> str | None:
    """The same for a run still in flight, `running_for` since its query took its
    connection: found by the daemon's tick, since a run that never ends would otherwise
    never say so. Judged a margin later than `overrun`: at its timeout and the margin invmon
    closes the run's connection (deadlines.py) and the run ends, to be judged by `overrun`
    with what it met; one still in flight a margin after that did not end even so."""
    longest = inv.timeout
    if running_for <= longest + 2 * margin:
        return None
    ran, over = _past(running_for, longest, 2 * margin)
    return (
        f"a run has been going for {ran}, {over} past its timeout of {_shown(longest)} (the "
        f"margin is {_shown(margin)}), and did not end when invmon closed its connection: the "
        "database is not stopping it"
    )


def _past(took: timedelta, longest: timedelta, bound: timedelta) -> tuple[str, str]:
    """`took`, and how far past `longest` it went, as said: to the millisecond (or the
    microsecond) when tenths would round the excess to the `bound` it went past (5.002s
    read "2s past its timeout … (the margin is 2s)", as if within it)."""
    over = took - longest
    if _shown(over) != _shown(bound):
        return _shown(took), _shown(over)
    for digits in (3, 6):  # milliseconds, then microseconds, a timedelta's finest
        said = f"{over.total_seconds():.{digits}f}s"
        if said != f"{bound.total_seconds():.{digits}f}s":
            break
    return f"{took.total_seconds():.{digits}f}s", said
