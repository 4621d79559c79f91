"""What to tell a fixture's author when a case's keys or rows differ only in how a value
is written: the database returns a numeric as text with its exact digits (rows.py), so
YAML's number 1000 never equals it. Pure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any


def text_hint(missing: Sequence[str], unexpected: Sequence[str]) -> str | None:
    """Keys and rows are compared as the database returns them, JSON-safe (rows.py): a
    numeric comes back as text with its exact digits, so YAML's number 1000 never equals
    it. Where an expected value is a number and the database's at the same place is text,
    say what to write: the returned text itself when it is the same number."""
    same: list[str] = []
    other: list[str] = []
    for rows in (False, True):
        wanted = [_decoded(m) for m in missing if m.startswith("row ") == rows]
        got = [_decoded(u) for u in unexpected if u.startswith("row ") == rows]
        for expected, returned in (
            pair for w in wanted for g in got for pair in _same_places(w, g)
        ):
            if not (_is_number(expected) and isinstance(returned, str)):
                continue
            into = same if _same_number(expected, returned) else other
            if returned not in into:
                into.append(returned)
    if same:
        written = ", ".join(json.dumps(v, ensure_ascii=False) for v in same)
        return (
            "values are compared as the database returns them, and it returns these as "
            f"text: write {written}"
        )
    if other:
        return (
            "values are compared as the database returns them, and it returns text where the "
            f"case has a number, e.g. {json.dumps(other[0], ensure_ascii=False)}: quote them"
        )
    return None


def _decoded(found: str) -> Any:
    return json.loads(found.removeprefix("row "))


def _same_places(expected: Any, returned: Any) -> list[tuple[Any, Any]]:
    """The values at the same place in an expected and a returned key (or row)."""
    if isinstance(expected, list) and isinstance(returned, list):
        if len(expected) != len(returned):
            return []
        return [p for e, r in zip(expected, returned, strict=True) for p in _same_places(e, r)]
    if isinstance(expected, dict) and isinstance(returned, dict):
        return [
            p for k in expected if k in returned for p in _same_places(expected[k], returned[k])
        ]
    return [(expected, returned)]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same_number(number: int | float, text: str) -> bool:
    try:
        return Decimal(text) == Decimal(repr(number))
    except (ArithmeticError, ValueError):
        return False
