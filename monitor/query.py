"""The text sent to the database for an invariant, so that what crosses the wire is bounded
whatever the invariant returns. Pure: text in, text out.

Two statements, both wrapping the invariant's SQL verbatim (what runs is what was reviewed):

1. `describing_query` returns no rows, only the result's columns and their types;
2. `bounded_query`, built from those columns, returns at most `fetch` rows. The database
   counts every offending row (`count(*) OVER ()`), numbers the rows in key order
   (`row_number()`), and sends each row as one text[] of its values in their text form,
   each value either `v<text>` or, when longer than `cell` bytes, cut on its side as
   `c<size> <md5> <first cell characters>`. Rows past `full` carry their key values only.

The text form is what the server would send anyway (psycopg reads text and loads it by
type), so the client loads each `v` value with the loader of the column's type and gets
what a plain fetch would have given. One array per row keeps the text short whatever the
width of the row: each column is named once, not wrapped in its own expression.

The invariant's columns are renamed positionally (`AS q(c1, …)`), so duplicate or odd names
cannot collide with ours and a key column is found by its position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TOTAL_COLUMN = "invmon_total_count"
ORDINAL_COLUMN = "invmon_n"
CELLS_COLUMN = "invmon_cells"
USER_SQL_LINE = 3  # the line of both texts where the invariant's SQL starts
SUBQUERY_ALIAS = "q"
# PostgreSQL allows 1,664 entries in a select list; ours adds two to the invariant's.
MAX_COLUMNS = 1600


@dataclass(frozen=True)
class Column:
    name: str
    oid: int  # the type PostgreSQL reports (a domain's base type)
    # A cast to text that is a function (bool -> 'true', inet -> '1.2.3.4/32', char(n) ->
    # trimmed) is not the text the server would send; such columns go through format().
    via_format: bool = False


def quote_identifier(name: str) -> str:
    """A name PostgreSQL reads back exactly as given (case, spaces and quotes kept)."""
    return '"' + name.replace('"', '""') + '"'


def describing_query(sql: str) -> str:
    """Plans the invariant and returns its columns, without running it (LIMIT 0)."""
    return f"SELECT {SUBQUERY_ALIAS}.*\nFROM (\n{sql}\n) AS {SUBQUERY_ALIAS}\nLIMIT 0"


def _as_text(i: int, column: Column) -> str:
    ref = f"s.c{i}"
    if column.via_format:
        return f"CASE WHEN {ref} IS NULL THEN NULL ELSE format('%s', {ref}) END"
    return f"{ref}::text"


def bounded_query(
    sql: str, columns: Sequence[Column], key: Sequence[int], *, full: int, fetch: int, cell: int
) -> str:
    """The query to send: three columns, the row's values (text[], see above), the total
    count, and the row's number in key order. `key` holds the key columns' positions
    (0-based)."""
    texts = ", ".join(_as_text(i, c) for i, c in enumerate(columns, start=1))
    is_key = f"u.o IN ({', '.join(str(i + 1) for i in key)})" if key else "FALSE"
    value = (
        f"CASE WHEN u.v IS NULL OR NOT (s.{ORDINAL_COLUMN} <= {full} OR {is_key}) THEN NULL "
        f"WHEN octet_length(u.v) <= {cell} THEN 'v' || u.v "
        f"ELSE 'c' || octet_length(u.v) || ' ' || md5(u.v) || ' ' || left(u.v, {cell}) END"
    )
    cells = (
        f"(SELECT array_agg({value} ORDER BY u.o) "
        f"FROM unnest(ARRAY[{texts}]::text[]) WITH ORDINALITY AS u(v, o)) AS {CELLS_COLUMN}"
    )
    order = ", ".join(f"{SUBQUERY_ALIAS}.c{i + 1}" for i in key)
    window = f"ORDER BY {order}" if order else ""
    names = f"({', '.join(f'c{i}' for i in range(1, len(columns) + 1))})" if columns else ""
    # Keep the first two lines free of newlines: the invariant's SQL starts at line 3, so
    # the fence's problems map back to the file's lines.
    return (
        f"SELECT {cells}, s.{TOTAL_COLUMN}, s.{ORDINAL_COLUMN}\n"
        f"FROM (SELECT {SUBQUERY_ALIAS}.*, count(*) OVER () AS {TOTAL_COLUMN}, "
        f"row_number() OVER ({window}) AS {ORDINAL_COLUMN} FROM (\n"
        f"{sql}\n"
        f") AS {SUBQUERY_ALIAS}{names}\n"
        f"ORDER BY {ORDINAL_COLUMN}\nLIMIT {max(fetch, 1)}) AS s\n"
        f"ORDER BY s.{ORDINAL_COLUMN}"
    )
