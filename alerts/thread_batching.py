"""Thread replies for rows that appear and go, batched: at most one reply per incident per
`slack.thread_update_interval`, saying the net change since the last one. Pure.

A keyless invariant whose values move (a sum) changes its whole-row key at every run, a
`keys_appeared` and a `keys_gone` each time; one reply per event filled the thread with
pairs that cancel out. The root message already shows the live count, so the thread only
needs to say what changed, once per interval: the first change after a quiet interval is
replied to at once, later ones wait in one held reply that each new change is merged into
(in the ledger, while it is certainly unsent), and it goes out when the interval has passed
since the previous reply, or before the next message of its thread (a resolution, say), so
a thread still reads in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from alerts.messages import (
    SECTION_LIMIT,
    TEXT_LIMIT,
    IncidentView,
    Message,
    reply_message,
)
from alerts.plans import CHURN
from monitor.clock import parse_stamp, stamp
from monitor.durations import human_duration
from monitor.store.incidents import EventKind
from monitor.store.key_order import key_order
from monitor.store.records import StoredEvent
from monitor.text import counted, cut

CHANGED = "keys_changed"  # a reply that merges several changes


def is_churn(payload: dict[str, Any]) -> bool:
    return payload.get("kind") in CHURN or payload.get("kind") == CHANGED


@dataclass(frozen=True)
class LastReply:
    """The latest churn reply of one incident's thread in one channel."""

    id: int
    state: str
    at: datetime  # when its state last changed: sent, taken for sending, or planned


@dataclass(frozen=True)
class Merge:
    """Not sent yet (certainly: PENDING): the change joins it."""

    delivery_id: int


@dataclass(frozen=True)
class Hold:
    """A reply went out less than an interval ago: a new reply waits until `until`."""

    until: datetime


def decide(last: LastReply | None, now: datetime, interval: timedelta) -> Merge | Hold | None:
    """What a change does to its thread; None: a reply now."""
    if last is None:
        return None
    if last.state == "PENDING":
        return Merge(last.id)
    if now < last.at + interval:
        return Hold(last.at + interval)
    return None


def first(event: StoredEvent, held: bool) -> dict[str, Any]:
    """The payload of a reply started by one change: the event's own (so a lone change
    reads as it always has), with when it happened, to count the runs merged later."""
    payload: dict[str, Any] = {"kind": event.kind, **event.payload, "at": stamp(event.created_at)}
    if held:
        payload["held"] = True  # the ledger moves it forward before its thread's next post
    return payload


def merged(payload: dict[str, Any], event: StoredEvent) -> dict[str, Any]:
    """`payload` (a reply's, lone or merged) with one more change: the net change since the
    previous reply, so a row that appeared and went in between is not mentioned at all."""
    since: str | None
    if payload.get("kind") == CHANGED:
        appeared = set(payload.get("appeared") or [])
        gone = set(payload.get("gone") or [])
        changes = int(payload.get("changes") or 1)
        since = str(payload["since"])
    else:
        keys = set(payload.get("keys") or [])
        appeared = keys if payload.get("kind") == "keys_appeared" else set()
        gone = keys if payload.get("kind") == "keys_gone" else set()
        changes = 1
        since = None if payload.get("at") is None else str(payload["at"])
    at = stamp(event.created_at)
    since = since or at  # a reply planned before replies were batched has no "at"
    for key in event.payload.get("keys") or []:
        mine, other = (appeared, gone) if event.kind == "keys_appeared" else (gone, appeared)
        if key in other:
            other.discard(key)  # back to how it was at the previous reply
        else:
            mine.add(key)
    out: dict[str, Any] = {
        "kind": CHANGED,
        "count": event.payload.get("count", payload.get("count")),
        # A lower bound once any merged change was (daemon.track_keys).
        "complete": payload.get("complete", True) and event.payload.get("complete", True),
        "appeared": sorted(appeared, key=key_order),
        "gone": sorted(gone, key=key_order),
        # Runs that changed something: one run's keys_appeared and keys_gone are one change.
        "changes": changes + (at != payload.get("at")),
        "since": since,
        "at": at,
    }
    if payload.get("held"):
        out["held"] = True
    return out


def changes_message(payload: dict[str, Any], view: IncidentView) -> Message:
    """One reply for several changes: how many, over how long, and the net change."""
    changes = int(payload.get("changes") or 1)
    count = payload.get("count")
    head = "🔁 The offending rows changed"
    if changes > 1:
        lasted = parse_stamp(str(payload["at"])) - parse_stamp(str(payload["since"]))
        head += f" {changes} times in {human_duration(lasted)}"
    if count is not None:
        head += f"; now {counted(int(count), 'offending row')}"
    lines = [head + "."]
    changed: tuple[tuple[EventKind, str], ...] = (
        ("keys_appeared", "appeared"),
        ("keys_gone", "gone"),
    )
    # Each part its share of the section, so that a long list of new rows never pushes
    # the rows that went out of the reply.
    parts = sum(1 for _, field in changed if payload.get(field))
    budget = (SECTION_LIMIT - len(head) - 400) // max(parts, 1)
    for kind, field in changed:
        keys = payload.get(field)
        if keys:
            # The lone-change wording, without its total (said once, above).
            wording = {"keys": list(keys), "complete": payload.get("complete", True)}
            part = reply_message(kind, wording, view, budget)
            lines.append(str(part.blocks[0]["text"]["text"]))
    if len(lines) == 1:
        lines.append("No net change: the same rows offend as at the previous reply.")
    text = "\n".join(lines)
    section = {"type": "section", "text": {"type": "mrkdwn", "text": cut(text, SECTION_LIMIT)}}
    return Message(cut(text, TEXT_LIMIT), [section])
