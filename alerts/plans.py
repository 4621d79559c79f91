"""What each event means for Slack: the deliveries it causes, each with an idempotency key
made of what is delivered (invariant, incident, event, action, channel), never of an
attempt. Pure."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from monitor.store.incidents import OPENING_EVENTS
from monitor.store.records import StoredEvent

Action = Literal[
    "post_root",
    "post_reply",
    "update_root",
    "upload_csv",
    "post_digest",
    "post_detail",
    "post_summary",
]
POSTS: tuple[Action, ...] = (
    "post_root",
    "post_reply",
    "post_digest",
    "post_detail",
    "post_summary",
)
# The events that open an incident, and so post a new root message.
OPENING = OPENING_EVENTS

# Rows that appeared and went: their thread replies are batched (alerts/thread_batching.py).
CHURN = {"keys_appeared", "keys_gone"}


def delivery_key(*parts: object) -> str:
    return hashlib.sha256(":".join(str(p) for p in parts).encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Spec:
    """A delivery to create, before it has a row."""

    action: Action
    key: str
    needs_root: bool
    payload: dict[str, Any]
    not_before: datetime | None = None  # held until then (a batched reply); None: due now


def plan_event(event: StoredEvent, channel: str) -> list[Spec]:
    """The deliveries one event causes in one channel. Pure."""
    base = (event.invariant, event.incident_id, event.id, channel)
    payload = {"kind": event.kind, **event.payload}
    if event.kind in OPENING:
        specs = [Spec("post_root", delivery_key(*base, "root"), False, payload)]
        if event.kind == "opened":
            specs.append(Spec("upload_csv", delivery_key(*base, "csv"), True, payload))
        return specs
    return [
        Spec("post_reply", delivery_key(*base, "reply"), True, payload),
        Spec("update_root", delivery_key(*base, "update"), True, payload),
    ]


def summary_spec(channel: str, day: str, groups: dict[str, list[int]]) -> Spec:
    """The daily summary of one channel: one per channel and day, whoever sends it."""
    payload = {"kind": "summary", "day": day, **groups}
    return Spec("post_summary", delivery_key("summary", channel, day), False, payload)


def reminder_spec(invariant: str, incident_id: int, channel: str, nth: int) -> Spec:
    payload = {"kind": "reminder", "nth": nth}
    return Spec(
        "post_reply", delivery_key(invariant, incident_id, "reminder", nth, channel), True, payload
    )
