"""Slack messages for incidents: Block Kit built from plain data. Pure functions.

Rows are user data: every value is escaped, every cell and table is cut to fit, and every
block stays inside Slack's limits (3,000 characters a section, 150 a header, 50 blocks),
however wide or long the rows are. Status reads without colour: an emoji and a word.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from monitor.clock import shown
from monitor.durations import human_duration
from monitor.invariants.header import DEFAULT_TARGET
from monitor.store.incidents import EventKind, retired_reason, while_open
from monitor.text import counted, cut, cut_distinct, shown_text, shown_value

SECTION_LIMIT = 3000
HEADER_LIMIT = 150
TEXT_LIMIT = 300  # the notification text; the blocks carry the detail
CELL_WIDTH = 24
TABLE_WIDTH = 110
MAX_KEYS_LISTED = 20
KEY_WIDTH = 80  # one key in a reply, before escaping
KEYS_BUDGET = SECTION_LIMIT - 400  # one reply's list of keys, as Slack receives it

SEVERITY_MARK = {"critical": "🔴 CRITICAL", "warning": "🟠 WARNING", "info": "🔵 INFO"}


@dataclass(frozen=True)
class IncidentView:
    """What a message about one incident shows; read from the state store at send time."""

    incident_id: int
    invariant: str
    kind: str  # violation | cannot_evaluate | replica_stale | invalid_file
    severity: str = "warning"
    description: str | None = None
    owner: str | None = None
    runbook: str | None = None
    opened_at: datetime | None = None
    resolved_at: datetime | None = None  # when it closed, resolved or retired
    ended_as: str | None = None  # "retired" when its file was removed while it was open
    count: int | None = None
    detail: str | None = None
    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    acknowledged: str | None = None  # "Acknowledged by @x at …", when set
    acked: bool = False
    buttons: tuple[str, ...] = ()  # ack modes offered; empty: no buttons (no interactivity)
    target: str = "default"  # the monitored database
    several_targets: bool = False  # more than one is configured: every message names its own


@dataclass(frozen=True)
class Message:
    text: str
    blocks: list[dict[str, Any]]


def escape(text: str) -> str:
    """Slack's three control characters; everything else is shown as written."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_date(moment: datetime) -> str:
    """A timestamp each reader sees in their own time zone, with a plain fallback."""
    fallback = shown(moment)
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} {{time}}|{fallback}>"


def _cell(value: Any) -> str:
    # A backtick would end the code block: written as its escape (shown_value), and a value
    # cut to the width ends with a digest, so no two values of a column look alike.
    return cut_distinct(shown_value(value, escaped="`"), CELL_WIDTH)


def rows_table(columns: Sequence[str], rows: Sequence[dict[str, Any]], total: int | None) -> str:
    """A fixed-width table in a code block, cut to fit one section: columns left to right
    while they fit the width, rows while they fit the length; what is cut is said."""
    if not rows:
        return ""
    widths: list[tuple[str, int]] = []
    used = 0
    for column in columns:
        width = max(len(_cell(column)), *(len(_cell(r.get(column))) for r in rows))
        if widths and used + width + 2 > TABLE_WIDTH:
            break
        widths.append((column, width))
        used += width + 2
    # Lines are escaped as they are added, so the budget counts what Slack receives
    # (an escaped "<" is four characters long) and the closing fence always fits.
    lines = [escape("  ".join(_cell(c).ljust(w) for c, w in widths).rstrip())]
    notes = []
    hidden = len(columns) - len(widths)
    if hidden:
        notes.append(f"{hidden} more column{'s' * (hidden != 1)} in the CSV")
    budget = SECTION_LIMIT - 200
    shown = 0
    for row in rows:
        line = escape("  ".join(_cell(row.get(c)).ljust(w) for c, w in widths).rstrip())
        if sum(len(x) + 1 for x in lines) + len(line) > budget:
            break
        lines.append(line)
        shown += 1
    more = (total if total is not None else len(rows)) - shown
    if more > 0:
        notes.append(f"{counted(more, 'more row', 'more rows')} not shown")
    table = "\n".join(lines)
    note = f"\n_{escape('; '.join(notes))}_" if notes else ""
    return f"```{table}```{note}"


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": cut(text, SECTION_LIMIT)}}


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": cut(text, HEADER_LIMIT)}}


