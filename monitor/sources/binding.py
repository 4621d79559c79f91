"""The text and parameters invmon adds so that a query can read its sources. Pure.

Each source becomes one CTE over typed arrays passed as parameters, prepended to the text
invmon sends (which wraps the invariant's SQL verbatim, see query.py):

    WITH "receipt_objects"("key", "size", "last_modified") AS (SELECT * FROM
    unnest($1::text[], $2::bigint[], $3::text[]::timestamptz[]))
    SELECT … FROM (<the invariant, as written>) AS q …

(the WITH list is one line: the invariant's own lines move down by exactly one). Nothing
is written: no temporary table, so it runs on a hot standby inside the READ ONLY
transaction. The values travel as parameters, never as SQL text, so an object key is data
whatever it holds. The
invariant may start with its own WITH: it sits in a subquery of ours, where our CTE is
visible. A CTE is resolved before any table, so the source wins over a table of that name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from monitor.fence.sqltree import quote_identifier
from monitor.sources.header import COLUMN_TYPES, SourceSpec


@dataclass(frozen=True, slots=True)
class ObjectRow:
    """One listed object (slots: a listing may hold a million)."""

    key: str
    size: int | None
    last_modified: datetime | None
    etag: str | None = None

    def value(self, column: str) -> Any:
        return getattr(self, column)


@dataclass(frozen=True)
class Bound:
    """The text to put before the statement invmon sends, its parameters in order, and
    how many lines it adds (the fence's problems map back to the file's lines)."""

    prefix: str
    params: list[list[Any]]
    lines: int


NOTHING_BOUND = Bound("", [], 0)


def bind(sources: Mapping[str, SourceSpec], rows: Mapping[str, Sequence[ObjectRow]]) -> Bound:
    """The CTEs for `sources` (in header order) holding `rows` of each."""
    if not sources:
        return NOTHING_BOUND
    ctes: list[str] = []
    params: list[list[Any]] = []
    for name, spec in sources.items():
        arrays = []
        for column in spec.columns:
            if column == "last_modified":
                # ISO 8601 text with its offset, read by the server's timestamptz input:
                # exact to the microsecond in every year (epoch seconds as a float came
                # back a microsecond off before 1930, and past 9999), and psycopg dumps it
                # faster than datetimes (0.31 s against 0.40 s for 100,000).
                params.append([_iso(row.last_modified) for row in rows[name]])
                arrays.append(f"${len(params)}::text[]::timestamptz[]")
            else:
                params.append([row.value(column) for row in rows[name]])
                arrays.append(f"${len(params)}::{COLUMN_TYPES[column]}[]")
        names = ", ".join(quote_identifier(c) for c in spec.columns)
        ctes.append(
            f"{quote_identifier(name)}({names}) AS (SELECT * FROM unnest({', '.join(arrays)}))"
        )
    return Bound(f"WITH {', '.join(ctes)}\n", params, 1)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def emptied(bound: Bound) -> list[list[Any]]:
    """The same parameters with no rows: for a statement that needs only the result's
    columns (the describing query), so a listing crosses the wire once."""
    return [[] for _ in bound.params]


def bound_text(bound: Bound, statement: str) -> str:
    """`statement` (one of query.py's, starting with SELECT) reading the sources."""
    return bound.prefix + statement


def standalone(bound: Bound, sql: str) -> tuple[str, list[list[Any]], int]:
    """The invariant's SQL on its own (not wrapped in invmon's counting query) reading
    `bound`'s listings, for what judges or plans a query without running it (the daemon's
    vetting, `invmon explain`): the text, its parameters and the line of the text where the
    invariant's SQL starts. Without sources, the SQL as it is."""
    if not bound.prefix:
        return sql, [], 1
    return bound_text(bound, f"SELECT * FROM (\n{sql}\n) AS q"), bound.params, 2 + bound.lines


def unlisted(sources: Mapping[str, SourceSpec], sql: str) -> tuple[str, list[list[Any]], int]:
    """`standalone` with every source an empty listing: the text's shape, for the fence."""
    return standalone(bind(sources, {name: [] for name in sources}), sql)
