"""A Transport for when no Slack is configured: alerts are printed, readably, to stdout.

It goes through the same ledger as Slack, so the demo and a Slack-less deployment show
exactly what would be sent. Stdout keeps no history, so a post whose outcome is unknown
(the process died mid-print) is printed again: at least once, not exactly once.
"""

from __future__ import annotations

import itertools
import re
import sys
from typing import Any, TextIO

from alerts.transport import Posted


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


class ConsoleTransport:
    name = "console"

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._ts = itertools.count(1)

    def _print(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def post(
        self,
        channel: str,
        text: str,
        blocks: list[dict[str, Any]],
        key: str,
        thread_ts: str | None = None,
    ) -> Posted:
        ts = f"{next(self._ts)}.000000"
        where = f"{channel} (in thread {thread_ts})" if thread_ts else channel
        indent = "    " if thread_ts else ""
        body = "\n".join(indent + line for line in plain(blocks).splitlines())
        self._print(f"\n── alert to {where} ──\n{body}")
        return Posted(channel, ts)

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None:
        self._print(f"\n── alert {ts} in {channel} updated ──\n{plain(blocks)}")

    def find_posted(
        self, channel: str, key: str, oldest: float, thread_ts: str | None = None
    ) -> Posted | None:
        return None

    def start_upload(self, filename: str, data: bytes) -> str:
        return f"console-{filename}-{len(data)}"

    def complete_upload(self, file_id: str, title: str, channel: str, thread_ts: str) -> None:
        self._print(f"    📎 CSV attached: {title}")

    def file_shared(self, file_id: str, channel: str) -> bool | None:
        return None
