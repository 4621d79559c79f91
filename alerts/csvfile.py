"""The offending rows as a CSV file, attached in the alert's thread. Pure."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any


def _value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def columns_of(rows: Sequence[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for column in row:
            seen.setdefault(column, None)
    return list(seen)


def offending_csv(rows: Sequence[dict[str, Any]], cap: int) -> bytes:
    """Every row whole (no cell is cut), up to `cap` rows; the caller says what was left out."""
    columns = columns_of(rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows[:cap]:
        writer.writerow([_value(row.get(column)) for column in columns])
    return buffer.getvalue().encode("utf-8")


def csv_title(invariant: str, attached: int, total: int | None) -> str:
    if total is not None and total > attached:
        return (
            f"{invariant}: {attached:,} of {total:,} offending rows ({total - attached:,} left out)"
        )
    return f"{invariant}: {attached:,} offending row{'s' * (attached != 1)}"
