"""What an acknowledgement, snooze or unacknowledgement does to an incident. Pure.

Two meanings of "acknowledged", both offered in Slack (or one, by config):
- until_resolved: this incident is being handled; no reminders, no change notices, until it
  resolves (the resolution is always posted);
- until_new_rows: the same, until a new offending key appears, which clears the ack and
  notifies again.
A snooze silences reminders and change notices until its time, whoever has acked.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

AckMode = Literal["until_resolved", "until_new_rows"]
ActionKind = Literal["ack", "unack", "snooze"]
ACK_MODES: tuple[AckMode, ...] = ("until_resolved", "until_new_rows")
MODE_WORDS = {"until_resolved": "until resolved", "until_new_rows": "until new rows appear"}


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    actor: str  # Slack user id, or the local user for the CLI
    actor_name: str | None = None
    mode: AckMode = "until_resolved"
    snooze_for: timedelta | None = None


@dataclass(frozen=True)
class Outcome:
    changed: bool
    message: str  # shown to the person who acted (ephemeral in Slack)
    updates: dict[str, Any]  # incident columns to set when changed


def _when(text: str | None) -> str:
    return (text or "?").replace("T", " ")[:16] + " UTC"


def who(actor: str, name: str | None) -> str:
    return f"@{name}" if name else (f"<@{actor}>" if actor.startswith("U") else actor)


def decide_action(incident: dict[str, Any], action: Action, now: datetime, stamp: str) -> Outcome:
    """`incident` is the row (with ack columns); `stamp` is `now` as the store writes it."""
    number = f"incident #{incident['id']}"
    if incident.get("resolved_at"):
        return Outcome(False, f"{number} is already resolved; there is nothing to do.", {})
    acked_by = incident.get("acked_by")
    if action.kind == "ack":
        if acked_by:
            by = who(acked_by, incident.get("acked_by_name"))
            return Outcome(
                False,
                f"{number} was already acknowledged by {by} at {_when(incident.get('acked_at'))}.",
                {},
            )
        return Outcome(
            True,
            f"You acknowledged {number} {MODE_WORDS[action.mode]}.",
            {
                "acked_by": action.actor,
                "acked_by_name": action.actor_name,
                "acked_at": stamp,
                "ack_mode": action.mode,
            },
        )
    if action.kind == "unack":
        if not acked_by:
            return Outcome(False, f"{number} is not acknowledged.", {})
        return Outcome(
            True,
            f"You removed the acknowledgement of {number}; reminders resume.",
            {"acked_by": None, "acked_by_name": None, "acked_at": None, "ack_mode": None},
        )
    assert action.snooze_for is not None
    until = now + action.snooze_for
    return Outcome(
        True,
        f"You snoozed {number} until {until.strftime('%Y-%m-%d %H:%M')} UTC.",
        {"snoozed_until": until.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "snoozed_by": action.actor},
    )


def is_quiet(incident: dict[str, Any], now_stamp: str) -> bool:
    """Reminders and change notices are silenced: acknowledged, or snoozed until later."""
    snoozed = incident.get("snoozed_until")
    return bool(incident.get("acked_by")) or bool(snoozed and snoozed > now_stamp)


def ack_line(incident: dict[str, Any], now_stamp: str) -> str | None:
    """The line shown on the root message, or None."""
    parts = []
    if incident.get("acked_by"):
        by = who(incident["acked_by"], incident.get("acked_by_name"))
        mode = MODE_WORDS.get(incident.get("ack_mode") or "", "")
        parts.append(f"👀 Acknowledged by {by} at {_when(incident.get('acked_at'))} ({mode})")
    snoozed = incident.get("snoozed_until")
    if snoozed and snoozed > now_stamp:
        parts.append(f"💤 Snoozed until {_when(snoozed)}")
    return " · ".join(parts) or None
