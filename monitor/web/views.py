"""The overview page's view model: one row per invariant, ranked worst first, with its
filters. Pure: records in, a page out; nothing here reads the store or the clock."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from monitor.clock import shown
from monitor.invariants.loader import OWN_CHECKS_SEVERITY, RESERVED_PREFIX
from monitor.store.mutes import Mute
from monitor.store.records import Incident
from monitor.text import cut
from monitor.web.chart import sparkline
from monitor.web.filters import Filters
from monitor.web.formats import (
    KIND_WORD,
    SEVERITY_ORDER,
    STATUS_ORDER,
    STATUS_WORD,
    TEXT_LIMIT,
    IncidentSummary,
    InvariantInfo,
    Row,
    Status,
    duration_ms,
    invariant_href,
    iso,
    status_of,
    summary_of,
    when,
)
from monitor.web.reads import (
    Overview,
)


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
        # No version of the file loads: say so, rather than "not run yet" as if it would run.
        unloadable = info is None and incident is not None and incident.kind == "invalid_file"
        rows.append(
            Row(
                name=name,
                href=invariant_href(name),
                status=status_of("invalid" if unloadable else run.status if run else "pending"),
                description=cut(
                    info.description if info else (context and context.description) or "",
                    TEXT_LIMIT,
                ),
                target=info.target
                if info
                else context.target
                if context
                else run.target
                if run
                else "default",
                severity=info.severity
                if info
                else context.severity
                if context
                else OWN_CHECKS_SEVERITY
                if name.startswith(RESERVED_PREFIX)
                else "warning",
                owner=(info.owner if info else context.owner if context else None) or "",
                tags=info.tags if info else (),
                last_run=when(run.finished_at if run else None),
                last_run_iso=iso(run.finished_at if run else None),
                duration=duration_ms(run.duration_ms if run else None),
                count=run.count if run else None,
                spark=sparkline(overview.counts.get(name, []), overview.runs.get(name)),
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
    # Each status: how many rows shown (the filters applied) and how many in all.
    counts: list[tuple[Status, int, int]]
    conditions: list[Condition]
    filters: FilterView
    generated: str
    refresh_seconds: int
    # Targets refused for their database role, or run as a privileged one by allowance.
    roles: list[str] = field(default_factory=list)
    mutes: list[str] = field(default_factory=list)  # one line each, in force or scheduled


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
    counts = [
        (status_of(s), _count(shown_rows, s), n) for s in STATUS_ORDER if (n := _count(every, s))
    ]
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
        [cut(mute_words(m, now), TEXT_LIMIT) for m in overview.mutes],
    )


def mute_words(mute: Mute, now: datetime) -> str:
    """One mute, as the page says it: what, until when, why, and who set it."""
    span = (
        f"until {shown(mute.ends)}"
        if mute.state(now) == "active"
        else f"from {shown(mute.starts_at)} until {shown(mute.ends)}"
    )
    return f"#{mute.id} {mute.what}, {span}: {mute.reason} (set by {mute.created_by})"


def _count(rows: Sequence[Row], status: str) -> int:
    return sum(1 for r in rows if r.status.key == status)
