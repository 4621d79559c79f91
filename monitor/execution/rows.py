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


class _Inexact(Exception):
    """Python's reading of a JSON text would show something other than what it holds."""


def _float_as_written(token: str) -> float:
    number = float(token)
    if repr(number) != token:  # 1e400 (inf), 1.10, 1e5, 0.1000000000000000055…
        raise _Inexact(token)
    return number


def _int_as_written(token: str) -> int:
    number = int(token)
    if str(number) != token:  # -0
        raise _Inexact(token)
    return number


def _no_constant(word: str) -> Any:
    raise _Inexact(word)  # NaN, Infinity: not JSON, and PostgreSQL never sends them


def _keys_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):  # {"a": 1, "a": 2}: a json value keeps both
        raise _Inexact("duplicate key")
    return found


def exact_json(text: str) -> Any:
    """A json or jsonb value as PostgreSQL sent it: its structure (dicts, lists, numbers)
    when Python's reading of it shows exactly what the text holds, else the text itself.
    json.loads alone turned 1e400 into infinity, 1.10 into 1.1 and {"a":1,"a":2} into
    {"a": 2}: a message would have said something the database did not hold. A JSON null
    is its text, `null`: read as None it was SQL NULL in every message and the same key."""
    if text.strip() == "null":
        return text.strip()
    try:
        return json.loads(
            text,
            parse_float=_float_as_written,
            parse_int=_int_as_written,
            parse_constant=_no_constant,
            object_pairs_hook=_keys_once,
        )
    except (_Inexact, RecursionError, ValueError):
        return text


def json_safe(value: Any) -> JsonValue:
    """A value json.dumps accepts without losing meaning.

    Decimals become strings so money keeps its exact digits, written out as PostgreSQL
    writes them (0.0000001, never 1E-7); timestamps become ISO 8601, a timestamptz in UTC;
    intervals (read as text: execute._Interval) stay as PostgreSQL wrote them, a timedelta
    as seconds; a float's NaN and infinities their SQL spelling; bytes become base64;
    arrays keep their structure, as json and jsonb values do where exact_json kept it.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if abs(value) == float("inf"):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        # A timestamptz is an instant: said in UTC, whatever the session's TimeZone, so a key
        # and a message are the same from a database, a daemon (PGTZ) or a replica set to
        # another zone. In the session's zone, one instant read as a new row and a gone one.
        return value.astimezone(dt.UTC).isoformat()
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
    """`SELECT a.id, b.id` yields two columns named id; keep both as id and id_2. A name
    the query gives a column itself is never given to another: in `SELECT 1 AS x, 2 AS x,
    3 AS x_2` the second x is x_3, and x_2 stays the column the query named so."""
    own = set(names)
    used: set[str] = set()
    out = []
    for name in names:
        candidate, n = name, 1
        while candidate in used or (n > 1 and candidate in own):
            n += 1
            candidate = f"{name}_{n}"
        used.add(candidate)
        out.append(candidate)
    return out


def key_values(key: str) -> JsonValue:
    """What offending_key encoded: the key columns' values (or the whole row)."""
    try:
        return json.loads(key)
    except ValueError:
        return key  # written by an older version, or not a key: shown as it is


def keyed_by(key_columns: Sequence[str], columns: Sequence[str]) -> str:
    """What offending_key makes its keys of: the key columns, else every column of the row.
    Two runs whose keys are made alike can say which rows came and went; others cannot."""
    if key_columns:
        return json.dumps({"key": list(key_columns)}, ensure_ascii=False)
    return json.dumps({"row": sorted(columns)}, ensure_ascii=False)


def offending_key(row: dict[str, JsonValue], key_columns: Sequence[str]) -> str:
    """A stable identity for one offending row: its key columns, else the whole row."""
    if key_columns:
        return json.dumps([row.get(column) for column in key_columns], ensure_ascii=False)
    return json.dumps(row, sort_keys=True, ensure_ascii=False)
