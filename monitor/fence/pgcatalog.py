"""What PostgreSQL's catalog says a function, operator or cast may do.

The fence (fence.py) refuses a query that calls anything able to change the database or
the world outside it. It does not keep its own list of dangerous names: it asks
PostgreSQL's catalog, where every function declares its volatility (`pg_proc.provolatile`:
IMMUTABLE, STABLE or VOLATILE) and whether it may run in a parallel worker
(`proparallel = 'u'` marks the STABLE functions that assign state, such as a transaction
id). Two catalogs answer the same questions:

- `LiveCatalog`: the monitored database's own `pg_proc`, `pg_operator`, `pg_cast` and
  `pg_type`, read on the connection that will run the query. It also says which code is part
  of PostgreSQL itself (created by initdb: an OID below 16384, which no later CREATE can
  have), which extension installed the rest, which functions parse XML with libxml2, and
  what code a type runs (its input and output functions, a domain's constraints, through
  composites, arrays and ranges).
- `BuiltinCatalog`: a table generated from the built-in catalogs of the PostgreSQL
  versions we support, shipped in the package, for `invmon lint` with no database. Regenerate
  it with `python -m monitor.fence.builtins_table --dsn DSN [--dsn DSN ...]
  > monitor/fence/pg_builtins.json`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Protocol

# A name as written in the query: ("fn",) or ("schema", "fn"), already decoded and case-folded
# by PostgreSQL's own parser.
Name = tuple[str, ...]

VOLATILITY_ORDER = "isv"  # immutable < stable < volatile
# PostgreSQL's FirstNormalObjectId: initdb creates every built-in object below it, and every
# object created later (by CREATE, an extension, a superuser in pg_catalog) gets one above.
FIRST_USER_OID = 16384
# The C functions of PostgreSQL's xml.c that hand text to libxml2's parser (pg_proc.prosrc
# of internal functions, so an alias created under another name is found too): the input
# and receive functions of xml, the text -> xml cast, xml_is_well_formed* and XPath. The
# others (xml_out, xmlcomment, xmlconcat2, xmlelement's and xmlroot's work) escape text or
# read only the XML declaration, with PostgreSQL's own code. contrib/xml2 (`pgxml`) parses
# in every function.
LIBXML_PARSERS = frozenset(
    {
        "xml_in",
        "xml_recv",
        "texttoxml",
        "xml_is_well_formed",
        "xml_is_well_formed_document",
        "xml_is_well_formed_content",
        "xpath",
        "xpath_exists",
        "xmlexists",
    }
)
VOLATILITY_WORDS = {"i": "IMMUTABLE", "s": "STABLE", "v": "VOLATILE"}
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")


@dataclass(frozen=True)
class Routine:
    """A function (or the function behind an operator or a cast) as the fence sees it."""

    schema: str
    name: str
    signature: str  # for messages, e.g. "pg_catalog.lo_create(oid)"
    kind: str  # pg_proc.prokind: f function, a aggregate, w window, p procedure
    volatility: str  # i, s or v; for an aggregate, the worst of its support functions
    parallel_unsafe: bool  # proparallel = 'u'
    one_arg: bool  # callable with one argument, hence also as `row.name`
    security_definer: bool = False  # runs with its owner's rights, past the role's fence
    extension: str | None = None  # the extension that installed it, if one did
    builtin: bool = True  # part of PostgreSQL itself (an OID below FIRST_USER_OID)
    libxml: bool = False  # hands text to libxml2's parser (LIBXML_PARSERS)
    # For code a type runs: what it is to the type and which type, e.g. ("a constraint of
    # domain", "public.noisy"); empty for a function or operator called by name.
    role: str = ""
    of_type: str = ""


def worst(volatilities: Iterable[str]) -> str:
    return max(volatilities, key=VOLATILITY_ORDER.index, default="i")


class Catalog(Protocol):
    """Where the fence looks names up. A name missing from an answer is unknown."""

    @property
    def source(self) -> str: ...

    def functions(self, names: Iterable[Name]) -> dict[Name, list[Routine]]: ...

    def operators(self, names: Iterable[Name]) -> dict[Name, list[Routine]]: ...

    def casts(self, types: Iterable[Name]) -> dict[Name, list[Routine]]:
        """The functions a cast to each type may run; a type missing is not judged."""
        ...

    def view_definitions(self, relations: Iterable[Name]) -> dict[Name, str]:
        """The SQL of each relation that is a user-defined view; others are absent."""
        ...

    def system_view_calls(self, relations: Iterable[Name]) -> dict[Name, list[str]]:
        """For each relation that is a system view calling a VOLATILE or PARALLEL UNSAFE
        built-in function, those functions' names."""
        ...

    def row_types(self, relations: Iterable[Name]) -> dict[Name, list[Routine]]:
        """The code the column types of each relation run (`role` says which: output to send
        a row, input and constraints when a row of it is built from text or JSON)."""
        ...

    def implicit_casts(self, types: Iterable[Name]) -> dict[Name, list[str]]:
        """The casts into each type that PostgreSQL applies without being asked (implicit or
        in assignment), as `source -> target`; a type with none is absent."""
        ...


# --- offline: the shipped table --------------------------------------------------------------


