"""What the status page reads from the state store: a few short, bounded transactions.

The SQLite store is one connection behind a lock that every evaluation also takes, so the
page never holds it long: light columns only (never a run's sample, except the one shown),
LIMIT on everything, and the overview read once for all the visitors of a second or two
(page.py caches it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from monitor.clock import maybe_parse, parse_stamp
from monitor.store.incidents import event_kind
from monitor.store.mute_table import MuteTable
from monitor.store.mutes import Mute
from monitor.store.records import Incident, Run, StoredEvent
from monitor.store.state import StateStore
from monitor.store.storage import Tx

SPARK_RUNS = 30  # runs drawn in each sparkline
DETAIL_RUNS = 50  # runs listed on an invariant's page
DETAIL_INCIDENTS = 20  # incidents listed on an invariant's page
EVENTS_LIMIT = 500  # events of one incident (or one invariant's listed incidents)
KEYS_LIMIT = 200  # offending keys listed on an incident's page
DELIVERIES_LIMIT = 500
# Runs an invariant's chart reads at most: a week of runs once a minute (10,080), with room
# for the run at each edge of the window and a few retries. A 30-day window of such runs
# (43,200) shows its newest HISTORY_RUNS and says the older ones are not shown.
HISTORY_RUNS = 10_200
HISTORY_PAGE = 2_000  # runs per transaction, so evaluations get the store between them


@dataclass(frozen=True)
class RunPoint:
    """A run without its sample rows: what charts and run lists need."""

    id: int
    invariant: str
    started_at: datetime
    finished_at: datetime
    status: str
    count: int | None
    duration_ms: float | None
    replica_lag_seconds: float | None
    error: str | None
    target: str
    listing_ms: float | None = None  # its sources' listing, part of duration_ms
    # A held stretch (monitor/store/stretches.py) stands for `repeats` runs, the last of
    # which started at last_started_at; a single run has 1 and None.
    repeats: int = 1
    last_started_at: datetime | None = None


@dataclass(frozen=True)
class ActionRecord:
    """An acknowledgement, unacknowledgement or snooze, as recorded (incident_actions)."""

    incident_id: int
    action: str
    actor: str
    actor_name: str | None
    detail: str | None
    source: str
    at: datetime


@dataclass(frozen=True)
class SlackPost:
    """A message (or file) the ledger delivered, or is delivering, about an incident."""

    action: str
    kind: str  # the event or "reminder" it was about
    state: str
    created_at: datetime
    channel_id: str | None
    ts: str | None


@dataclass(frozen=True)
class Overview:
    """Everything the front page shows, read at one moment."""

    latest: dict[str, RunPoint]  # each invariant's last run
    # The offending-row counts of its last SPARK_RUNS runs, oldest first (None: the run
    # counted nothing): all its sparkline draws, so no more of those runs is read.
    counts: dict[str, list[int | None]]
    open_incidents: list[Incident]
    mutes: list[Mute] = field(default_factory=list)  # in force or scheduled
    # How many runs those counts stand for, where a held stretch (one count) stood for
    # more than one: absent, one run each.
    runs: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class InvariantRecords:
    runs: list[RunPoint]  # newest first
    last_sample: Run | None  # the latest run that counted, with its rows
    incidents: list[Incident]  # newest first
    events: dict[int, list[StoredEvent]] = field(default_factory=dict)  # by incident, in order


@dataclass(frozen=True)
class History:
    """An invariant's runs since a moment, newest first: when each started and its count
    (a held stretch gives two points, its last run's start and its first's)."""

    runs: list[tuple[datetime, int | None]]
    truncated: bool  # the window held older runs than these, not read
    # The runs of held stretches between their drawn points: len(runs) + between is how
    # many runs the points stand for. When the oldest stretch began before the window,
    # all of its runs are counted and `reaches_back` says so: when each ran was not kept.
    between: int = 0
    reaches_back: bool = False

    @property
    def repeats(self) -> int:
        """How many runs the chart stands for."""
        return len(self.runs) + self.between


@dataclass(frozen=True)
class IncidentRecords:
    incident: Incident
    events: list[StoredEvent]
    actions: list[ActionRecord]
    keys: list[tuple[str, datetime, datetime, datetime | None]]  # key, first, last, gone
    keys_total: int
    posts: list[SlackPost]


_POINT = (
    "id, invariant, started_at, finished_at, status, count, duration_ms,"
    " replica_lag_seconds, error, target, listing_ms, repeats, last_started_at"
)


def _point(row: tuple[Any, ...]) -> RunPoint:
    i, inv, started, finished, status, count, duration, lag, error, target, listing = row[:11]
    repeats, last_started = row[11:]
    return RunPoint(
        int(i),
        str(inv),
        parse_stamp(started),
        parse_stamp(finished),
        str(status),
        None if count is None else int(count),
        None if duration is None else float(duration),
        None if lag is None else float(lag),
        error,
        str(target),
        None if listing is None else float(listing),
        int(repeats),
        None if last_started is None else parse_stamp(last_started),
    )


def _last_runs(tx: Tx, invariant: str, limit: int) -> list[tuple[Any, ...]]:
    """Its last `limit` runs' _POINT columns, newest first: one index range scan
    (runs_by_invariant: invariant, id)."""
    return tx.rows(
        f"SELECT {_POINT} FROM runs WHERE invariant = ? ORDER BY id DESC LIMIT ?",
        (invariant, limit),
    )


def _points(tx: Tx, invariant: str, limit: int) -> list[RunPoint]:
    return [_point(r) for r in _last_runs(tx, invariant, limit)]


_COUNT = _POINT.split(", ").index("count")
_REPEATS = _POINT.split(", ").index("repeats")


def _recent(
    tx: Tx, postgres: bool, names: list[str], limit: int
) -> list[tuple[RunPoint, list[int | None], int]]:
    """The last run of each of `names` that has runs, with the counts of its last `limit`
    rows of runs, oldest first, and how many runs those rows stand for."""
    if not postgres:
        # In-process: a statement per invariant costs no round trip. Each is one range scan
        # of runs_by_invariant (invariant, id); only the newest row becomes a RunPoint.
        each = (_last_runs(tx, n, limit) for n in names)
        return [
            (
                _point(rows[0]),
                [_count(r[_COUNT]) for r in reversed(rows)],
                sum(int(r[_REPEATS]) for r in rows),
            )
            for rows in each
            if rows
        ]
    # One statement, where a statement per invariant was a round trip each: 1,000 of them
    # were most of the 516 ms `/` took cold at 1,000 invariants (bench/page.py). Per name,
    # the same two short scans of runs_by_invariant; the counts come back as one array, not
    # 30 whole rows (30,000 at 1,000 invariants were ~90 ms of Python to unpack).
    # The planner prices each scan as the whole history before its LIMIT, so past a few
    # hundred invariants the estimate crosses jit_above_cost and compiling took ~8 ms of a
    # 30 ms statement that JIT cannot speed up: off, for this transaction only.
    tx.run("SET LOCAL jit = off")
    rows = tx.rows(
        f"SELECT {_POINT}, recent.counts, recent.runs FROM unnest(?::text[]) AS n (name)"
        f" CROSS JOIN LATERAL (SELECT {_POINT} FROM runs WHERE invariant = n.name"
        " ORDER BY id DESC LIMIT 1) AS newest"
        " CROSS JOIN LATERAL (SELECT array_agg(r.count ORDER BY r.id), sum(r.repeats) FROM"
        " (SELECT id, count, repeats FROM runs WHERE invariant = n.name"
        " ORDER BY id DESC LIMIT ?) AS r) AS recent (counts, runs)",
        (names, limit),
    )
    return [(_point(row[:-2]), [_count(c) for c in row[-2]], int(row[-1])) for row in rows]


def _count(value: Any) -> int | None:
    return None if value is None else int(value)


def read_overview(store: StateStore, names: Iterable[str], now: datetime | None = None) -> Overview:
    """The latest run of every invariant the store knows or the daemon runs, the counts of
    its last SPARK_RUNS runs, the open incidents, and (with `now`) the mutes not over."""
    postgres = store.storage.kind == "postgresql"

    def reading(tx: Tx) -> list[tuple[RunPoint, list[int | None], int]]:
        known = {str(n) for (n,) in tx.rows("SELECT invariant FROM invariant_state")}
        # Subjects such as "(replica)" have a state row but no runs: they show as incidents.
        return _recent(tx, postgres, sorted(known | set(names)), SPARK_RUNS)

    recent = store.read(reading)
    latest = {newest.invariant: newest for newest, _, _ in recent}
    counts = {newest.invariant: counted for newest, counted, _ in recent}
    runs = {newest.invariant: n for newest, counted, n in recent if n != len(counted)}
    table = MuteTable(store.storage)
    mutes = table.listed(now) if now is not None and table.kept() else []
    return Overview(latest, counts, store.open_incidents(), mutes, runs)


def _events(tx: Tx, where: str, params: tuple[Any, ...]) -> list[StoredEvent]:
    found = tx.rows(
        "SELECT id, incident_id, invariant, kind, created_at, payload_json FROM events "
        f"{where} ORDER BY id DESC LIMIT {EVENTS_LIMIT}",
        params,
    )
    return [
        StoredEvent(
            int(i), int(inc), str(inv), event_kind(str(kind)), parse_stamp(at), json.loads(payload)
        )
        for i, inc, inv, kind, at, payload in reversed(found)
    ]


def read_invariant(store: StateStore, name: str) -> InvariantRecords:
    runs = store.read(lambda tx: _points(tx, name, DETAIL_RUNS))
    counted = next((r for r in runs if r.count is not None), None)
    sample = None
    if counted is not None:
        # The one run whose rows are shown; its sample is bounded by limits.sample_bytes.
        sample = store.run(counted.id)
    incidents = store.incidents(name, limit=DETAIL_INCIDENTS)
    events: dict[int, list[StoredEvent]] = {}
    if incidents:
        oldest = min(i.id for i in incidents)
        found = store.read(
            lambda tx: _events(tx, "WHERE invariant = ? AND incident_id >= ?", (name, oldest))
        )
        for event in found:
            events.setdefault(event.incident_id, []).append(event)
    return InvariantRecords(runs, sample, incidents, events)


def _older_runs(tx: Tx, name: str, before: int | None, limit: int) -> list[tuple[Any, ...]]:
    older = "" if before is None else " AND id < ?"
    params = (name,) if before is None else (name, before)
    return tx.rows(
        "SELECT id, started_at, count, repeats, last_started_at FROM runs"
        f" WHERE invariant = ?{older}"
        " ORDER BY id DESC LIMIT ?",
        (*params, limit),
    )


def read_history(
    store: StateStore, name: str, since: datetime, limit: int = HISTORY_RUNS
) -> History:
    """The newest `limit` runs of `name` that started at `since` or later, and whether the
    window held more. Light columns, newest first along runs_by_invariant (invariant, id),
    in pages of HISTORY_PAGE runs, each its own short transaction: so the read is bounded by
    `limit` whatever the window holds, and stops at the first run older than `since` rather
    than filtering on the TEXT timestamp in SQL (an index scan that finds too few runs in
    the window would go on through all of the invariant's older ones). Runs are numbered as
    they are recorded, so a run older than the window means no later one is in it."""
    runs: list[tuple[datetime, int | None]] = []
    between = 0
    before: int | None = None
    while True:
        # One more than the limit: a run past it that is still in the window is the proof
        # that the window held more than was read.
        want = min(HISTORY_PAGE, limit + 1 - len(runs))
        page = store.read(partial(_older_runs, name=name, before=before, limit=want))
        for _, started, count, stretch, last_started in page:
            counted = None if count is None else int(count)
            # A held stretch is drawn as its last run and its first (or the window's
            # start, when it began before the window): the line between is its runs.
            first = parse_stamp(started)
            points = [parse_stamp(last_started or started)]
            if last_started is not None:
                points.append(max(first, since))
            if points[0] < since:
                return History(runs, False, between)
            if len(runs) + len(points) > limit:
                return History(runs, True, between)
            runs.extend((at, counted) for at in points)
            between += int(stretch) - len(points)
            if first < since:
                return History(runs, False, between, reaches_back=True)
        if len(page) < want:
            return History(runs, False, between)
        before = int(page[-1][0])


def read_incident(store: StateStore, incident_id: int) -> IncidentRecords | None:
    incident = store.incident(incident_id)
    if incident is None:
        return None

    def reading(
        tx: Tx,
    ) -> tuple[list[StoredEvent], list[ActionRecord], list[Any], int, list[SlackPost]]:
        events = _events(tx, "WHERE incident_id = ?", (incident_id,))
        actions = [
            ActionRecord(int(inc), str(a), str(actor), name, detail, str(src), parse_stamp(at))
            for inc, a, actor, name, detail, src, at in tx.rows(
                "SELECT incident_id, action, actor, actor_name, detail, source, at"
                " FROM incident_actions WHERE incident_id = ? ORDER BY id LIMIT ?",
                (incident_id, EVENTS_LIMIT),
            )
        ]
        keys = [
            (str(k), parse_stamp(first), parse_stamp(last), maybe_parse(gone))
            for k, first, last, gone in tx.rows(
                "SELECT offending_key, first_seen_at, last_seen_at, gone_at FROM incident_keys"
                " WHERE incident_id = ? ORDER BY first_seen_at, offending_key LIMIT ?",
                (incident_id, KEYS_LIMIT),
            )
        ]
        [(total,)] = tx.rows(
            "SELECT count(*) FROM incident_keys WHERE incident_id = ?", (incident_id,)
        )
        posts = [
            SlackPost(
                str(action),
                str(json.loads(payload or "{}").get("kind") or action),
                str(state),
                parse_stamp(created),
                channel,
                ts,
            )
            for action, state, created, channel, ts, payload in tx.rows(
                "SELECT action, state, created_at, slack_channel, slack_ts, payload_json"
                " FROM deliveries WHERE incident_id = ? ORDER BY id LIMIT ?",
                (incident_id, DELIVERIES_LIMIT),
            )
        ]
        return events, actions, keys, int(total), posts

    events, actions, keys, total, posts = store.read(reading)
    return IncidentRecords(incident, events, actions, keys, total, posts)
