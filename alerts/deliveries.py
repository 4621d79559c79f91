"""One delivery, the record the ledger keeps per Slack call to make: its states and how a
row of the `deliveries` table reads back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

from alerts.plans import Action
from monitor.clock import parse_stamp

# A delivery's life: PENDING (to do) -> SENT, or FAILED for good; UNKNOWN when a call may
# have reached Slack, until reconciling says which. Stored as these words.
DeliveryState = Literal["PENDING", "UNKNOWN", "SENT", "FAILED"]


DELIVERY_STATES: tuple[DeliveryState, ...] = get_args(DeliveryState)


def delivery_state(text: str) -> DeliveryState:
    if text not in DELIVERY_STATES:
        raise ValueError(f"unknown delivery state {text!r} in the state store")
    return text


@dataclass(frozen=True)
class Delivery:
    id: int
    idem_key: str
    event_id: int | None
    incident_id: int | None
    invariant: str
    channel: str
    action: Action
    root_id: int | None
    state: DeliveryState
    attempts: int
    last_error: str | None
    unknown_since: datetime | None
    slack_channel: str | None
    slack_ts: str | None
    slack_file_id: str | None
    payload: dict[str, Any]
    created_at: datetime
    lease_owner: str | None = None


COLUMNS = (
    "id",
    "idem_key",
    "event_id",
    "incident_id",
    "invariant",
    "channel",
    "action",
    "root_id",
    "state",
    "attempts",
    "last_error",
    "unknown_since",
    "slack_channel",
    "slack_ts",
    "slack_file_id",
    "payload_json",
    "created_at",
    "lease_owner",
)


def delivery_of(row: Sequence[Any]) -> Delivery:
    record = dict(zip(COLUMNS, row, strict=True))
    return Delivery(
        id=int(record["id"]),
        idem_key=record["idem_key"],
        event_id=record["event_id"],
        incident_id=record["incident_id"],
        invariant=record["invariant"],
        channel=record["channel"],
        action=record["action"],
        root_id=record["root_id"],
        state=delivery_state(record["state"]),
        attempts=int(record["attempts"]),
        last_error=record["last_error"],
        unknown_since=parse_stamp(record["unknown_since"]) if record["unknown_since"] else None,
        slack_channel=record["slack_channel"],
        slack_ts=record["slack_ts"],
        slack_file_id=record["slack_file_id"],
        payload=json.loads(record["payload_json"]),
        created_at=parse_stamp(record["created_at"]),
        lease_owner=record["lease_owner"],
    )
