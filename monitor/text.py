"""Text from files, databases and the network, made safe to show: no control character
that could forge a log line or move a terminal's cursor, and no unbounded echo of input."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from typing import Any

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


NULL_MARK = "∅"  # how a table shows SQL NULL
_HIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _hidden(ch: str) -> bool:
    """A character that shows nothing, or moves what follows: a control, a format character
    (bidi overrides U+202A-U+202E and U+2066-U+2069, zero-width U+200B-U+200D, U+FEFF), a
    line or paragraph separator. In a row's value it could reverse or hide what is shown."""
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")


def shown_value(value: Any, escaped: str = "") -> str:
    """A row's value as one line of text that no other value shows as: NULL is NULL_MARK; a
    string is itself when that is unambiguous, else its JSON literal (`""`, `" a"`, `"∅"`,
    `"a  b"`, `"a\\nb"`); any other value its JSON; a hidden character (above) is always
    written as its escape, `\\u202e`, and so is each of `escaped` (a backtick, where the
    text goes in Slack's code: replaced by a quote, ``a`b`` showed as `a'b` did). One rule
    for every table: Slack's, the command line's, the status page's."""
    if value is None:
        return NULL_MARK
    if isinstance(value, str) and _plain(value) and not any(c in escaped for c in value):
        return value
    return shown_text(json.dumps(value, ensure_ascii=False), escaped)


def shown_text(text: str, escaped: str = "") -> str:
    """`text` with each hidden character, and each of `escaped`, written as its escape."""
    return "".join(f"\\u{ord(ch):04x}" if _hidden(ch) or ch in escaped else ch for ch in text)


def cut_distinct(text: str, width: int) -> str:
    """`text` in at most `width` characters; one longer is cut and ends with a digest of the
    whole, so that two values that differ past the cut never show alike."""
    if len(text) <= width:
        return text
    digest = hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()[:8]
    return f"{text[: width - 10]}…#{digest}"


def _plain(text: str) -> bool:
    return (
        bool(text)
        and text != NULL_MARK
        and not text.startswith('"')
        and " ".join(text.split()) == text
        and not any(_hidden(ch) for ch in text)
    )


_CUT_LABEL = re.compile(r"… \[cut: [^\]]*\]$")


def cut_value_text(text: str, limit: int) -> str:
    """`text` (a shown value) in at most `limit` characters, keeping the label a value the
    database cut ends with (`… [cut: 9,000 bytes in all, md5 …]`): cut shorter, it would
    read as the whole value."""
    if len(text) <= limit:
        return text
    label = _CUT_LABEL.search(text)
    if label is None or len(label.group(0)) >= limit:
        return cut(text, limit)
    return text[: limit - len(label.group(0))] + label.group(0)
