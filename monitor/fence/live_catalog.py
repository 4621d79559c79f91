"""The monitored database's own catalog, and the SQL that reads it.

- `LiveCatalog`: the monitored database's own `pg_proc`, `pg_operator`, `pg_cast` and
  `pg_type`, read on the connection that will run the query. It also says which code is part
  of PostgreSQL itself (created by initdb: an OID below 16384, which no later CREATE can
  have), which extension installed the rest, which functions parse XML with libxml2, and
  what code a type runs (its input and output functions, a domain's constraints, through
  composites, arrays and ranges).
- The SQL it reads them with; `VOLATILITY_SQL` and `ONE_ARG_SQL` also build the shipped
  table (builtins_table.py).

Asks the database, on any psycopg connection; the SQL is data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from monitor.fence.builtin_catalog import builtin_catalog
from monitor.fence.catalog import FIRST_USER_OID, LIBXML_PARSERS, Name, Routine

# Every candidate a name may resolve to: an unqualified name is looked up in every schema of
# the session's search path (PostgreSQL picks among them by argument types, which only the
# planner knows, so all of them are judged); a qualified one in its schema only.
# A function's volatility; for an aggregate, the worst of the functions it runs.
VOLATILITY_SQL = """CASE WHEN p.prokind = 'a' THEN (
           SELECT max(s.provolatile::text COLLATE "C")
           FROM pg_aggregate a
           JOIN pg_proc s ON s.oid IN (a.aggfnoid, a.aggtransfn, a.aggfinalfn, a.aggcombinefn,
                                       a.aggserialfn, a.aggdeserialfn, a.aggmtransfn,
                                       a.aggminvtransfn, a.aggmfinalfn)
           WHERE a.aggfnoid = p.oid)
       ELSE p.provolatile::text END"""

# Callable with one argument, so also as `row.fn` (attribute notation): any first argument a
# row can be passed to (a composite, a domain over one, a pseudo-type, VARIADIC), so only
# `internal` and `cstring`, which no SQL value has, rule a function out.
ONE_ARG_SQL = (
    "p.pronargs >= 1 AND p.pronargs - p.pronargdefaults <= 1"
    " AND p.proargtypes[0] NOT IN ('internal'::regtype, 'cstring'::regtype)"
)

# Which extension installed the function `p`, and whether it hands text to libxml2.
# (A join rather than a subquery per row: the planner's estimate of the latter made it
# compile the lookup with JIT, two seconds for a millisecond's work.)
_EXTENSION_JOIN = """LEFT JOIN (SELECT d.objid, e.extname FROM pg_depend d
           JOIN pg_extension e ON e.oid = d.refobjid
           WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e') AS ext
     ON ext.objid = p.oid"""
_LIBXML_SQL = (
    "((p.prolang = (SELECT l.oid FROM pg_language l WHERE l.lanname = 'internal')"
    " AND p.prosrc IN (" + ", ".join(f"'{s}'" for s in sorted(LIBXML_PARSERS)) + "))"
    " OR (p.prolang = (SELECT l.oid FROM pg_language l WHERE l.lanname = 'c')"
    " AND p.probin = '$libdir/pgxml'))"
)


def _routine_columns(volatility: str, one_arg: str) -> str:
    """schema, name, signature, kind, volatility, parallel_unsafe, one_arg, security_definer,
    extension, builtin, libxml: Routine's fields, for `p` in `n` (and _EXTENSION_JOIN)."""
    return (
        f"n.nspname, p.proname, p.oid::regprocedure::text, p.prokind, {volatility},"
        f" p.proparallel = 'u', {one_arg}, p.prosecdef, ext.extname,"
        f" p.oid < {FIRST_USER_OID}, {_LIBXML_SQL}"
    )


_FUNCTIONS_SQL = f"""
WITH wanted(ord, schema, name) AS (
    SELECT * FROM unnest(%(ord)s::int[], %(schemas)s::text[], %(names)s::text[])
)
SELECT w.ord, {_routine_columns(VOLATILITY_SQL, ONE_ARG_SQL)}
FROM wanted w
JOIN pg_proc p ON p.proname = w.name
JOIN pg_namespace n ON n.oid = p.pronamespace
{_EXTENSION_JOIN}
WHERE (w.schema = '' AND n.nspname = ANY (current_schemas(true))) OR n.nspname = w.schema
"""

# An operator runs its function, and the planner runs its selectivity estimators (RESTRICT,
# JOIN), which a user-defined operator may point at user code.
_OPERATORS_SQL = f"""
WITH wanted(ord, schema, name) AS (
    SELECT * FROM unnest(%(ord)s::int[], %(schemas)s::text[], %(names)s::text[])
)
SELECT DISTINCT w.ord, {_routine_columns("p.provolatile::text", "false")}
FROM wanted w
JOIN pg_operator o ON o.oprname = w.name
JOIN pg_namespace s ON s.oid = o.oprnamespace
JOIN pg_proc p ON p.oid IN (o.oprcode, o.oprrest, o.oprjoin)
JOIN pg_namespace n ON n.oid = p.pronamespace
{_EXTENSION_JOIN}
WHERE (w.schema = '' AND s.nspname = ANY (current_schemas(true))) OR s.nspname = w.schema
"""

# The code a value of a type may run, from `seed(ord, typ)` (and, for casts, `target(ord,
# typ)`: the type cast into and the domains under it). Every type the value is made of is
# followed: a domain's base type, an array's element, a composite's attributes, a range's
# subtype, a multirange's range, and the types a domain's constraint casts to. For each, its
# input and output functions, a range's canonical and subtype-difference functions, and the
# functions and operators a domain's CHECK calls (PostgreSQL records those in pg_depend).
# This is how a domain inside a composite literal ('(1)'::comp), a column definition list
# (AS r(a noisy)) or jsonb_populate_record(NULL::comp, …) is found.
_TYPE_CODE_SQL = f"""
closure(ord, typ) AS (
    SELECT ord, typ FROM seed
    UNION
    SELECT c.ord, m.typ FROM closure c CROSS JOIN LATERAL (
        SELECT t.typbasetype FROM pg_type t WHERE t.oid = c.typ AND t.typbasetype <> 0
        UNION ALL
        SELECT t.typelem FROM pg_type t WHERE t.oid = c.typ AND t.typelem <> 0
        UNION ALL
        SELECT a.atttypid FROM pg_type t JOIN pg_attribute a ON a.attrelid = t.typrelid
        WHERE t.oid = c.typ AND a.attnum > 0 AND NOT a.attisdropped
        UNION ALL
        SELECT r.rngsubtype FROM pg_range r WHERE r.rngtypid = c.typ
        UNION ALL
        SELECT r.rngtypid FROM pg_range r WHERE r.rngmultitypid = c.typ
        UNION ALL
        SELECT d.refobjid FROM pg_constraint k JOIN pg_depend d
            ON d.classid = 'pg_constraint'::regclass AND d.objid = k.oid
            AND d.refclassid = 'pg_type'::regclass
        WHERE k.contypid = c.typ
    ) AS m(typ)
), code(ord, fn, role, typ) AS (
    SELECT c.ord, k.castfunc, 'the cast into', c.typ
    FROM target c JOIN pg_cast k ON k.casttarget = c.typ WHERE k.castfunc <> 0
    UNION ALL
    SELECT c.ord, f.fn, f.role, c.typ FROM closure c JOIN pg_type t ON t.oid = c.typ
    CROSS JOIN LATERAL (VALUES (t.typinput::oid, 'the input function of'),
                               (t.typreceive::oid, 'the input function of'),
                               (t.typmodin::oid, 'the input function of'),
                               (t.typoutput::oid, 'the output function of'),
                               (t.typsend::oid, 'the output function of'),
                               (t.typmodout::oid, 'the output function of')) AS f(fn, role)
    WHERE f.fn <> 0
    UNION ALL
    SELECT c.ord, f.fn, 'a range function of', c.typ FROM closure c
    JOIN pg_range g ON g.rngtypid = c.typ
    CROSS JOIN LATERAL (VALUES (g.rngcanonical::oid), (g.rngsubdiff::oid)) AS f(fn)
    WHERE f.fn <> 0
    UNION ALL
    SELECT c.ord, coalesce(o.oprcode::oid, d.refobjid), 'a constraint of domain', c.typ
    FROM closure c JOIN pg_constraint k ON k.contypid = c.typ
    JOIN pg_depend d ON d.classid = 'pg_constraint'::regclass AND d.objid = k.oid
    LEFT JOIN pg_operator o ON d.refclassid = 'pg_operator'::regclass AND o.oid = d.refobjid
    WHERE d.refclassid IN ('pg_proc'::regclass, 'pg_operator'::regclass)
)
SELECT DISTINCT x.ord, {_routine_columns("p.provolatile::text", "false")},
       x.role, tn.nspname || '.' || tt.typname
FROM code x JOIN pg_proc p ON p.oid = x.fn JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_type tt ON tt.oid = x.typ JOIN pg_namespace tn ON tn.oid = tt.typnamespace
{_EXTENSION_JOIN}
"""

_CASTS_SQL = (
    """
WITH RECURSIVE wanted(ord, typ) AS (
    SELECT w.ord, to_regtype(w.name)
    FROM unnest(%(ord)s::int[], %(names)s::text[]) AS w(ord, name)
), target(ord, typ) AS (
    SELECT ord, typ FROM wanted WHERE typ IS NOT NULL
    UNION
    SELECT c.ord, t.typbasetype FROM target c JOIN pg_type t ON t.oid = c.typ
    WHERE t.typbasetype <> 0
), seed(ord, typ) AS (SELECT ord, typ FROM target),"""
    + _TYPE_CODE_SQL
)

# A relation's row type: its columns' types and all they are made of. No cast into it.
_ROW_TYPES_SQL = (
    """
WITH RECURSIVE seed(ord, typ) AS (
    SELECT w.ord, c.reltype
    FROM unnest(%(ord)s::int[], %(names)s::text[]) AS w(ord, name)
    JOIN pg_class c ON c.oid = to_regclass(w.name)
    WHERE c.reltype <> 0
), target(ord, typ) AS (SELECT ord, typ FROM seed WHERE false),"""
    + _TYPE_CODE_SQL
)

# Casts into a type that the planner applies by itself when it resolves an expression: a
# value of the source type given where the target is expected becomes one unasked.
_IMPLICIT_CASTS_SQL = """
SELECT w.ord, format('%%s -> %%s (%%s)', k.castsource::regtype, k.casttarget::regtype,
                     CASE k.castcontext WHEN 'i' THEN 'implicit' ELSE 'in assignment' END)
FROM unnest(%(ord)s::int[], %(names)s::text[]) AS w(ord, name)
JOIN pg_cast k ON k.casttarget = to_regtype(w.name)
WHERE k.castcontext IN ('i', 'a')
"""

_VIEWS_SQL = """
SELECT w.ord, pg_get_viewdef(c.oid)
FROM unnest(%(ord)s::int[], %(names)s::text[]) AS w(ord, name)
JOIN pg_class c ON c.oid = to_regclass(w.name)
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'v' AND n.nspname NOT IN ('pg_catalog', 'information_schema')
"""


def qualified_text(name: Name) -> str:
    """A name as PostgreSQL reads it back (to_regtype, to_regclass): each part quoted."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in name)


class LiveCatalog:
    """The catalog of the database a connection is on (any psycopg connection)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    @property
    def source(self) -> str:
        return "this database's catalog"

    def _lookup(self, query: str, names: Sequence[Name]) -> dict[Name, list[Routine]]:
        if not names:
            return {}
        params = {
            "ord": list(range(len(names))),
            "schemas": [n[-2] if len(n) >= 2 else "" for n in names],
            "names": [n[-1] for n in names],
        }
        found: dict[Name, list[Routine]] = {}
        for ord_, *fields in self._conn.execute(query, params).fetchall():
            found.setdefault(names[ord_], []).append(Routine(*fields))
        return found

    def functions(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._lookup(_FUNCTIONS_SQL, sorted(set(names)))

    def operators(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._lookup(_OPERATORS_SQL, sorted(set(names)))

    def _by_type(self, query: str, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        wanted = sorted(set(names))
        if not wanted:
            return {}
        params = {"ord": list(range(len(wanted))), "names": [qualified_text(t) for t in wanted]}
        found: dict[Name, list[Routine]] = {}
        # The recursion's row estimates are large enough for the planner to compile the
        # lookup with JIT (two seconds for a millisecond's work); turned off for this query
        # only, in a savepoint rolled back, so the session's setting is untouched.
        with self._conn.transaction(force_rollback=True):
            self._conn.execute("SET LOCAL jit = off")
            rows = self._conn.execute(query, params).fetchall()
        for ord_, *fields in rows:
            found.setdefault(wanted[ord_], []).append(Routine(*fields))
        return found

    def casts(self, types: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._by_type(_CASTS_SQL, types)

    def row_types(self, relations: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._by_type(_ROW_TYPES_SQL, relations)

    def implicit_casts(self, types: Iterable[Name]) -> dict[Name, list[str]]:
        wanted = sorted(set(types))
        if not wanted:
            return {}
        params = {"ord": list(range(len(wanted))), "names": [qualified_text(t) for t in wanted]}
        found: dict[Name, list[str]] = {}
        for ord_, cast in self._conn.execute(_IMPLICIT_CASTS_SQL, params).fetchall():
            found.setdefault(wanted[ord_], []).append(str(cast))
        return found

    def view_definitions(self, relations: Iterable[Name]) -> dict[Name, str]:
        wanted = sorted(set(relations))
        if not wanted:
            return {}
        params = {"ord": list(range(len(wanted))), "names": [qualified_text(r) for r in wanted]}
        rows = self._conn.execute(_VIEWS_SQL, params).fetchall()
        return {wanted[ord_]: str(text) for ord_, text in rows}

    def system_view_calls(self, relations: Iterable[Name]) -> dict[Name, list[str]]:
        # System views are the same on every server of a version: the shipped table knows.
        return builtin_catalog().system_view_calls(relations)