def _context(*parts: str) -> dict[str, Any]:
    return {
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": cut(p, SECTION_LIMIT)} for p in parts[:10] if p],
    }


_MENTION = re.compile(r"&lt;(@[UW][A-Z0-9]+|!subteam\^[A-Z0-9]+)&gt;")


def escape_keeping_mentions(text: str) -> str:
    """Escape everything, then restore exact user and user-group mentions: `<@U123>` and
    `<!subteam^S123>` ping who they name, while `<!channel>` or `<http://x|y>` stay text."""
    return _MENTION.sub(r"<\1>", escape(text))


def _owner(owner: str | None) -> str:
    return escape_keeping_mentions(owner) if owner else "nobody named"


def retired(view: IncidentView) -> bool:
    """Closed because its invariant was removed: not resolved, and never shown as such."""
    return view.resolved_at is not None and view.ended_as == "retired"


def status_title(view: IncidentView, now: datetime) -> str:
    name = view.invariant
    if retired(view):
        assert view.resolved_at is not None
        after = human_duration(view.resolved_at - view.opened_at) if view.opened_at else "?"
        return f"🗄️ RETIRED · {name} (after {after}): closed {while_open(view.kind, view.count)}"
    if view.resolved_at is not None:
        lasted = human_duration(view.resolved_at - view.opened_at) if view.opened_at else "?"
        closed = {
            "violation": "RESOLVED",
            "cannot_evaluate": "EVALUATING AGAIN",
            "replica_stale": "REPLICA CAUGHT UP",
            "invalid_file": "FILE FIXED",
            "target_unreachable": "TARGET ANSWERS AGAIN",
            "quarantined": "OUT OF QUARANTINE",
        }[view.kind]
        return f"✅ {closed} · {name} (lasted {lasted})"
    if view.kind == "violation":
        mark = SEVERITY_MARK.get(view.severity, view.severity.upper())
        return f"{mark} · {name} violated"
    return {
        "cannot_evaluate": f"⚠️ CANNOT EVALUATE · {name}",
        "replica_stale": f"⏸️ REPLICA STALE · {_subject(name)}invariants paused",
        "invalid_file": f"🛠️ INVALID FILE · {name}",
        "target_unreachable": f"🔌 TARGET UNREACHABLE · {_subject(name)}invariants paused",
        "quarantined": f"🧯 QUARANTINED · {name} overran its timeout",
    }[view.kind]


def _subject(name: str) -> str:
    """`(replica payments)` -> `payments: `; the one-target `(replica)` says nothing more."""
    inner = name.strip("()").split(" ", 1)
    return f"{inner[1]}: " if len(inner) == 2 else ""


def _names_database(view: IncidentView) -> bool:
    """A reader must be able to tell which database a finding came from whenever there is
    more than one, the `default` one included; with one, unnamed, there is nothing to say."""
    return view.several_targets or view.target != DEFAULT_TARGET


def _database_field(view: IncidentView) -> list[dict[str, str]]:
    if not _names_database(view):
        return []
    return [{"type": "mrkdwn", "text": f"*Database*\n{escape(view.target)}"}]


# What a root says once its incident closed (the open text, kept, would still say it is so).
_CLOSED_EXPLAIN = {
    "cannot_evaluate": "The invariant is evaluated again: its runs say whether it holds.",
    "replica_stale": "The replica caught up, and invariants are evaluated again.",
    "invalid_file": "The invariant file validates again, and its current version runs.",
    "target_unreachable": "invmon connects to this database again, and its invariants are "
    "evaluated again.",
    "quarantined": "The quarantine is lifted: the invariant is scheduled again.",
}


