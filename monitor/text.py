"""Text from files, databases and the network, made safe to show: no control character
that could forge a log line or move a terminal's cursor, and no unbounded echo of input."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_NEWLINES = re.compile(r"[\n]")


def printable(text: str, keep_newlines: bool = False) -> str:
    """`text` with each control character written as an escape (`\\n`, `\\x1b`): a file
    named `evil\\n2026-… ERROR forged.sql` stays on one line."""
    escaped = _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode(), text)
    return escaped if keep_newlines else _NEWLINES.sub("\\\\n", escaped)


def shorten(value: object, limit: int = 80) -> str:
    """A short, printable rendering of any value, for an error message about it."""
    text = printable(repr(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`1 offending row`, `2 offending rows`: the number with its noun agreeing."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def cut(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"
