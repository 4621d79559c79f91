"""The text sent to the database for an invariant, so that what crosses the wire is bounded
whatever the invariant returns. Pure: text in, text out.

Three statements, each wrapping the invariant's SQL verbatim (what runs is what was reviewed):

1. `describing_query` returns no rows, only the result's columns and their types;
2. `planning_query` plans the text as it stands and runs nothing: its EXPLAIN says how far
   PostgreSQL would compile it (JIT), from which `jit_settings` decides the next one's;
3. `bounded_query`, built from those columns, returns at most `fetch` rows. The database
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

Every operator, function and type of ours is written with its schema (`OPERATOR(pg_catalog.<=)`,
`pg_catalog.md5`, `pg_catalog.text`): a name looked up through the search_path would also find
what a database's owners created (a `public.||` on (text, integer) is a better match for
`'c' || octet_length(…)` than the built-in one), and could change what this text does. Only
superusers can create objects in pg_catalog. So the fence judges the invariant's own text,
not ours (execute.py): nothing in ours depends on the database it runs in, except what the
invariant's text chooses itself, its columns' types (how each is sent as text, how key
columns sort), which a plain `SELECT … ORDER BY` of its own would use the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TOTAL_COLUMN = "invmon_total_count"
ORDINAL_COLUMN = "invmon_n"
CELLS_COLUMN = "invmon_cells"
# Ours, never a name the search_path resolves (see above).
TEXT = "pg_catalog.text"
LE = "OPERATOR(pg_catalog.<=)"
EQ = "OPERATOR(pg_catalog.=)"
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
    # An array: its text keeps lower bounds other than 1 ('[0:1]={1,2}'), which a list drops.
    array: bool = False


def describing_query(sql: str) -> str:
    """Plans the invariant and returns its columns, without running it (LIMIT 0)."""
    return f"SELECT {SUBQUERY_ALIAS}.*\nFROM (\n{sql}\n) AS {SUBQUERY_ALIAS}\nLIMIT 0"


def planning_query(sql: str) -> str:
    """The invariant as it stands, planned and not run: EXPLAIN's answer says whether
    PostgreSQL would compile it (JIT) and how far (jit_settings)."""
    return f"EXPLAIN (FORMAT JSON) SELECT {SUBQUERY_ALIAS}.*\nFROM (\n{sql}\n) AS {SUBQUERY_ALIAS}"


# Each a `SET LOCAL` the monitoring role may send (all four are user-settable).
JIT_OFF = "SET LOCAL jit = off"


def jit_settings(explained: object) -> str | None:
    """The `SET LOCAL`s under which PostgreSQL compiles (JIT) the bounded query, given the
    invariant's own text's `EXPLAIN (FORMAT JSON)` (planning_query): not at all unless the
    text's own plan is compiled with optimization, and then with the same passes; None when
    the answer is not EXPLAIN's (the server's settings stay).

    PostgreSQL decides on JIT by the plan's estimated total cost (jit_above_cost, and past
    jit_optimize_above_cost and jit_inline_above_cost, the costlier passes). The bounded
    query adds a sort and two window functions over as many rows as the planner expects, so
    a query estimated at many offending rows can cross a threshold its own text does not:
    orphaned_receipts (estimated 100,080 rows, 900 real) was compiled for its wrapper alone
    and ran 573 ms instead of 521 (medians of six each, alternated).

    And compiled without optimization (the first level, past jit_above_cost only; the same
    holds for a plan inlined but not optimized, where jit_inline_above_cost is set below
    jit_optimize_above_cost, and on a server with jit_optimize_above_cost = -1, which never
    optimizes: the bounded query is then never compiled), the bounded query cost more than
    it buys: duplicate_settled_refunds, whose text is compiled
    at that level, used 1,670 ms of its server process's CPU with the wrapper compiled and
    1,490 ms with it not, against 1,465 ms for the text as it stands (medians of eight
    shuffled rounds; the plans identical but for the wrapper's nodes). That level compiles
    each expression unoptimized, ours (the row's text array, its cut) with the invariant's,
    which on this query ran slower than the interpreter; the other shipped queries ran the
    same either way. Optimized compilation is what JIT is for (a plan past
    jit_optimize_above_cost, 500,000 by default), so there the bounded query follows the
    text's passes. A cost of 0 is past any threshold, and -1 turns a pass off."""
    if not isinstance(explained, list) or not explained or not isinstance(explained[0], dict):
        return None
    jit = explained[0].get("JIT")
    if jit is None:
        return JIT_OFF
    options = jit.get("Options") if isinstance(jit, dict) else None
    if not isinstance(options, dict):
        return None
    if options.get("Optimization") is not True:
        return JIT_OFF
    inline = "0" if options.get("Inlining") is True else "-1"
    return (
        "SET LOCAL jit_above_cost = 0; SET LOCAL jit_optimize_above_cost = 0; "
        f"SET LOCAL jit_inline_above_cost = {inline}"
    )


def plan_cost(explained: object) -> float | None:
    """The estimated total cost in an `EXPLAIN (FORMAT JSON)` answer; None if not one."""
    if not isinstance(explained, list) or not explained or not isinstance(explained[0], dict):
        return None
    plan = explained[0].get("Plan")
    cost = plan.get("Total Cost") if isinstance(plan, dict) else None
    return float(cost) if isinstance(cost, int | float) else None


def _as_text(i: int, column: Column) -> str:
    ref = f"s.c{i}"
    if column.via_format:
        return f"CASE WHEN {ref} IS NULL THEN NULL ELSE pg_catalog.format('%s', {ref}) END"
    return f"{ref}::{TEXT}"


def _is_key(key: Sequence[int]) -> str:
    # `u.o IN (…)` would look `=` up by name; each comparison is written out instead.
    if not key:
        return "FALSE"
    return "(" + " OR ".join(f"u.o {EQ} {i + 1}" for i in key) + ")"


def _cells(columns: Sequence[Column], key: Sequence[int], *, full: int, cell: int) -> str:
    """The row's values as one text[] (see above), from a row `s` of columns c1… and the
    row's number s.invmon_n: whole up to `full`, key values only past it."""
    texts = ", ".join(_as_text(i, c) for i, c in enumerate(columns, start=1))
    value = (
        f"CASE WHEN u.v IS NULL OR NOT (s.{ORDINAL_COLUMN} {LE} {full} OR {_is_key(key)}) "
        f"THEN NULL WHEN pg_catalog.octet_length(u.v) {LE} {cell} "
        f"THEN pg_catalog.concat('v', u.v) "
        f"ELSE pg_catalog.concat('c', pg_catalog.octet_length(u.v), ' ', pg_catalog.md5(u.v), "
        f"' ', pg_catalog.left(u.v, {cell})) END"
    )
    return (
        f"(SELECT pg_catalog.array_agg({value} ORDER BY u.o) "
        f"FROM pg_catalog.unnest(ARRAY[{texts}]::{TEXT}[]) WITH ORDINALITY AS u(v, o))"
        f" AS {CELLS_COLUMN}"
    )


def _renamed(columns: Sequence[Column]) -> str:
    return f"({', '.join(f'c{i}' for i in range(1, len(columns) + 1))})" if columns else ""


def _numbered(sql: str, columns: Sequence[Column], key: Sequence[int], selected: str) -> str:
    """`selected` of the invariant's rows (as q), with the count of them all and each one's
    number in key order."""
    order = ", ".join(f"{SUBQUERY_ALIAS}.c{i + 1}" for i in key)
    window = f"ORDER BY {order}" if order else ""
    return (
        f"SELECT {selected}, pg_catalog.count(*) OVER () AS {TOTAL_COLUMN}, "
        f"pg_catalog.row_number() OVER ({window}) AS {ORDINAL_COLUMN} FROM (\n"
        f"{sql}\n"
        f") AS {SUBQUERY_ALIAS}{_renamed(columns)}\n"
        f"ORDER BY {ORDINAL_COLUMN}"
    )


def bounded_query(
    sql: str, columns: Sequence[Column], key: Sequence[int], *, full: int, fetch: int, cell: int
) -> str:
    """The query to send: three columns, the row's values (text[], see above), the total
    count, and the row's number in key order. `key` holds the key columns' positions
    (0-based)."""
    numbered = _numbered(sql, columns, key, f"{SUBQUERY_ALIAS}.*")
    return (
        f"SELECT {_cells(columns, key, full=full, cell=cell)}, s.{TOTAL_COLUMN}, "
        f"s.{ORDINAL_COLUMN}\n"
        f"FROM ({numbered}\nLIMIT {max(fetch, 1)}) AS s\n"
        f"ORDER BY s.{ORDINAL_COLUMN}"
    )


FOUND_COLUMN = "invmon_found"
# Built-in key types whose pg_catalog `=` is plain equality, so that the rows a key matches
# are the rows holding that key: bool, int8, int2, int4, text, oid, bpchar, varchar, date,
# timestamp, timestamptz, numeric, uuid. (Where `=` is looser than the text, as numeric's 1.0
# and 1.00, or text under a case-insensitive collation, a key matches each of its rows and
# the run says so: keys_first_query.)
KEYS_FIRST_TYPES = frozenset({16, 20, 21, 23, 25, 26, 1042, 1043, 1082, 1114, 1184, 1700, 2950})


def keys_first_applies(columns: Sequence[Column], key: Sequence[int]) -> bool:
    """Whether keys_first_query can stand in for bounded_query: a key, all of plain types."""
    return bool(key) and all(columns[i].oid in KEYS_FIRST_TYPES for i in key)


@dataclass(frozen=True)
class KeysFirst:
    """When keys_first_query stands in for bounded_query, by the planner's estimates.

    Below `above_cost` (the text's own plan), the text is read once: what reading its keys
    first could save is less than what two more plans cost. 10,000 is a few tens of
    milliseconds of a plain scan; each shipped query taking seconds is estimated past 10⁵.

    Past it, keys_first_query is chosen when estimated at most `margin` times the bounded
    query. The estimate still counts the aggregates the first reading no longer computes,
    and a row found again for every row fetched where only the sample's are, so it
    overstates keys_first_query: duplicate_settled_refunds was estimated 0.5% above the
    bounded query and ran in 439 ms against 1,429; orphaned_receipts, whose key cannot be
    pushed into its UNION, 117 times above (and ran twice as long)."""

    above_cost: float = 10_000.0
    margin: float = 1.10

    def worth_asking(self, text_cost: float | None) -> bool:
        return text_cost is not None and text_cost >= self.above_cost

    def chosen(self, first_cost: float | None, bounded_cost: float | None) -> bool:
        if first_cost is None or bounded_cost is None:
            return False
        return first_cost <= bounded_cost * self.margin


BY_ESTIMATES = KeysFirst()
ALWAYS_KEYS_FIRST = KeysFirst(above_cost=0.0, margin=float("inf"))  # where the key allows
NEVER_KEYS_FIRST = KeysFirst(above_cost=float("inf"))


def keys_first_query(
    sql: str,
    columns: Sequence[Column],
    key: Sequence[int],
    *,
    full: int,
    fetch: int,
    cell: int,
    priced: bool = False,
) -> str:
    """bounded_query's rows, from two readings of the text in one statement (one snapshot):
    the count and the numbered keys from the key columns alone, then each of the first
    `full` rows found again by its key (a LATERAL join). A column nobody reads is not
    computed: PostgreSQL drops a subquery's unused outputs, so the first reading skips the
    invariant's costly context (`array_agg(…)` over every group where HAVING keeps a few),
    and the second computes it for `full` rows only, when the key can be pushed down into
    the text (an index, a GROUP BY on it). Whether that is cheaper is the planner's estimate
    to say (execute.py compares the two).

    A fourth column, `invmon_found`, is true on each row found again; a row numbered up to
    `full` without it (a NULL key, a row a volatile function no longer yields), or a number
    seen twice (a key two rows share), means the second reading did not give back exactly
    the first's rows: such a run is read again with bounded_query.

    Each row is found again with `LIMIT 2` (a second is all it takes to know a key is
    shared), which the planner prices as stopping early: after 2 of the rows it expects a
    key to match, where a key that is an expression without an index matches few and each
    lookup reads all. `priced` writes `OFFSET 0` instead (which, like the LIMIT, keeps the
    lookup a subquery of its own, run once per row), for an estimate of lookups made in
    full; with `fetch` = `full`, of as many lookups as are made."""
    keys = ", ".join(f"{SUBQUERY_ALIAS}.c{i + 1}" for i in key)
    numbered = _numbered(sql, columns, key, keys)
    matched = " AND ".join(f"r.c{i + 1} {EQ} k.c{i + 1}" for i in key)
    picked = ", ".join(
        f"CASE WHEN l.{FOUND_COLUMN} THEN l.c{i} ELSE k.c{i} END AS c{i}"
        if i - 1 in key
        else f"l.c{i}"
        for i in range(1, len(columns) + 1)
    )
    return (
        f"SELECT {_cells(columns, key, full=full, cell=cell)}, s.{TOTAL_COLUMN}, "
        f"s.{ORDINAL_COLUMN}, s.{FOUND_COLUMN}\n"
        f"FROM (SELECT {picked}, k.{TOTAL_COLUMN}, k.{ORDINAL_COLUMN}, l.{FOUND_COLUMN}\n"
        f"FROM ({numbered}\nLIMIT {max(fetch, 1)}) AS k\n"
        f"LEFT JOIN LATERAL (SELECT r.*, TRUE AS {FOUND_COLUMN} FROM (\n"
        f"{sql}\n"
        f") AS r{_renamed(columns)}\n"
        f"WHERE k.{ORDINAL_COLUMN} {LE} {full} AND {matched}\n{'OFFSET 0' if priced else 'LIMIT 2'}"
        f") AS l ON TRUE) AS s\n"
        f"ORDER BY s.{ORDINAL_COLUMN}"
    )
