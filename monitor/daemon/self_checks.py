"""invmon's own invariants: queries over its state store, and rules over its schedule, that
return the offending rows when invmon itself stops doing its job. Pure: they read what they
are given (a transaction, `now`, the loaded schedules) and decide nothing else.

Each becomes an ordinary RunResult under a name no file can have (`invmon-self/…`), so it
opens, updates and resolves incidents and reaches Slack like any other invariant.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from monitor.clock import stamp
from monitor.daemon.slots import latest_slot, period
from monitor.durations import Schedule, format_duration
from monitor.execution.results import RunResult
from monitor.invariants.loader import OWN_CHECKS_SEVERITY, RESERVED_PREFIX
from monitor.store.context import IncidentContext
from monitor.store.storage import Tx

PREFIX = RESERVED_PREFIX  # no file can take these names


@dataclass(frozen=True)
class StoreCheck:
    name: str
    description: str
    sql: str  # each `?` is given the cutoff: now - watchdog.slo
    columns: tuple[str, ...]
    key: str = "id"

    def run(self, tx: Tx, cutoff: datetime) -> list[dict[str, Any]]:
        found = tx.rows(self.sql, [stamp(cutoff)] * self.sql.count("?"))
        return [dict(zip(self.columns, row, strict=True)) for row in found]


_DELIVERY_COLUMNS = ("id", "invariant", "action", "channel", "attempts", "last_error", "since")

STORE_CHECKS = (
    StoreCheck(
        f"{PREFIX}deliveries_pending",
        "Every alert reaches Slack within the SLO (watchdog.slo); these are still waiting.",
        "SELECT id, invariant, action, channel, attempts, last_error, created_at"
        " FROM deliveries WHERE state = 'PENDING' AND created_at < ?"
        # A reply held back on purpose (slack.thread_update_interval) and never tried is
        # late only once it has been due for the SLO, not from when it was planned.
        " AND (attempts > 0 OR next_attempt_at < ?) ORDER BY id",
        _DELIVERY_COLUMNS,
    ),
    StoreCheck(
        f"{PREFIX}deliveries_unknown",
        "A Slack call whose outcome was unknown is reconciled within the SLO; these are not.",
        "SELECT id, invariant, action, channel, attempts, last_error, unknown_since"
        " FROM deliveries WHERE state = 'UNKNOWN' AND unknown_since < ? ORDER BY id",
        _DELIVERY_COLUMNS,
    ),
    StoreCheck(
        f"{PREFIX}deliveries_failed",
        "No alert of an open incident failed for good: nobody saw these.",
        "SELECT d.id, d.invariant, d.action, d.channel, d.attempts, d.last_error, d.updated_at"
        " FROM deliveries AS d JOIN incidents AS i ON i.id = d.incident_id"
        " WHERE d.state = 'FAILED' AND i.resolved_at IS NULL"
        # Not its own: each of its replies that failed was a new offending row, whose reply
        # failed in turn (its root had), two more every turn, for good.
        f" AND d.invariant <> '{PREFIX}deliveries_failed' ORDER BY d.id",
        _DELIVERY_COLUMNS,
    ),
    StoreCheck(
        f"{PREFIX}incidents_without_root",
        "Every open incident has a root message Slack confirmed within the SLO.",
        "SELECT i.id, i.invariant, i.kind, i.opened_at FROM incidents AS i"
        " WHERE i.resolved_at IS NULL AND i.opened_at < ? AND NOT EXISTS ("
        "  SELECT 1 FROM alert_roots AS r JOIN deliveries AS d ON d.id = r.delivery_id"
        "  WHERE r.incident_id = i.id AND d.state = 'SENT') ORDER BY i.id",
        ("id", "invariant", "kind", "opened_at"),
    ),
)
STALLED = f"{PREFIX}schedule_stalled"
STUCK = f"{PREFIX}runs_stuck"
DESCRIPTIONS = {
    **{c.name: c.description for c in STORE_CHECKS},
    STALLED: "Every invariant completes a run at least every two of its intervals.",
    STUCK: "No run stays in flight past its timeout.",
}
CONTEXT = {
    name: IncidentContext(severity=OWN_CHECKS_SEVERITY, description=text)
    for name, text in DESCRIPTIONS.items()
}


@dataclass(frozen=True)
class Loaded:
    """What the watchdog knows of one loaded invariant."""

    schedule: Schedule
    timeout: timedelta  # the longest a run may take, its sources' listings included


# A last run recorded further than this ahead of the daemon's clock: the wall clock stepped
# back (NTP, a VM restored), and every slot until then counts as run already (claims.py), so
# nothing runs until the clock gets there. Fleet daemons' clocks differ by less.
AHEAD_LIMIT = timedelta(minutes=1)


def stalled(
    loaded: Mapping[str, Loaded],
    last_recorded: Mapping[str, datetime],
    since: Mapping[str, datetime],
    now: datetime,
    max_jitter: timedelta,
    read_at: datetime | None = None,
) -> list[dict[str, Any]]:
    """Invariants with no recorded run for over two of their intervals, plus their timeout
    and their start's jitter, counted from their last run or from `since[name]`: when this
    daemon first had it (its start, or the reload that added its file; from the start, a
    file a reload added was stalled before it had had two intervals to run in). Also those
    whose last run is AHEAD_LIMIT past `read_at`, the clock when `last_recorded` was read
    (a slow read or a pause in between is no step back of the clock)."""
    read_at = now if read_at is None else read_at
    out = []
    for name, inv in sorted(loaded.items()):
        every = period(inv.schedule, latest_slot(inv.schedule, now))
        last = last_recorded.get(name)
        had = since.get(name, now)
        quiet_since = max(last, had) if last is not None else had
        why = None
        if now - quiet_since > 2 * every + inv.timeout + min(max_jitter, every / 10):
            why = "no run recorded for over two intervals"
        elif last is not None and last - read_at > AHEAD_LIMIT:
            # Never "late" by the rule above (now - last is negative), and silent for as long.
            why = (
                f"its last run is recorded {format_duration(last - read_at)} ahead of this "
                "daemon's clock: the wall clock stepped back, and its slots until then count "
                "as run"
            )
        if why is not None:
            out.append(
                {
                    "invariant": name,
                    "last_run": stamp(last) if last else None,
                    "expected_every": format_duration(every),
                    "why": why,
                }
            )
    return out


def stuck(
    in_flight: Mapping[str, datetime], loaded: Mapping[str, Loaded], now: datetime
) -> list[dict[str, Any]]:
    """Runs still in flight a minute past their timeout."""
    out = []
    for name, started in sorted(in_flight.items()):
        timeout = loaded[name].timeout if name in loaded else timedelta(0)
        if now - started > timeout + timedelta(minutes=1):
            out.append({"invariant": name, "started_at": stamp(started)})
    return out


def store_results(
    read: Callable[[Callable[[Tx], list[RunResult]]], list[RunResult]],
    now: datetime,
    slo: timedelta,
) -> list[RunResult]:
    """Every store check, read in one transaction."""

    def check_all(tx: Tx) -> list[RunResult]:
        return [RunResult.of_rows(c.name, c.run(tx, now - slo), now, c.key) for c in STORE_CHECKS]

    return read(check_all)