def root_message(view: IncidentView, now: datetime) -> Message:
    title = status_title(view, now)
    blocks: list[dict[str, Any]] = [_header(title)]
    if retired(view):
        # Said in full here too: the header is cut at 150 characters, a long name first.
        blocks.append(
            _section(
                f"🗄️ *Retired:* {escape(retired_reason(view.kind, view.count))}. It is no "
                "longer evaluated, so nothing says whether it holds now."
            )
        )
    if view.kind == "violation":
        blocks.append(_section(f"*What must hold:* {escape(view.description or '')}"))
        count = "-" if view.count is None else f"{view.count:,}"
        first = slack_date(view.opened_at) if view.opened_at else "-"
        blocks.append(
            {
                "type": "section",
                "fields": [
                    {"type": "mrkdwn", "text": f"*Offending rows*\n{count}"},
                    {"type": "mrkdwn", "text": f"*First seen*\n{first}"},
                    {"type": "mrkdwn", "text": f"*Owner*\n{_owner(view.owner)}"},
                    {"type": "mrkdwn", "text": f"*Severity*\n{escape(view.severity)}"},
                    *_database_field(view),
                ],
            }
        )
        table = rows_table(view.columns, view.rows, view.count)
        if table and view.resolved_at is None:
            blocks.append(_section(table))
    else:
        explain = {
            "cannot_evaluate": "The invariant could not be checked, so nobody knows whether it "
            "holds. This is not a violation; fix the query or the database access.",
            "replica_stale": "The replica is too far behind to trust, so invariants are not "
            "being evaluated. Nothing is known to be violated; nothing is known to hold.",
            "invalid_file": "The invariant file no longer validates. The previous version "
            "keeps running if there was one; the new one will not run until it is fixed.",
            "target_unreachable": "invmon cannot connect to this database, so its invariants "
            "are not being evaluated (one incident for all of them). Nothing is known to be "
            "violated; nothing is known to hold. Other targets are evaluated as usual.",
            "quarantined": "A run of this invariant went on past its timeout, and the "
            "database did not stop it (an uninterruptible function, an overloaded or stopped "
            "server process, or a network that drops packets): it is not scheduled again, on "
            "any daemon, until its file changes or `invmon unquarantine` lifts it. Nothing is "
            "known to hold meanwhile.",
        }[view.kind]
        if retired(view):
            explain = ""  # the block above says why it closed and what that means
        elif view.resolved_at is not None:
            explain = _CLOSED_EXPLAIN[view.kind]  # the open text would say it is still so
        if explain:
            blocks.append(_section(explain))
        if view.detail:
            # A backtick in the database's words would close the block early.
            detail = cut(view.detail.replace("`", "'"), SECTION_LIMIT - 20)
            said = "*It said:* " if view.resolved_at is not None else ""
            blocks.append(_section(f"{said}```{escape(detail)}```"))
        blocks.append(_context(f"Owner: {_owner(view.owner)}" if view.owner else ""))
    if view.acknowledged:
        blocks.append(_context(escape_keeping_mentions(view.acknowledged)))
    if view.resolved_at is None and (view.buttons or view.runbook):
        blocks.append(_actions(view))
    footer = [f"incident #{view.incident_id}"]
    if _names_database(view):
        footer.append(f"database {escape(view.target)}")
    if view.runbook:
        footer.append(f"<{view.runbook}|Runbook>")
    blocks.append(_context(" · ".join(footer)))
    blocks = [b for b in blocks if b.get("type") != "context" or b["elements"]]
    # A retired title already says what still offended.
    shows_count = view.count and not retired(view)
    count_text = f": {counted(view.count or 0, 'offending row')}" if shows_count else ""
    # The fallback text is read as mrkdwn too (notifications, where blocks cannot show): the
    # invariant's name in it is escaped as in every block.
    return Message(cut(f"{escape(title)}{count_text}", TEXT_LIMIT), blocks[:50])


ACK_LABEL = {"until_resolved": "👀 Ack until resolved", "until_new_rows": "👀 Ack until new rows"}


def _button(text: str, action_id: str, value: str, style: str | None = None) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "text": {"type": "plain_text", "text": text, "emoji": True},
        "action_id": action_id,
        "value": value,
    }
    if style:
        button["style"] = style
    return button


