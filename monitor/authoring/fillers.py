"""Values for the columns a fixture case does not name. Pure.

A case lists only the columns its invariant reads (dbt unit tests work this way); every
other column that is NOT NULL with no default gets a filler of its type, distinct per row
(`n`), so a UNIQUE column does not collide. A column that is a foreign key is never filled:
its value must name a row the case lists, and the case is told so.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any


@dataclass(frozen=True)
class Needed:
    """A NOT NULL column with no default, identity or generation."""

    column: str
    type_name: str  # format_type(), e.g. "character varying(20)", "numeric(12,2)"
    category: str  # pg_type.typcategory: N numeric, S string, B boolean, D date/time, …
    base: str  # the base type's name (a domain's, an array's element's)
    first_label: str | None = None  # an enum's first value
    references: str | None = None  # the table a foreign key points at


_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class NoFiller(Exception):
    """A required column invmon cannot fill; the message says what to write instead."""


def filler(need: Needed, n: int) -> Any:
    """A value for row `n` (from 1) of a column the case does not name."""
    if need.references is not None:
        raise NoFiller(
            f"{need.column} is NOT NULL and refers to {need.references}: list the "
            f"{need.references} row under `rows:` and set {need.column} to it"
        )
    if need.first_label is not None:
        return need.first_label
    base = need.base
    if need.type_name.endswith("[]"):
        return []
    if need.category == "N":
        return n
    if need.category == "S":
        width = _length(need.type_name)
        text = f"{need.column}-{n}"
        return text[-width:] if width else text
    if need.category == "B":
        return False
    if base == "date":
        return date(2000, 1, 1) + timedelta(days=n)
    if base in ("timestamp with time zone", "timestamp without time zone"):
        moment = _EPOCH + timedelta(days=n)
        return moment if "with time" in base else moment.replace(tzinfo=None)
    if base == "interval":
        return timedelta(0)
    if base == "uuid":
        return uuid.UUID(int=n)
    if base in ("json", "jsonb"):
        return {}
    if base == "bytea":
        return b""
    raise NoFiller(f"{need.column} ({need.type_name}) is NOT NULL with no default: give it a value")


def _length(type_name: str) -> int | None:
    """The n of varchar(n) / char(n)."""
    if "(" in type_name and type_name.endswith(")"):
        inside = type_name[type_name.index("(") + 1 : -1]
        return int(inside) if inside.isdigit() else None
    return None
