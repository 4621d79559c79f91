"""A Transport for when no Slack is configured: alerts are printed, readably, to stdout.

It goes through the same ledger as Slack, so the demo and a Slack-less deployment show
exactly what would be sent. Stdout keeps no history, so a post whose outcome is unknown
(the process died mid-print) is printed again: at least once, not exactly once.

Printed messages of several incidents interleave (one incident's CSV after the next one's
root), and stdout has no threads to hold them apart, so every item printed names its
incident: `── alert to #invariants · incident #7 (bad_items) ──`, `📎 CSV of incident #7: …`.
The incident is read from what the message itself says (a root's footer `incident #7`, a
reply's `*name* (incident #7):` in a digest's thread), else from the thread it goes in,
remembered by this process; a thread of an earlier process is not known, and is then shown
as before, without one.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, TextIO

from alerts.transport import Posted
from monitor.text import printable


def plain(blocks: list[dict[str, Any]]) -> str:
    """Block Kit as terminal text."""
    lines: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "header":
            lines.append(block["text"]["text"])
        elif kind == "section":
            if "text" in block:
                lines.append(_unmrkdwn(block["text"]["text"]))
            for item in block.get("fields", []):
                lines.append(_unmrkdwn(item["text"]).replace("\n", ": ", 1))
        elif kind == "context":
            lines.append(" · ".join(_unmrkdwn(e.get("text", "")) for e in block["elements"]))
    return "\n".join(lines)


def _unmrkdwn(text: str) -> str:
    text = re.sub(r"<!date\^\d+\^[^|]*\|([^>]*)>", r"\1", text)
    text = re.sub(r"<([^|>]+)\|([^>]+)>", r"\2 (\1)", text)
    text = re.sub(r"(?m)^_(.+)_$", r"\1", text)
    text = text.replace("```", "\n").replace("&lt;", "<").replace("&gt;", ">")
    return text.replace("&amp;", "&").replace("*", "")


def _unescaped(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


@dataclass(frozen=True)
class About:
    """The incident a printed item is about."""

    incident: int
    invariant: str | None = None

    def __str__(self) -> str:
        name = f" ({self.invariant})" if self.invariant else ""
        return f"incident #{self.incident}{name}"


# An incident's own message ends with a context block `incident #7 · database … · Runbook`.
_FOOTER = re.compile(r"^incident #(\d+)(?: · |$)")
# A reply in a digest's thread opens with what it is about.
_SUBJECT = re.compile(r"^\*(?P<name>.+)\* \(incident #(?P<id>\d+)\): ")
# The titles (alerts/messages.py, status_title) that name the invariant; another one (a
# target's or a replica's, or a title cut short) leaves the name out, never a wrong one.
_TITLES = (
    re.compile(r"^(?:🔴 CRITICAL|🟠 WARNING|🔵 INFO|[A-Z]+) · (?P<name>.+) violated$"),
    re.compile(r"^✅ [A-Z ]+ · (?P<name>.+) \(lasted [^()]*\)$"),
    re.compile(r"^🗄️ RETIRED · (?P<name>.+) \(after [^()]*\): closed .*$"),
    re.compile(r"^(?:⚠️ CANNOT EVALUATE|🛠️ INVALID FILE) · (?P<name>.+)$"),
    re.compile(r"^🧯 QUARANTINED · (?P<name>.+) overran its timeout$"),
)


def about(blocks: list[dict[str, Any]]) -> About | None:
    """The incident a message says it is about, if it says."""
    for block in blocks:
        if block.get("type") == "section" and "text" in block:
            subject = _SUBJECT.match(block["text"]["text"])
            if subject:
                return About(int(subject["id"]), _unescaped(subject["name"]))
            break
    for block in reversed(blocks):
        if block.get("type") != "context":
            continue
        for element in block.get("elements", []):
            footer = _FOOTER.match(element.get("text", ""))
            if footer:
                return About(int(footer[1]), _title_name(blocks))
    return None


def _title_name(blocks: list[dict[str, Any]]) -> str | None:
    header = next((b for b in blocks if b.get("type") == "header"), None)
    if header is None:
        return None
    title = str(header["text"]["text"])
    for pattern in _TITLES:
        match = pattern.match(title)
        if match:
            return match["name"]
    return None


class ConsoleTransport:
    name = "console"

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._lock = threading.Lock()
        self._last = 0
        self._about: dict[str, About] = {}  # ts -> its incident, for what this process posted
        self._threads: dict[str, list[About]] = {}  # thread ts -> the incidents posted in it

    def _print(self, text: str) -> None:
        # Row values and invariant names can hold terminal escapes (a colour, a window
        # title, a bell): written as escapes, as every log line and `check` write them. The
        # layout's own newlines stay; a value's are gone already (a cell is one line).
        self.out.write(printable(text, keep_newlines=True) + "\n")
        self.out.flush()

    def _next_ts(self) -> str:
        """Slack's form, epoch seconds and microseconds, rising and unique across restarts,
        so a thread an earlier process started is never taken for one of this process's."""
        with self._lock:
            self._last = max(time.time_ns() // 1000, self._last + 1)
            micros = self._last
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"

    def _thread_about(self, thread_ts: str) -> About | None:
        with self._lock:
            return self._about.get(thread_ts)

    def post(
        self,
        channel: str,
        text: str,
        blocks: list[dict[str, Any]],
        key: str,
        thread_ts: str | None = None,
    ) -> Posted:
        ts = self._next_ts()
        own = about(blocks)
        subject = own or (self._thread_about(thread_ts) if thread_ts else None)
        with self._lock:
            if own is not None:
                self._about[ts] = own
                if thread_ts:
                    self._threads.setdefault(thread_ts, []).append(own)
        where = f"{channel} (in thread {thread_ts})" if thread_ts else channel
        named = f" · {subject}" if subject else ""
        indent = "    " if thread_ts else ""
        body = "\n".join(indent + line for line in plain(blocks).splitlines())
        self._print(f"\n── alert to {where}{named} ──\n{body}")
        return Posted(channel, ts)

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None:
        subject = about(blocks) or self._thread_about(ts)
        named = f" · {subject}" if subject else ""
        self._print(f"\n── alert {ts} in {channel} updated{named} ──\n{plain(blocks)}")

    def find_posted(
        self, channel: str, key: str, oldest: float, thread_ts: str | None = None
    ) -> Posted | None:
        return None

    def start_upload(self, filename: str, data: bytes) -> str:
        return f"console-{filename}-{len(data)}"

    def complete_upload(self, file_id: str, title: str, channel: str, thread_ts: str) -> None:
        subject = self._csv_about(title, thread_ts)
        of = f" of incident #{subject.incident}:" if subject else " attached:"
        self._print(f"    📎 CSV{of} {title}")

    def _csv_about(self, title: str, thread_ts: str) -> About | None:
        """The incident a CSV belongs to: its thread's, or in a digest's thread the one
        whose invariant its title names (`name: 3 offending rows`)."""
        with self._lock:
            root = self._about.get(thread_ts)
            if root is not None:
                return root
            named = [
                a
                for a in self._threads.get(thread_ts, [])
                if a.invariant and title.startswith(f"{a.invariant}: ")
            ]
        return max(named, key=lambda a: len(a.invariant or ""), default=None)

    def file_shared(self, file_id: str, channel: str) -> bool | None:
        return None
