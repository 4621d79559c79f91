"""What an incident's messages say about its invariant and where they go: the one record
routing reads. Apart from records.py so a one-shot `check --format json`, which routes every
invariant, loads none of the store's other records or its incident state machine."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from monitor.invariants.header import DEFAULT_TARGET

if TYPE_CHECKING:
    from monitor.config import Target
    from monitor.invariants.header import InvariantHeader


@dataclass(frozen=True)
class IncidentContext:
    """What an incident's messages say about its invariant and where they go, as its file
    said when the incident opened: the file may change or be removed while it is open."""

    severity: str = "warning"
    description: str | None = None
    owner: str | None = None
    runbook: str | None = None
    channel: str | None = None  # the file's own `channel:`, if it had one
    target: str = DEFAULT_TARGET  # the monitored database it is about
    # The target's `channel:`: a default that the owner and severity routes outrank
    # (alerts/routing.py). Contexts stored before it was kept have it folded into `channel`.
    target_channel: str | None = None

    @classmethod
    def of(
        cls,
        header: InvariantHeader | None,
        severity: str | None = None,
        target: str = DEFAULT_TARGET,
        configured: Target | None = None,
    ) -> IncidentContext:
        """The one place a context is made from an invariant's file: what an incident keeps
        of it, and of its target as `configured` (the default owner when the file names
        none, and the target's channel, which routes outrank). No file: the defaults."""
        if header is None:
            return cls(target=target)
        return cls(
            severity or header.severity or "warning",
            header.description,
            header.owner or (configured.owner if configured else None),
            header.runbook,
            header.channel,
            target,
            configured.channel if configured else None,
        )

    def as_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | None) -> IncidentContext | None:
        if not text:
            return None
        data = json.loads(text)
        return cls(
            **{
                k: data.get(k)
                for k in ("description", "owner", "runbook", "channel", "target_channel")
            },
            severity=str(data.get("severity") or "warning"),
            target=str(data.get("target") or DEFAULT_TARGET),
        )
