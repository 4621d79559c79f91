"""The invariant and incident pages' view models: runs, samples, events, actions and
reminders as lines. Pure: records in, a page out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from monitor.durations import human_duration
from monitor.links import safe_link
from monitor.store.acks import MODE_WORDS
from monitor.store.incidents import EventKind
from monitor.store.key_order import key_order
from monitor.store.records import Incident, Run, StoredEvent
from monitor.text import counted, cut
from monitor.web.chart import TimeChart, span_words, time_chart
from monitor.web.filters import WINDOWS, Window
from monitor.web.formats import (
    CELL_LIMIT,
    KIND_WORD,
    TEXT_LIMIT,
    IncidentSummary,
    InvariantInfo,
    Row,
    Status,
    cell,
    duration_ms,
    invariant_href,
    iso,
    slack_link,
    status_of,
    summary_of,
    when,
    who,
)
from monitor.web.reads import (
    ActionRecord,
    History,
    IncidentRecords,
    InvariantRecords,
    Overview,
    RunPoint,
    SlackPost,
)
from monitor.web.sqlhighlight import Span, highlight
from monitor.web.views import rows_of


@dataclass(frozen=True)
class RunLine:
    started: str
    started_iso: str
    status: Status
    count: str
    duration: str
    lag: str
    error: str
    stretch: str = ""  # a held stretch: how many runs, until when; "" for one run


def run_line(point: RunPoint) -> RunLine:
    lag = point.replica_lag_seconds
    last = point.last_started_at
    return RunLine(
        when(point.started_at),
        iso(point.started_at),
        status_of(point.status),
        "–" if point.count is None else f"{point.count:,}",
        duration_ms(point.duration_ms, point.listing_ms),
        "–" if lag is None else f"{lag:,.1f} s",
        cut(point.error or "", TEXT_LIMIT),
        "" if last is None else f"held for {point.repeats:,} runs, the last at {when(last)}",
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
    ordered = sorted(keys, key=key_order)
    listed = ", ".join(cut(str(k), 80) for k in ordered[:20])
    more = len(keys) - 20
    return listed + (f" and {more:,} more" if more > 0 else "")


def event_wording(p: dict[str, Any]) -> dict[EventKind, tuple[str, str]]:
    """The page's wording table, keyed by event kind (every kind: a test holds it to
    EVENT_KINDS): an icon and a line, for one event's payload."""
    count = p.get("count")
    total = f" ({counted(count, 'offending row')} in total)" if isinstance(count, int) else ""
    keys = list(p.get("keys") or [])
    lasted = p.get("lasted_seconds")
    took = human_duration(timedelta(seconds=lasted)) if isinstance(lasted, int | float) else "?"
    return {
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
    }


def event_line(event: StoredEvent) -> EventLine:
    p = event.payload
    keys = list(p.get("keys") or [])
    icon, text = event_wording(p)[event.kind]
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


# The chart is drawn twice, for a wide screen and for a phone, and CSS shows one: a single
# SVG scaled to a phone would shrink its labels to a size nobody reads.
WIDE = (640, 200)
NARROW = (340, 180)


@dataclass(frozen=True)
class WindowLink:
    name: str
    words: str
    href: str
    current: bool


@dataclass(frozen=True)
class HistoryView:
    windows: list[WindowLink]
    words: str  # the window shown, "7 days"
    wide: TimeChart
    narrow: TimeChart
    runs: int  # runs of the window drawn, a held stretch's every run counted
    reaches_back: bool  # `runs` counts a held stretch that began before the window
    truncated: str  # the older runs of the window not shown, in words; "" when none
    fallback: bool  # the query asked for a window not offered: the default is shown


def history_view(history: History, window: Window, now: datetime) -> HistoryView:
    start = now - window.span
    wide, narrow = (
        time_chart(history.runs, start, now, truncated=history.truncated, width=w, height=h)
        for w, h in (WIDE, NARROW)
    )
    truncated = ""
    if history.truncated and history.runs:
        oldest = min(at for at, _ in history.runs)
        truncated = (
            f"This window holds more runs than the page reads: the chart shows the newest "
            f"{history.repeats:,}, from {when(oldest)}; older runs of this window are not "
            "shown (the shaded part)."
        )
    return HistoryView(
        windows=[
            WindowLink(name, span_words(span), f"?window={name}", name == window.name)
            for name, span in WINDOWS.items()
        ],
        words=span_words(window.span),
        wide=wide,
        narrow=narrow,
        runs=wide.runs + history.between,
        reaches_back=history.reaches_back,
        truncated=truncated,
        fallback=window.unknown,
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
    history: HistoryView | None = None


def invariant_page(
    name: str,
    info: InvariantInfo | None,
    records: InvariantRecords,
    overview: Overview,
    now: datetime,
    refresh_seconds: int,
    history: History | None = None,
    window: Window | None = None,
) -> InvariantPage | None:
    """None when neither the daemon nor the store knows `name`. With `history` (the runs
    of `window`), the page has its chart over time."""
    if info is None and not records.runs and not records.incidents:
        return None
    infos = {name: info} if info else {}
    mine = Overview(
        {k: v for k, v in overview.latest.items() if k == name},
        {k: v for k, v in overview.counts.items() if k == name},
        [i for i in overview.open_incidents if i.invariant == name],
        runs={k: v for k, v in overview.runs.items() if k == name},
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
        history=None if history is None else history_view(history, window or Window(), now),
    )


def _unknown_row(name: str, records: InvariantRecords, now: datetime) -> Row:
    """A name known only from the store: a file removed (retired, when its newest incident
    closed so), or one removed before it ran."""
    last = records.runs[0] if records.runs else None
    newest = records.incidents[0] if records.incidents else None
    retired = newest is not None and newest.state == "retired"
    return Row(
        name,
        invariant_href(name),
        status_of("retired" if retired else last.status if last else "pending"),
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


def action_line(action: ActionRecord) -> EventLine:
    by = who(action.actor, action.actor_name)
    via = "" if action.source == "cli" else f" (via {action.source})"  # `who` says it
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
            for k, f, last, g in sorted(records.keys, key=lambda r: (r[1], key_order(r[0])))
        ],
        keys_more=max(0, records.keys_total - len(records.keys)),
        slack_links=links[:5],
        generated=when(now),
        refresh_seconds=refresh_seconds,
    )