def _actions(view: IncidentView) -> dict[str, Any]:
    value = str(view.incident_id)
    elements: list[dict[str, Any]] = []
    if view.buttons:
        if view.acked:
            elements.append(_button("↩️ Unacknowledge", "invmon_unack", value))
        elif len(view.buttons) == 1:
            elements.append(
                _button("👀 Acknowledge", f"invmon_ack_{view.buttons[0]}", value, "primary")
            )
        else:
            elements += [_button(ACK_LABEL[m], f"invmon_ack_{m}", value) for m in view.buttons]
        elements += [
            _button(f"💤 Snooze {h}", f"invmon_snooze_{h}", value) for h in ("1h", "4h", "24h")
        ]
    if view.runbook:
        elements.append(
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "📖 Runbook"},
                "url": view.runbook,
                "action_id": "invmon_runbook",
            }
        )
    return {
        "type": "actions",
        "block_id": f"invmon_incident_{view.incident_id}",
        "elements": elements,
    }


def _keys(keys: Sequence[str], budget: int) -> str:
    """Keys in inline code, as many as fit `budget` characters as Slack receives them (an
    escaped `<` is four long), then how many more: cut after escaping, a long list lost the
    end of its reply, and another part of it. Each key as its rows are shown (a backtick or
    a hidden character as its escape, a long one cut with a digest), so none looks like
    another."""
    listed: list[str] = []
    used = 0
    for key in keys[:MAX_KEYS_LISTED]:
        item = escape(f"`{cut_distinct(shown_text(key, escaped='`'), KEY_WIDTH)}`")
        if listed and used + len(item) + 2 > budget:
            break
        listed.append(item)
        used += len(item) + 2
    more = len(keys) - len(listed)
    return ", ".join(listed) + (f" and {more:,} more" if more > 0 else "")


def reply_message(
    kind: EventKind, payload: dict[str, Any], view: IncidentView, key_budget: int = KEYS_BUDGET
) -> Message:
    """A thread reply for an event after the opening: one wording for each kind in
    FOLLOWING_EVENTS (a test holds the table to that set)."""
    text = reply_wording(payload, view, key_budget)[kind]
    return Message(cut(text, TEXT_LIMIT), [_section(text)])


TRACKED_ONLY = (
    " (more rows offend than invmon compares: past daemon.track_keys, or, for a file without "
    "a `key:`, past its sample)"
)


def reply_wording(
    payload: dict[str, Any], view: IncidentView, key_budget: int = KEYS_BUDGET
) -> dict[EventKind, str]:
    """Slack's wording table, keyed by event kind, for one event's payload."""
    count = payload.get("count")
    total = "" if count is None else f" (now {count:,} in total)"
    keys = list(payload.get("keys") or [])
    lasted = payload.get("lasted_seconds")
    took = human_duration(timedelta(seconds=lasted)) if lasted is not None else "?"
    reason = escape(str(payload.get("reason") or ""))
    # Past daemon.track_keys only the first keys are compared: the numbers are lower bounds.
    bound = "" if payload.get("complete", True) else "at least "
    beyond = "" if payload.get("complete", True) else TRACKED_ONLY
    return {
        "keys_appeared": f"➕ {bound}{counted(len(keys), 'new offending row')}{total}{beyond}: "
        f"{_keys(keys, key_budget)}",
        "keys_gone": f"➖ {bound}{counted(len(keys), 'row')} no longer "
        f"{'offends' if len(keys) == 1 and not bound else 'offend'}{total}{beyond}: "
        f"{_keys(keys, key_budget)}",
        "resolved": f"✅ Closed after {took}: {reason}; it is no longer evaluated."
        if reason
        else f"✅ Resolved after {took}: the query returns no rows.",
        "recovered": f"✅ Evaluating again after {took}.",
        "replica_fresh": f"✅ The replica caught up after {took}; evaluation resumed.",
        "file_fixed": f"✅ The file validates again after {took}.",
        "target_reachable": f"✅ The database answers again after {took}; evaluation resumed.",
        "unquarantined": f"✅ Out of quarantine after {took}: {reason or 'lifted'}; "
        "it is scheduled again.",
        "retired": f"🗄️ Closed after {took}: "
        f"{reason or escape(retired_reason(view.kind, count))}; "
        "it is no longer evaluated.",
    }


