"""Offending keys in the order the database would sort them, not as text: `[3]` before
`[12]` before `[260]`. A key is stored as the JSON list of its values; numbers (and numeric
values, which travel as strings of exact digits) compare as numbers, text as text, NULLs
last, as in PostgreSQL's ascending order. Pure."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

_NUMERIC = re.compile(r"-?\d+(\.\d+)?")
Order = tuple[tuple[int, Any], ...]


def key_order(key: Any) -> Order:
    """A sort key for one stored key (its JSON text, or already its values)."""
    values = key
    if isinstance(key, str):
        try:
            values = json.loads(key)
        except ValueError:
            return ((2, key),)  # not a stored key: after every number, as text
    if not isinstance(values, list):
        values = [values]
    return tuple(_value_order(v) for v in values)


def _value_order(value: Any) -> tuple[int, Any]:
    if value is None:
        return (4, "")
    if isinstance(value, bool):
        return (3, str(value))
    if isinstance(value, int | float):
        return (0, Decimal(str(value)))
    if isinstance(value, str) and _NUMERIC.fullmatch(value):
        return (0, Decimal(value))
    if isinstance(value, str):
        return (1, value)
    return (3, json.dumps(value, sort_keys=True))
