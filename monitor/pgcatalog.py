"""What PostgreSQL's catalog says a function, operator or cast may do.

The fence (fence.py) refuses a query that calls anything able to change the database or
the world outside it. It does not keep its own list of dangerous names: it asks
PostgreSQL's catalog, where every function declares its volatility (`pg_proc.provolatile`:
IMMUTABLE, STABLE or VOLATILE) and whether it may run in a parallel worker
(`proparallel = 'u'` marks the STABLE functions that assign state, such as a transaction
id). Two catalogs answer the same questions:

- `LiveCatalog`: the monitored database's own `pg_proc`, `pg_operator` and `pg_cast`, read
  on the connection that will run the query, so user-defined and extension functions are
  judged by what they declare.
- `BuiltinCatalog`: a table generated from the built-in catalogs of the PostgreSQL
  versions we support, shipped in the package, for `invmon lint` with no database. Regenerate
  it with `python -m monitor.builtins_table --dsn DSN [--dsn DSN ...] > monitor/pg_builtins.json`.
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

    def system_view_calls(self, relations: Iterable[Name]) -> dict[Name, list[str]]:
        found = {}
        for name in relations:
            key = self._key(name)
            if key is not None and key in self._views:
                found[name] = self._views[key]
        return found


@cache
def builtin_catalog() -> BuiltinCatalog:
    text = resources.files("monitor").joinpath("pg_builtins.json").read_text(encoding="utf-8")
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

_FUNCTIONS_SQL = """
WITH wanted(ord, schema, name) AS (
    SELECT * FROM unnest(%(ord)s::int[], %(schemas)s::text[], %(names)s::text[])
)
SELECT w.ord, n.nspname, p.proname, p.oid::regprocedure::text, p.prokind,
       {VOLATILITY},
       p.proparallel = 'u',
       {ONE_ARG},
       p.prosecdef,
       (SELECT e.extname FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
        WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
FROM wanted w
JOIN pg_proc p ON p.proname = w.name
JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE (w.schema = '' AND n.nspname = ANY (current_schemas(true))) OR n.nspname = w.schema
""".replace("{ONE_ARG}", ONE_ARG_SQL).replace("{VOLATILITY}", VOLATILITY_SQL)

_OPERATORS_SQL = """
WITH wanted(ord, schema, name) AS (
    SELECT * FROM unnest(%(ord)s::int[], %(schemas)s::text[], %(names)s::text[])
)
SELECT w.ord, n.nspname, f.proname, f.oid::regprocedure::text, f.prokind,
       f.provolatile::text, f.proparallel = 'u', false, f.prosecdef, NULL
FROM wanted w
JOIN pg_operator o ON o.oprname = w.name
JOIN pg_namespace n ON n.oid = o.oprnamespace
JOIN pg_proc f ON f.oid = o.oprcode
WHERE (w.schema = '' AND n.nspname = ANY (current_schemas(true))) OR n.nspname = w.schema
"""

# The functions a cast to a type may run: a cast function into it, its input functions, and
# for a domain the functions its constraints call (PostgreSQL records those in pg_depend).
_CASTS_SQL = """
WITH RECURSIVE wanted(ord, typ) AS (
    SELECT w.ord, to_regtype(w.name)
    FROM unnest(%(ord)s::int[], %(names)s::text[]) AS w(ord, name)
), chain(ord, typ) AS (
    -- the type and, for a domain, every type below it (a domain over a domain...)
    SELECT ord, typ FROM wanted WHERE typ IS NOT NULL
    UNION
    SELECT c.ord, t.typbasetype FROM chain c JOIN pg_type t ON t.oid = c.typ
    WHERE t.typbasetype <> 0
), funcs(ord, fn) AS (
    SELECT c.ord, k.castfunc FROM chain c JOIN pg_cast k ON k.casttarget = c.typ
    WHERE k.castfunc <> 0
    UNION ALL
    SELECT c.ord, f FROM chain c JOIN pg_type t ON t.oid = c.typ
    CROSS JOIN LATERAL unnest(ARRAY[t.typinput, t.typreceive, t.typmodin]::oid[]) AS f
    WHERE f <> 0
    UNION ALL
    SELECT c.ord, d.refobjid FROM chain c
    JOIN pg_constraint k ON k.contypid = c.typ
    JOIN pg_depend d ON d.classid = 'pg_constraint'::regclass AND d.objid = k.oid
         AND d.refclassid = 'pg_proc'::regclass
)
SELECT f.ord, n.nspname, p.proname, p.oid::regprocedure::text, p.prokind,
       p.provolatile::text, p.proparallel = 'u', false, p.prosecdef, NULL
FROM funcs f JOIN pg_proc p ON p.oid = f.fn JOIN pg_namespace n ON n.oid = p.pronamespace
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

    def casts(self, types: Iterable[Name]) -> dict[Name, list[Routine]]:
        wanted = sorted(set(types))
        if not wanted:
            return {}
        params = {"ord": list(range(len(wanted))), "names": [qualified_text(t) for t in wanted]}
        found: dict[Name, list[Routine]] = {}
        for ord_, *fields in self._conn.execute(_CASTS_SQL, params).fetchall():
            found.setdefault(wanted[ord_], []).append(Routine(*fields))
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

    def system_view_calls(self, relations: Iterable[Name]) -> dict[Name, list[str]]:
        return self._catalog.system_view_calls(relations)
