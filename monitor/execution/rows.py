"""Turning database values into JSON-safe values, and naming result columns."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import ipaddress
import json
import uuid
from collections.abc import Sequence
from typing import Any

JsonValue = Any  # str | int | float | bool | None | list[JsonValue] | dict[str, JsonValue]


def json_safe(value: Any) -> JsonValue:
    """A value json.dumps accepts without losing meaning.

    Decimals become strings so money keeps its exact digits; timestamps become ISO 8601;
    intervals become seconds; bytes become base64; arrays and jsonb keep their structure.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        finite = value == value and abs(value) != float("inf")
        return value if finite else str(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID | ipaddress.IPv4Address | ipaddress.IPv6Address):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v) for v in value]
    return str(value)


def unique_column_names(names: Sequence[str]) -> list[str]:
    """`SELECT a.id, b.id` yields two columns named id; keep both as id and id_2."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        count = seen.get(name, 0) + 1
        seen[name] = count
        candidate = name if count == 1 else f"{name}_{count}"
        while candidate in seen and count > 1:
            count += 1
            candidate = f"{name}_{count}"
        seen.setdefault(candidate, 1)
        out.append(candidate)
    return out


def key_values(key: str) -> JsonValue:
    """What offending_key encoded: the key columns' values (or the whole row)."""
    try:
        return json.loads(key)
    except ValueError:
        return key  # written by an older version, or not a key: shown as it is


def offending_key(row: dict[str, JsonValue], key_columns: Sequence[str]) -> str:
    """A stable identity for one offending row: its key columns, else the whole row."""
    if key_columns:
        return json.dumps([row.get(column) for column in key_columns], ensure_ascii=False)
    return json.dumps(row, sort_keys=True, ensure_ascii=False)
