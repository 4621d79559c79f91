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
from typing import TYPE_CHECKING, Any, Literal

from monitor.clock import shown
from monitor.config import AckMode

if TYPE_CHECKING:
    from monitor.store.records import Incident

ActionKind = Literal["ack", "unack", "snooze"]
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
    updates: dict[str, Any]  # incident fields to set when changed (datetimes as datetimes)


def _when(moment: datetime | None) -> str:
    return shown(moment) if moment else "? UTC"


CLI_ACTOR = "cli:"  # the actor of an action taken with `invmon ack`: cli:<unix user>


def who(actor: str, name: str | None, *, mention: bool = True) -> str:
    """Who acted, in words. A Slack user is `@name` (or, unnamed, Slack's `<@U…>` mention
    syntax when `mention`, for a message); a Unix user of the command line is never dressed
    as a Slack handle."""
    if actor.startswith(CLI_ACTOR):
        return f"{name or actor.removeprefix(CLI_ACTOR)} (command line)"
    if name:
        return f"@{name}"
    if actor.startswith(("U", "W")):
        return f"<@{actor}>" if mention else f"Slack user {actor}"
    return actor


def decide_action(incident: Incident, action: Action, now: datetime) -> Outcome:
    number = f"incident #{incident.id}"
    if incident.resolved_at is not None:
        # Retired: its file was removed while it was open; nothing is left to acknowledge.
        ended = "retired" if incident.state == "retired" else "resolved"
        return Outcome(False, f"{number} is already {ended}; there is nothing to do.", {})
    if action.kind == "ack":
        if incident.acked_by:
            by = who(incident.acked_by, incident.acked_by_name)
            return Outcome(
                False,
                f"{number} was already acknowledged by {by} at {_when(incident.acked_at)}.",
                {},
            )
        return Outcome(
            True,
            f"You acknowledged {number} {MODE_WORDS[action.mode]}.",
            {
                "acked_by": action.actor,
                "acked_by_name": action.actor_name,
                "acked_at": now,
                "ack_mode": action.mode,
            },
        )
    if action.kind == "unack":
        if not incident.acked_by:
            return Outcome(False, f"{number} is not acknowledged.", {})
        snoozed = incident.snoozed_until
        resume = (
            f"it stays snoozed until {shown(snoozed)}, then reminders resume"
            if snoozed and snoozed > now
            else "reminders resume"
        )
        return Outcome(
            True,
            f"You removed the acknowledgement of {number}; {resume}.",
            {"acked_by": None, "acked_by_name": None, "acked_at": None, "ack_mode": None},
        )
    assert action.snooze_for is not None
    until = now + action.snooze_for
    return Outcome(
        True,
        f"You snoozed {number} until {shown(until)}.",
        {"snoozed_until": until, "snoozed_by": action.actor},
    )


def is_quiet(incident: Incident, now: datetime) -> bool:
    """Reminders and change notices are silenced: acknowledged, or snoozed until later."""
    snoozed = incident.snoozed_until
    return bool(incident.acked_by) or bool(snoozed and snoozed > now)


def ack_line(incident: Incident, now: datetime) -> str | None:
    """The line shown on the root message, or None."""
    parts = []
    if incident.acked_by:
        by = who(incident.acked_by, incident.acked_by_name)
        mode = MODE_WORDS.get(incident.ack_mode or "", "")
        parts.append(f"👀 Acknowledged by {by} at {_when(incident.acked_at)} ({mode})")
    snoozed = incident.snoozed_until
    if snoozed and snoozed > now:
        by = f" by {who(incident.snoozed_by, None)}" if incident.snoozed_by else ""
        parts.append(f"💤 Snoozed until {_when(snoozed)}{by}")
    return " · ".join(parts) or None