def mute_ended_message(payload: dict[str, Any], view: IncidentView) -> Message:
    """The one reply when a mute that kept this incident quiet ends and it is still open;
    the root above it was kept up to date while muted."""
    count = "" if view.count is None else f" with {counted(view.count, 'offending row')}"
    reason = escape(cut(str(payload.get("reason") or ""), 200))
    text = (
        f"🔔 Mute #{payload.get('mute')} ({reason}) ended: this is still open{count}. "
        "Nothing was posted about it while it was muted; the message above shows it now."
    )
    return Message(cut(text, TEXT_LIMIT), [_section(text)])


def with_subject(message: Message, subject: str) -> Message:
    """The same message, introduced by what it is about."""
    blocks = [_section(f"{subject}: {message.blocks[0]['text']['text']}"), *message.blocks[1:]]
    return Message(cut(f"{subject}: {message.text}", TEXT_LIMIT), blocks)


def reminder_message(view: IncidentView, now: datetime) -> Message:
    opened = human_duration(now - view.opened_at) if view.opened_at else "?"
    count = "" if view.count is None else f" {counted(view.count, 'offending row')},"
    text = f"⏰ Still open:{count} for {opened}. Nobody has acknowledged it yet."
    return Message(text, [_section(text)])


SUMMARY_GROUPS = (
    ("open", "🚨 Open"),
    ("acked", "👀 Acknowledged"),
    ("snoozed", "💤 Snoozed"),
    ("resolved", "✅ Resolved in the last day"),
    ("retired", "🗄️ Retired in the last day"),
)


def summary_message(
    day: str, groups: Mapping[str, Sequence[IncidentView]], now: datetime
) -> Message:
    """A channel's daily summary: each group with its incidents, in the order they opened."""
    total = sum(len(v) for v in groups.values())
    title = f"🗓️ Daily summary · {day}"
    blocks: list[dict[str, Any]] = [_header(title)]
    counts = []
    for group, label in SUMMARY_GROUPS:
        views = groups.get(group) or []
        counts.append(f"{label.split(' ', 1)[1].lower()}: {len(views)}")
        if not views:
            continue
        lines = [f"*{label}* ({len(views)})"]
        for view in views[:40]:
            quiet = view.count is None or retired(view)  # a retired title says its count
            count = "" if quiet else f" — {counted(view.count or 0, 'row')}"
            lines.append(f"• {escape(status_title(view, now))}{count}")
        if len(views) > 40:
            lines.append(f"… and {len(views) - 40:,} more")
        blocks.append(_section(cut("\n".join(lines), SECTION_LIMIT)))
    if total == 0:
        blocks.append(_section("Nothing open, acknowledged, snoozed, resolved or retired."))
    return Message(cut(f"{title}: " + ", ".join(counts), TEXT_LIMIT), blocks[:50])


def digest_message(views: Sequence[IncidentView], now: datetime) -> Message:
    """One message for a burst of incidents; each incident's details go in its thread.
    Openings that join it later (slack.digest_group_interval) are listed as it is edited,
    and the title then says over how long they opened rather than "at once"."""
    opened = [v.opened_at for v in views if v.opened_at is not None]
    spread = max(opened) - min(opened) if opened else timedelta(0)
    when = "at once" if spread < timedelta(minutes=1) else f"within {human_duration(spread)}"
    title = f"🚨 {len(views)} incidents opened {when}"
    lines = []
    for view in views:
        count = "" if view.count is None else f" — {counted(view.count, 'row')}"
        lines.append(f"• {escape(status_title(view, now))}{count}")
    blocks: list[dict[str, Any]] = [_header(title)]
    chunk: list[str] = []
    for line in lines:
        if sum(len(x) + 1 for x in chunk) + len(line) > SECTION_LIMIT - 100:
            blocks.append(_section("\n".join(chunk)))
            chunk = []
        chunk.append(line)
    if chunk:
        blocks.append(_section("\n".join(chunk)))
    blocks.append(_context("Details of each are in this thread."))
    return Message(cut(title, TEXT_LIMIT), blocks[:50])
