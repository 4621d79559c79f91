"""The status page's view models, built from store records and loaded invariants. Pure.

Everything here is plain data for the templates: words, numbers, times already formatted,
links already percent-encoded. Nothing is escaped here: the templates autoescape every
value, so a hostile invariant name or row value is escaped in exactly one place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from monitor.clock import shown
from monitor.durations import human_duration
from monitor.invariants.loader import RESERVED_PREFIX, Invariant
from monitor.store.acks import MODE_WORDS
from monitor.store.incidents import while_open
from monitor.store.records import Incident, Run, StoredEvent
from monitor.text import counted, cut
from monitor.web.filters import Filters
from monitor.web.reads import (
    ActionRecord,
    IncidentRecords,
    InvariantRecords,
    Overview,
    RunPoint,
    SlackPost,
)
from monitor.web.sparkline import Sparkline, sparkline
from monitor.web.sqlhighlight import Span, highlight

CELL_LIMIT = 200  # characters of one value shown in a table cell
TEXT_LIMIT = 2000  # an error message or a description

# Worst first. Each status has a word and an icon, so it reads without colour. Icons are
# symbols common text fonts have (no emoji font is assumed on the reader's machine).
STATUS_ORDER = ("violated", "error", "stale", "pending", "ok")
STATUS_WORD = {
    "violated": "Violated",
    "error": "Error",
    "stale": "Stale",
    "pending": "Not run yet",
    "ok": "Holds",
}
STATUS_ICON = {"violated": "✖", "error": "⚠", "stale": "‖", "pending": "…", "ok": "✔"}
SEVERITY_ORDER = ("critical", "warning", "info")
KIND_WORD = {
    "violation": "Violation",
    "cannot_evaluate": "Cannot evaluate",
    "replica_stale": "Replica stale",
    "invalid_file": "Invalid file",
    "target_unreachable": "Target unreachable",
    "quarantined": "Quarantined",
}


def cell(value: Any) -> str:
    """A row value as the Slack table shows it (∅ for NULL, JSON for non-text), longer."""
    text = "∅" if value is None else value if isinstance(value, str) else json.dumps(value)
    return cut(" ".join(str(text).split()), CELL_LIMIT)


def invariant_href(name: str) -> str:
    # Names are paths (a/b); anything else in them (?, #, %, quotes) is percent-encoded.
    return "/invariants/" + quote(name, safe="/")


def incident_href(incident_id: int) -> str:
    return f"/incidents/{incident_id}"


def when(moment: datetime | None) -> str:
    return shown(moment, seconds=True) if moment else "–"


def iso(moment: datetime | None) -> str:
    return moment.isoformat() if moment else ""


def duration_ms(ms: float | None, listing_ms: float | None = None) -> str:
    """A run's time; with sources, the listing's share of it in brackets."""
    if ms is None:
        return "–"
    took = f"{ms:,.0f} ms" if ms < 10_000 else f"{ms / 1000:,.1f} s"
    return took if listing_ms is None else f"{took} (listing {duration_ms(listing_ms)})"


def age(since: datetime, now: datetime) -> str:
    return human_duration(max(timedelta(0), now - since))


@dataclass(frozen=True)
class Status:
    key: str  # violated | error | stale | pending | ok
    word: str
    icon: str


def status_of(key: str) -> Status:
    return Status(key, STATUS_WORD.get(key, key), STATUS_ICON.get(key, "?"))


@dataclass(frozen=True)
class InvariantInfo:
    """What the running daemon knows of a loaded file."""

    name: str
    description: str
    severity: str
    owner: str | None
    runbook: str | None
    tags: tuple[str, ...]
    target: str
    schedule: str
    timeout: str
    key: tuple[str, ...]
    sql: str
    for_runs: int


def info_of(inv: Invariant) -> InvariantInfo:
    return InvariantInfo(
        name=inv.name,
        description=inv.description,
        severity=inv.severity,
        owner=inv.header.owner,
        runbook=inv.header.runbook,
        tags=tuple(inv.header.tags),
        target=inv.target,
        schedule=str(inv.schedule),
        timeout=human_duration(inv.timeout),
        key=inv.key,
        sql=inv.sql,
        for_runs=inv.header.for_runs,
    )


def who(actor: str, name: str | None) -> str:
    """Who acted, for a page (not Slack's `<@U…>` mention syntax)."""
    if name:
        return f"@{name}"
    return f"Slack user {actor}" if actor.startswith(("U", "W")) else actor


@dataclass(frozen=True)
class Ack:
    by: str
    meaning: str  # "until resolved" | "until new rows appear"
    at: str
    snoozed_until: str | None


def ack_of(incident: Incident, now: datetime) -> Ack | None:
    snoozed = incident.snoozed_until
    snooze = shown(snoozed) if snoozed and snoozed > now else None
    if not incident.acked_by and not snooze:
        return None
    by = who(incident.acked_by, incident.acked_by_name) if incident.acked_by else ""
    meaning = MODE_WORDS.get(incident.ack_mode or "", "") if incident.acked_by else ""
    return Ack(by, meaning, when(incident.acked_at) if incident.acked_by else "", snooze)


# How an incident stands, as a word and an icon (and the CSS class of its badge): retired
# (its file removed while it was open) has its own, never the resolved one, not green.
STATE_WORD = {"open": "Open", "resolved": "Resolved", "retired": "Retired"}
STATE_ICON = {"open": "✖", "resolved": "✔", "retired": "⊘"}
STATE_CLASS = {"open": "violated", "resolved": "ok", "retired": "stale"}


@dataclass(frozen=True)
class IncidentSummary:
    id: int
    href: str
    kind: str
    opened: str
    opened_iso: str
    age: str
    open: bool
    ack: Ack | None
    state: str = "open"  # open | resolved | retired
    state_word: str = "Open"
    state_icon: str = "✖"
    state_class: str = "violated"
    retired_note: str = ""  # what still stood when it was retired


def summary_of(incident: Incident, now: datetime) -> IncidentSummary:
    end = incident.resolved_at or now
    state = incident.state
    return IncidentSummary(
        incident.id,
        incident_href(incident.id),
        KIND_WORD.get(incident.kind, incident.kind),
        when(incident.opened_at),
        iso(incident.opened_at),
        age(incident.opened_at, end),
        incident.resolved_at is None,
        ack_of(incident, now),
        state,
        STATE_WORD[state],
        STATE_ICON[state],
        STATE_CLASS[state],
        f"the invariant was removed {while_open(incident.kind, incident.last_count)}; it is no "
        "longer evaluated"
        if state == "retired"
        else "",
    )


@dataclass(frozen=True)
class Row:
    """One invariant on the front page."""

    name: str
    href: str
    status: Status
    description: str
    target: str
    severity: str
    owner: str
    tags: tuple[str, ...]
    last_run: str
    last_run_iso: str
    duration: str
    count: int | None
    spark: Sparkline | None
    incident: IncidentSummary | None
    loaded: bool


def _rank(row: Row) -> tuple[int, int, int, str]:
    status = STATUS_ORDER.index(row.status.key) if row.status.key in STATUS_ORDER else 9
    severity = SEVERITY_ORDER.index(row.severity) if row.severity in SEVERITY_ORDER else 9
    return status, severity, -(row.count or 0), row.name


_INCIDENT_PREFERENCE = ("violation", "quarantined", "cannot_evaluate", "invalid_file")
_SUBJECT = re.compile(r"^\((replica|target)( .*)?\)$")


def _preferred(open_incidents: Iterable[Incident]) -> dict[str, Incident]:
    """Each invariant's open incident to show: a violation before the others."""
    out: dict[str, Incident] = {}
    for incident in open_incidents:
        if incident.kind not in _INCIDENT_PREFERENCE:
            continue
        held = out.get(incident.invariant)
        rank = _INCIDENT_PREFERENCE.index
        if held is None or rank(incident.kind) < rank(held.kind):
            out[incident.invariant] = incident
    return out


def rows_of(infos: Mapping[str, InvariantInfo], overview: Overview, now: datetime) -> list[Row]:
    """Every invariant loaded or recorded, worst first."""
    incidents = _preferred(overview.open_incidents)
    # A file removed long ago keeps its last run in the store: it is listed only while it
    # has an incident open. invmon's own checks have no file and are always listed.
    own = {n for n in overview.latest if n.startswith(RESERVED_PREFIX)}
    names = sorted(set(infos) | own | set(incidents))
    rows = []
    for name in names:
        if _SUBJECT.match(name):
            continue  # a replica or target condition: listed as a condition, not a row
        info = infos.get(name)
        run = overview.latest.get(name)
        incident = incidents.get(name)
        context = incident.context if incident else None
        points = overview.points.get(name, [])
        rows.append(
            Row(
                name=name,
                href=invariant_href(name),
                status=status_of(run.status if run else "pending"),
                description=cut(
                    info.description if info else (context and context.description) or "",
                    TEXT_LIMIT,
                ),
                target=info.target if info else run.target if run else "default",
                severity=info.severity if info else context.severity if context else "warning",
                owner=(info.owner if info else context.owner if context else None) or "",
                tags=info.tags if info else (),
                last_run=when(run.finished_at if run else None),
                last_run_iso=iso(run.finished_at if run else None),
                duration=duration_ms(run.duration_ms if run else None),
                count=run.count if run else None,
                spark=sparkline([p.count for p in points]),
                incident=summary_of(incident, now) if incident else None,
                loaded=info is not None,
            )
        )
    return sorted(rows, key=_rank)


@dataclass(frozen=True)
class Condition:
    """A replica stale or a target unreachable: about many invariants at once."""

    subject: str
    kind: str
    summary: IncidentSummary
    detail: str


@dataclass(frozen=True)
class Option:
    value: str
    label: str
    selected: bool


@dataclass(frozen=True)
class FilterView:
    status: list[Option]
    severity: list[Option]
    owner: list[Option]
    tag: list[Option]
    target: list[Option]
    q: str
    active: bool


def _options(values: Iterable[str], chosen: str | None, labels: Mapping[str, str]) -> list[Option]:
    return [Option("", "any", chosen is None)] + [
        Option(v, labels.get(v, v), v == chosen) for v in values
    ]


@dataclass(frozen=True)
class OverviewPage:
    rows: list[Row]
    total: int
    counts: list[tuple[Status, int]]  # how many of each status, among all rows
    conditions: list[Condition]
    filters: FilterView
    generated: str
    refresh_seconds: int
    # Targets refused for their database role, or run as a privileged one by allowance.
    roles: list[str] = field(default_factory=list)


def overview_page(
    infos: Mapping[str, InvariantInfo],
    overview: Overview,
    filters: Filters,
    now: datetime,
    refresh_seconds: int,
    roles: Sequence[str] = (),
) -> OverviewPage:
    every = rows_of(infos, overview, now)
    shown_rows = [r for r in every if filters.matches(r)]
    counts = [(status_of(s), n) for s in STATUS_ORDER if (n := _count(every, s))]
    conditions = [
        Condition(
            i.invariant,
            KIND_WORD.get(i.kind, i.kind),
            summary_of(i, now),
            cut(i.detail or "", TEXT_LIMIT),
        )
        for i in overview.open_incidents
        if i.kind in ("replica_stale", "target_unreachable")
    ]
    view = FilterView(
        status=_options([s for s in STATUS_ORDER if _count(every, s)], filters.status, STATUS_WORD),
        severity=_options(
            [s for s in SEVERITY_ORDER if any(r.severity == s for r in every)],
            filters.severity,
            {},
        ),
        owner=_options(sorted({r.owner for r in every if r.owner}), filters.owner, {}),
        tag=_options(sorted({t for r in every for t in r.tags}), filters.tag, {}),
        target=_options(sorted({r.target for r in every}), filters.target, {}),
        q=filters.q,
        active=filters.active,
    )
    return OverviewPage(
        shown_rows,
        len(every),
        counts,
        conditions,
        view,
        when(now),
        refresh_seconds,
        [cut(r, TEXT_LIMIT) for r in roles],
    )


def _count(rows: Sequence[Row], status: str) -> int:
    return sum(1 for r in rows if r.status.key == status)


# --- one invariant ------------------------------------------------------------------------


@dataclass(frozen=True)
class RunLine:
    started: str
    started_iso: str
    status: Status
    count: str
    duration: str
    lag: str
    error: str


def run_line(point: RunPoint) -> RunLine:
    lag = point.replica_lag_seconds
    return RunLine(
        when(point.started_at),
        iso(point.started_at),
        status_of(point.status),
        "–" if point.count is None else f"{point.count:,}",
        duration_ms(point.duration_ms, point.listing_ms),
        "–" if lag is None else f"{lag:,.1f} s",
        cut(point.error or "", TEXT_LIMIT),
    )


@dataclass(frozen=True)
class Sample:
    columns: list[str]
    rows: list[list[str]]
    total: int
    taken: str  # when the run that found them finished
    note: str


def sample_of(run: Run | None) -> Sample | None:
    if run is None or run.count is None:
        return None
    columns = [cut(c, CELL_LIMIT) for c in run.columns]
    rows = [[cell(r.get(c)) for c in run.columns] for r in run.sample]
    if run.count == 0:
        note = "The last run found no offending rows."
    elif len(rows) < run.count:
        note = f"{len(rows):,} of {counted(run.count, 'offending row')} (the run's sample)."
    else:
        note = f"All {counted(run.count, 'offending row')}."
    return Sample(columns, rows, run.count, when(run.finished_at), note)


@dataclass(frozen=True)
class EventLine:
    at: str
    at_iso: str
    icon: str
    text: str


def _keys_text(keys: Sequence[Any]) -> str:
    listed = ", ".join(cut(str(k), 80) for k in keys[:20])
    more = len(keys) - 20
    return listed + (f" and {more:,} more" if more > 0 else "")


def event_line(event: StoredEvent) -> EventLine:
    p = event.payload
    count = p.get("count")
    total = f" ({counted(count, 'offending row')} in total)" if isinstance(count, int) else ""
    keys = list(p.get("keys") or [])
    lasted = p.get("lasted_seconds")
    took = human_duration(timedelta(seconds=lasted)) if isinstance(lasted, int | float) else "?"
    icon, text = {
        "opened": ("⚑", f"Opened{total}"),
        "keys_appeared": ("+", f"{counted(len(keys), 'new offending row')}{total}"),
        "keys_gone": ("−", f"{counted(len(keys), 'row')} no longer offending{total}"),
        "resolved": (
            "✔",
            f"Closed after {took}: {p['reason']}"
            if p.get("reason")
            else f"Resolved after {took}: the query returns no rows",
        ),
        "cannot_evaluate": ("⚠", f"Cannot evaluate: {cut(str(p.get('error') or ''), 300)}"),
        "recovered": ("✔", f"Evaluating again after {took}"),
        "replica_stale": ("‖", "Replica stale"),
        "replica_fresh": ("✔", f"Replica caught up after {took}"),
        "file_invalid": ("✎", "File invalid"),
        "file_fixed": ("✔", f"File validates again after {took}"),
        "target_unreachable": ("⚡", "Target unreachable"),
        "target_reachable": ("✔", f"Target answers again after {took}"),
        "quarantined": ("⛔", f"Quarantined: {cut(str(p.get('detail') or ''), 300)}"),
        "unquarantined": ("✔", f"Out of quarantine after {took}: {p.get('reason') or ''}"),
        "retired": (
            "⊘",
            f"Retired after {took}: {p.get('reason') or 'the invariant was removed'}; "
            "it is no longer evaluated",
        ),
    }.get(event.kind, ("•", event.kind))
    if keys and event.kind in ("opened", "keys_appeared", "keys_gone"):
        text += f": {_keys_text(keys)}"
    if p.get("ack_cleared"):
        text += "; the acknowledgement (until new rows appear) ended"
    return EventLine(when(event.created_at), iso(event.created_at), icon, text)


@dataclass(frozen=True)
class IncidentLine:
    summary: IncidentSummary
    resolved: str
    first_count: str
    last_count: str
    events: list[EventLine]


def incident_line(incident: Incident, events: Sequence[StoredEvent], now: datetime) -> IncidentLine:
    return IncidentLine(
        summary_of(incident, now),
        when(incident.resolved_at),
        "–" if incident.first_count is None else f"{incident.first_count:,}",
        "–" if incident.last_count is None else f"{incident.last_count:,}",
        [event_line(e) for e in events],
    )


@dataclass(frozen=True)
class InvariantPage:
    name: str
    info: InvariantInfo | None
    row: Row
    sql: list[Span]
    runs: list[RunLine]
    incidents: list[IncidentLine]
    sample: Sample | None
    generated: str
    runbook_href: str | None
    refresh_seconds: int


def safe_link(url: str | None) -> str | None:
    """Only http(s) links become links: never `javascript:` from a stored header."""
    if url and re.match(r"^https?://[^\s<>\"']+$", url):
        return url
    return None


def invariant_page(
    name: str,
    info: InvariantInfo | None,
    records: InvariantRecords,
    overview: Overview,
    now: datetime,
    refresh_seconds: int,
) -> InvariantPage | None:
    """None when neither the daemon nor the store knows `name`."""
    if info is None and not records.runs and not records.incidents:
        return None
    infos = {name: info} if info else {}
    mine = Overview(
        {k: v for k, v in overview.latest.items() if k == name},
        {k: v for k, v in overview.points.items() if k == name},
        [i for i in overview.open_incidents if i.invariant == name],
    )
    [row] = rows_of(infos, mine, now) or [_unknown_row(name, records, now)]
    context = records.incidents[0].context if records.incidents else None
    runbook = info.runbook if info else context.runbook if context else None
    return InvariantPage(
        name=name,
        info=info,
        row=row,
        sql=highlight(info.sql) if info else [],
        runs=[run_line(p) for p in records.runs],
        incidents=[incident_line(i, records.events.get(i.id, []), now) for i in records.incidents],
        sample=sample_of(records.last_sample),
        generated=when(now),
        runbook_href=safe_link(runbook),
        refresh_seconds=refresh_seconds,
    )


def _unknown_row(name: str, records: InvariantRecords, now: datetime) -> Row:
    """A name known only from its incidents (e.g. a file removed before it ran)."""
    last = records.runs[0] if records.runs else None
    return Row(
        name,
        invariant_href(name),
        status_of(last.status if last else "pending"),
        "",
        last.target if last else "default",
        "warning",
        "",
        (),
        when(last.finished_at if last else None),
        iso(last.finished_at if last else None),
        duration_ms(last.duration_ms if last else None),
        last.count if last else None,
        None,
        None,
        False,
    )


# --- one incident ---------------------------------------------------------------------------

_CHANNEL = re.compile(r"^[A-Z0-9]{1,30}$")
_TS = re.compile(r"^[0-9]{1,12}\.[0-9]{1,8}$")


def slack_link(post: SlackPost) -> str | None:
    """Slack's archive link to a delivered message, from ids Slack itself returned (checked:
    a stored value never becomes arbitrary markup or a foreign URL)."""
    if post.state != "SENT" or not post.channel_id or not post.ts:
        return None
    if not _CHANNEL.match(post.channel_id) or not _TS.match(post.ts):
        return None
    return f"https://slack.com/archives/{post.channel_id}/p{post.ts.replace('.', '')}"


def action_line(action: ActionRecord) -> EventLine:
    by = who(action.actor, action.actor_name)
    via = f" (via {action.source})"
    if action.action == "ack":
        words = MODE_WORDS.get(action.detail or "", action.detail or "")
        icon, text = "☑", f"Acknowledged by {by}, {words}{via}"
    elif action.action == "unack":
        icon, text = "↩", f"Acknowledgement removed by {by}{via}"
    else:
        until = action.detail or "?"
        icon, text = "☾", f"Snoozed by {by} until {until}{via}"
    return EventLine(when(action.at), iso(action.at), icon, text)


def reminder_line(post: SlackPost) -> EventLine:
    state = {"SENT": "sent", "FAILED": "failed"}.get(post.state, "queued")
    return EventLine(when(post.created_at), iso(post.created_at), "◷", f"Reminder ({state})")


@dataclass(frozen=True)
class KeyLine:
    key: str
    first_seen: str
    last_seen: str
    gone: str


@dataclass(frozen=True)
class IncidentPage:
    id: int
    invariant: str
    invariant_href: str
    kind: str
    summary: IncidentSummary
    resolved: str
    severity: str
    owner: str
    description: str
    runbook_href: str | None
    first_count: str
    last_count: str
    detail: str
    timeline: list[EventLine]
    keys: list[KeyLine]
    keys_more: int
    slack_links: list[tuple[str, str]] = field(default_factory=list)  # (label, url)
    generated: str = ""
    refresh_seconds: int = 30


def incident_page(records: IncidentRecords, now: datetime, refresh_seconds: int) -> IncidentPage:
    incident = records.incident
    context = incident.context
    timeline = sorted(
        [event_line(e) for e in records.events]
        + [action_line(a) for a in records.actions]
        + [
            reminder_line(p)
            for p in records.posts
            if p.kind == "reminder" and p.action == "post_reply"
        ],
        key=lambda line: line.at_iso,
    )
    links = []
    for post in records.posts:
        url = slack_link(post)
        if url and post.action in ("post_root", "post_digest"):
            links.append(("Slack thread", url))
    return IncidentPage(
        id=incident.id,
        invariant=incident.invariant,
        invariant_href=invariant_href(incident.invariant),
        kind=KIND_WORD.get(incident.kind, incident.kind),
        summary=summary_of(incident, now),
        resolved=when(incident.resolved_at),
        severity=context.severity if context else "warning",
        owner=(context.owner if context else None) or "",
        description=cut((context.description if context else None) or "", TEXT_LIMIT),
        runbook_href=safe_link(context.runbook if context else None),
        first_count="–" if incident.first_count is None else f"{incident.first_count:,}",
        last_count="–" if incident.last_count is None else f"{incident.last_count:,}",
        detail=cut(incident.detail or "", TEXT_LIMIT),
        timeline=timeline,
        keys=[
            KeyLine(cut(k, CELL_LIMIT), when(f), when(last), when(g))
            for k, f, last, g in records.keys
        ],
        keys_more=max(0, records.keys_total - len(records.keys)),
        slack_links=links[:5],
        generated=when(now),
        refresh_seconds=refresh_seconds,
    )
