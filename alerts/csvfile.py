"""The offending rows as a CSV file, attached in the alert's thread. Pure."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from monitor.text import counted

# What a spreadsheet reads as a formula when it opens a CSV: a text value starting so is
# written after a ' (OWASP's advice), which spreadsheets take as "this is text" and hide.
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


# A number as a numeric column's text holds it (-12.50, +3, -1e5): a spreadsheet reads it
# as the number it is, and runs nothing; left as it is.
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def _value(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        formula = value.startswith(_FORMULA) and not _NUMBER.fullmatch(value)
        return f"'{value}" if formula else value
    return json.dumps(value, ensure_ascii=False)


def _field(text: str | None) -> str:
    """One field as PostgreSQL's COPY writes CSV: NULL an empty field, an empty text `""`
    (csv.writer wrote both as an empty field, so a NULL read as a text left empty); a text
    holding a comma, a quote or a line break quoted, its quotes doubled."""
    if text is None:
        return ""
    if text == "" or any(ch in text for ch in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def columns_of(rows: Sequence[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for column in row:
            seen.setdefault(column, None)
    return list(seen)


def offending_csv(
    rows: Sequence[dict[str, Any]], max_rows: int, max_bytes: int
) -> tuple[bytes, int]:
    """(the file, how many rows it holds): whole rows, as stored, until `max_rows` rows or
    `max_bytes` bytes; the title says how many were left out."""
    columns = columns_of(rows)
    out = bytearray()

    def line(values: Sequence[str | None]) -> bytes:
        return (",".join(_field(v) for v in values) + "\n").encode("utf-8")

    out += line([_value(c) for c in columns])  # a column's name is text too
    written = 0
    for row in rows[:max_rows]:
        encoded = line([_value(row.get(column)) for column in columns])
        if len(out) + len(encoded) > max_bytes:
            break
        out += encoded
        written += 1
    return bytes(out), written


def csv_title(invariant: str, attached: int, total: int | None, why: str = "") -> str:
    """The file's title in the thread: how many rows it holds, and why not all of them."""
    if total is not None and total > attached:
        reason = f": {why}" if why else ""
        return (
            f"{invariant}: {attached:,} of {counted(total, 'offending row')} "
            f"({total - attached:,} left out{reason})"
        )
    return f"{invariant}: {counted(attached, 'offending row')}"


def left_out_because(kept: int, attached: int, max_rows: int, max_bytes: int) -> str:
    """Why a file holds fewer rows than offend: its own caps, or the run kept only so many."""
    if attached < min(kept, max_rows):
        return f"the file stops at {max_bytes:,} bytes (slack.csv_max_bytes)"
    if attached == max_rows and kept > max_rows:
        return f"the file stops at {counted(max_rows, 'row')} (slack.csv_max_rows)"
    return (
        "a run keeps whole rows only for its sample (the header's `sample:`), within "
        "limits.sample_bytes"
    )
