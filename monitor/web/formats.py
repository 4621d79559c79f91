"""How the page shows single values: cells, links, times, durations, statuses, severities,
acknowledgements and incident summaries, and the words and icons for each. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from monitor.clock import shown
from monitor.durations import human_duration
from monitor.invariants.loader import Invariant
from monitor.store import acks
from monitor.store.acks import MODE_WORDS
from monitor.store.incidents import while_open
from monitor.store.records import Incident
from monitor.text import cut_value_text, shown_value
from monitor.web.chart import Sparkline
from monitor.web.reads import (
    SlackPost,
)

CELL_LIMIT = 200  # characters of one value shown in a table cell


TEXT_LIMIT = 2000  # an error message or a description


# Worst first. Each status has a word and an icon, so it reads without colour. Icons are
# symbols common text fonts have (no emoji font is assumed on the reader's machine).
STATUS_ORDER = ("violated", "error", "invalid", "stale", "pending", "ok")


STATUS_WORD = {
    "violated": "Violated",
    "error": "Error",
    # A file that does not load and has no earlier version running: it is not evaluated.
    "invalid": "Invalid file: will not run until fixed",
    "stale": "Stale",
    "pending": "Not run yet",
    "ok": "Holds",
    # Its file was removed while an incident was open: nothing says whether it holds now.
    "retired": "Retired: no longer evaluated",
}


STATUS_ICON = {
    "violated": "✖",
    "error": "⚠",
    "invalid": "✎",
    "stale": "‖",
    "pending": "…",
    "ok": "✔",
    "retired": "⊘",
}


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
    """A row value as the Slack table shows it (text.shown_value), longer."""
    return cut_value_text(shown_value(value), CELL_LIMIT)


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
    key: str  # violated | error | invalid | stale | pending | ok | retired
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
    return acks.who(actor, name, mention=False)


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