class BuiltinCatalog:
    """The built-in functions and operators of the supported PostgreSQL versions."""

    def __init__(self, table: dict[str, Any]) -> None:
        self._functions: dict[str, list[Any]] = table["functions"]
        self._operators: dict[str, str] = table["operators"]
        self._views: dict[str, list[str]] = table["views"]
        self.versions: list[str] = table["versions"]

    @property
    def source(self) -> str:
        return f"the built-in catalog of PostgreSQL {', '.join(self.versions)}"

    @staticmethod
    def _key(name: Name) -> str | None:
        if len(name) == 1:
            return name[0]
        if len(name) == 2 and name[0] == "pg_catalog":
            return name[1]
        if len(name) == 2 and name[0] in SYSTEM_SCHEMAS:
            return ".".join(name)
        return None  # another schema (or a database name): only the database can tell

    def functions(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        found: dict[Name, list[Routine]] = {}
        for name in names:
            key = self._key(name)
            entry = self._functions.get(key) if key else None
            if entry is None:
                continue
            volatility, unsafe, kinds, one_arg = entry
            schema, _, bare = key.rpartition(".") if key and "." in key else ("", "", key)
            schema = schema or "pg_catalog"
            found[name] = [
                Routine(
                    schema,
                    str(bare),
                    f"{schema}.{bare}",
                    kind,
                    volatility,
                    bool(unsafe),
                    bool(one_arg),
                )
                for kind in kinds
            ]
        return found

    def operators(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        found: dict[Name, list[Routine]] = {}
        for name in names:
            key = self._key(name)
            volatility = self._operators.get(key) if key else None
            if volatility is not None:
                found[name] = [
                    Routine(
                        "pg_catalog", str(key), f"operator {key}", "f", volatility, False, False
                    )
                ]
        return found

    def casts(self, types: Iterable[Name]) -> dict[Name, list[Routine]]:
        # The built-in casts and type input functions are all IMMUTABLE or STABLE (checked
        # when the table is generated); a user-defined type is judged at run time.
        return {}

    def view_definitions(self, relations: Iterable[Name]) -> dict[Name, str]:
        return {}

    def row_types(self, relations: Iterable[Name]) -> dict[Name, list[Routine]]:
        # Without a database no table is known; the system catalogs' columns are built-in.
        return {}

    def implicit_casts(self, types: Iterable[Name]) -> dict[Name, list[str]]:
        # The built-in casts into xml are all explicit; only a database can add others.
        return {}

    def system_view_calls(self, relations: Iterable[Name]) -> dict[Name, list[str]]:
        found = {}
        for name in relations:
            key = self._key(name)
            if key is not None and key in self._views:
                found[name] = self._views[key]
        return found


@cache
def builtin_catalog() -> BuiltinCatalog:
    text = resources.files("monitor.fence").joinpath("pg_builtins.json").read_text(encoding="utf-8")
    return BuiltinCatalog(json.loads(text))


# --- with a database: its own catalog --------------------------------------------------------

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


# --- remembered answers ---------------------------------------------------------------------


class CatalogMemory:
    """What one database's catalog answered about each name, remembered for a while.

    A catalog changes far less often than invariants run, and the invariants of one
    database call mostly the same names (count, now, =, the same tables), so a tick of many
    invariants asks the catalog about each name once instead of once per query. Everything
    is forgotten together after `remember` seconds, so a function redefined as VOLATILE is
    judged by its new definition within that window. Thread-safe: runs share one memory."""

    def __init__(self, remember: float, clock: Callable[[], float]) -> None:
        self._remember = remember
        self._clock = clock
        self._since = clock()
        self._answers: dict[tuple[str, Name], Any] = {}
        self._lock = threading.Lock()

    def over(self, catalog: Catalog) -> Catalog:
        """`catalog` (the live one, on the connection at hand) behind this memory."""
        return _Remembering(self, catalog)

    def recall(
        self, kind: str, names: Iterable[Name], ask: Callable[[list[Name]], dict[Name, Any]]
    ) -> dict[Name, Any]:
        """The answer for each name: remembered ones, then one `ask` for the others. A name
        the catalog does not know is remembered as unknown (absent from the answer)."""
        wanted = sorted(set(names))
        with self._lock:
            if self._clock() - self._since >= self._remember:
                self._answers.clear()
                self._since = self._clock()
            known = {n: self._answers[(kind, n)] for n in wanted if (kind, n) in self._answers}
        missing = [n for n in wanted if n not in known]
        if missing:
            found = ask(missing)
            with self._lock:
                for name in missing:
                    self._answers[(kind, name)] = found.get(name, _UNKNOWN)
            known.update((n, found.get(n, _UNKNOWN)) for n in missing)
        return {n: answer for n, answer in known.items() if answer is not _UNKNOWN}


_UNKNOWN = object()  # remembered: the catalog has nothing by this name


class _Remembering:
    def __init__(self, memory: CatalogMemory, catalog: Catalog) -> None:
        self._memory = memory
        self._catalog = catalog

    @property
    def source(self) -> str:
        return self._catalog.source

    def functions(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._memory.recall("function", names, self._catalog.functions)

    def operators(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._memory.recall("operator", names, self._catalog.operators)

    def casts(self, types: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._memory.recall("cast", types, self._catalog.casts)

    def view_definitions(self, relations: Iterable[Name]) -> dict[Name, str]:
        return self._memory.recall("view", relations, self._catalog.view_definitions)

    def row_types(self, relations: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._memory.recall("row", relations, self._catalog.row_types)

    def implicit_casts(self, types: Iterable[Name]) -> dict[Name, list[str]]:
        return self._memory.recall("implicit", types, self._catalog.implicit_casts)

    def system_view_calls(self, relations: Iterable[Name]) -> dict[Name, list[str]]:
        return self._catalog.system_view_calls(relations)
