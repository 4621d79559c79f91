"""What the state store holds, one type per record. Read-only values: the store writes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from monitor.clock import stamp
from monitor.execution.results import Status
from monitor.invariants.header import DEFAULT_TARGET
from monitor.store.context import IncidentContext
from monitor.store.incidents import EventKind, IncidentKind, IncidentState

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class Run:
    """One evaluation of one invariant."""

    id: int
    invariant: str
    started_at: datetime
    finished_at: datetime
    status: Status
    count: int | None
    error: str | None
    replica_lag_seconds: float | None
    duration_ms: float | None
    columns: list[str] = field(default_factory=list)
    sample: list[dict[str, Any]] = field(default_factory=list)
    target: str = DEFAULT_TARGET  # the monitored database it ran on
    listing_ms: float | None = None  # its sources' listing, part of duration_ms
    # A held stretch (stretches.py) stands for `repeats` runs that all held: started_at is
    # its first run's start, last_started_at its last's; finished_at and the figures above
    # are its last run's. A single run has 1 and None.
    repeats: int = 1
    last_started_at: datetime | None = None


@dataclass(frozen=True)
class Incident:
    """A violation, a cannot-evaluate spell, a stale replica or an invalid file, while it
    lasts and after; with who acknowledged or snoozed it, and how it ended."""

    id: int
    invariant: str
    kind: IncidentKind
    opened_at: datetime
    resolved_at: datetime | None  # when it closed, resolved or retired (see `state`)
    first_count: int | None
    last_count: int | None
    last_seen_at: datetime
    detail: str | None = None
    acked_by: str | None = None
    acked_by_name: str | None = None
    acked_at: datetime | None = None
    ack_mode: str | None = None
    snoozed_until: datetime | None = None
    snoozed_by: str | None = None
    context: IncidentContext | None = None  # None for incidents stored before it was kept
    target: str = DEFAULT_TARGET  # the monitored database it is about
    # open, resolved, or retired (its file was removed while it was open): a retired
    # incident is closed but never counted or shown as resolved.
    state: IncidentState = "open"

    def __post_init__(self) -> None:
        # A closed record that does not say how it ended was resolved: only a removal
        # retires, and the store says so.
        if self.resolved_at is not None and self.state == "open":
            object.__setattr__(self, "state", "resolved")


@dataclass(frozen=True)
class IncidentKey:
    """One offending key of a violation: when it appeared, was last seen, and went."""

    key: str
    row: dict[str, Any] | None
    first_seen_at: datetime
    last_seen_at: datetime
    gone_at: datetime | None


@dataclass(frozen=True)
class StoredEvent:
    """A change worth telling someone about, in the outbox until alerting plans it."""

    id: int
    incident_id: int
    invariant: str
    kind: EventKind
    created_at: datetime
    payload: dict[str, Any]


def as_document(record: Run | Incident | IncidentKey | StoredEvent) -> dict[str, Any]:
    """A record as JSON-ready values, timestamps in the store's format."""
    return {k: stamp(v) if isinstance(v, datetime) else v for k, v in asdict(record).items()}


@dataclass(frozen=True)
class Quarantine:
    """An invariant held out of the schedule (quarantine.py), at one version of its file."""

    invariant: str
    version: str  # quarantine.version_of the file that overran
    reason: str
    since: datetime
