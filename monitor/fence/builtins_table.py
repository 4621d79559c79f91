"""Generating monitor/fence/pg_builtins.json, the table `invmon lint` judges built-in functions,
operators and system views by when it has no database:

    python -m monitor.fence.builtins_table --dsn DSN [--dsn DSN ...]
        > monitor/fence/pg_builtins.json

one --dsn per supported PostgreSQL version; the table keeps, under each name, the worst of
every overload in every version.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from monitor.fence.builtin_catalog import BuiltinCatalog
from monitor.fence.catalog import worst
from monitor.fence.live_catalog import ONE_ARG_SQL, VOLATILITY_SQL

_ALL_FUNCTIONS_SQL = """
SELECT n.nspname, p.proname, p.prokind,
       {VOLATILITY},
       p.proparallel = 'u',
       {ONE_ARG}
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname IN ('pg_catalog', 'information_schema')
""".replace("{ONE_ARG}", ONE_ARG_SQL).replace("{VOLATILITY}", VOLATILITY_SQL)

_ALL_OPERATORS_SQL = """
SELECT o.oprname, f.provolatile::text
FROM pg_operator o JOIN pg_proc f ON f.oid = o.oprcode
WHERE o.oprnamespace = 'pg_catalog'::regnamespace
"""

_SYSTEM_VIEWS_SQL = """
SELECT n.nspname, c.relname, pg_get_viewdef(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('pg_catalog', 'information_schema') AND c.relkind = 'v'
"""

# Casts and type input functions between built-in types: the offline table assumes they are
# all safe, so generation fails if a PostgreSQL release ever ships one that is VOLATILE.
_UNSAFE_BUILTIN_CASTS_SQL = """
SELECT p.oid::regprocedure::text FROM pg_cast c JOIN pg_proc p ON p.oid = c.castfunc
WHERE p.provolatile = 'v'
UNION ALL
SELECT p.oid::regprocedure::text FROM pg_type t JOIN pg_proc p ON p.oid = t.typinput
WHERE p.provolatile = 'v' AND t.typnamespace = 'pg_catalog'::regnamespace
"""


def read_builtins(conn: Any) -> dict[str, Any]:
    """One server's built-in functions and operators, in the shipped table's shape."""
    unsafe_casts = [row[0] for row in conn.execute(_UNSAFE_BUILTIN_CASTS_SQL).fetchall()]
    if unsafe_casts:
        raise SystemExit(f"VOLATILE built-in casts: {unsafe_casts}; the fence must judge casts")
    functions: dict[str, list[Any]] = {}
    for schema, name, kind, volatility, unsafe, one_arg in conn.execute(_ALL_FUNCTIONS_SQL):
        key = name if schema == "pg_catalog" else f"{schema}.{name}"
        _merge_function(functions, key, [volatility, unsafe, [kind], one_arg])
    operators: dict[str, str] = {}
    for name, volatility in conn.execute(_ALL_OPERATORS_SQL):
        operators[name] = worst([operators.get(name, "i"), volatility])
    version = conn.execute("SHOW server_version").fetchone()[0].split()[0]
    table = {"versions": [version], "functions": functions, "operators": operators, "views": {}}
    table["views"] = _system_views(conn, BuiltinCatalog(table))
    return table


def _system_views(conn: Any, catalog: BuiltinCatalog) -> dict[str, list[str]]:
    """Each system view that calls a VOLATILE or PARALLEL UNSAFE built-in, with those
    functions, read from its definition by the fence's own parser."""
    from monitor.fence.sqltree import analyze  # the parser; only generation needs it here

    views: dict[str, list[str]] = {}
    for schema, name, definition in conn.execute(_SYSTEM_VIEWS_SQL):
        calls = {r.name for r in analyze(definition).references if r.kind == "function"}
        found = catalog.functions(calls)
        worth_a_look = sorted(
            {
                routine.name
                for call in calls
                for routine in found.get(call, [])
                if routine.volatility == "v" or routine.parallel_unsafe
            }
        )
        if worth_a_look:
            views[name if schema == "pg_catalog" else f"{schema}.{name}"] = worth_a_look
    return views


def _merge_function(table: dict[str, list[Any]], key: str, entry: list[Any]) -> None:
    """Keep the worst of every overload (and every version) under one name."""
    old = table.get(key)
    if old is None:
        table[key] = entry
        return
    table[key] = [
        worst([old[0], entry[0]]),
        old[1] or entry[1],
        sorted(set(old[2]) | set(entry[2])),
        old[3] or entry[3],
    ]


def merge_tables(tables: Sequence[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {"versions": [], "functions": {}, "operators": {}, "views": {}}
    for table in tables:
        merged["versions"] += table["versions"]
        for key, entry in table["functions"].items():
            _merge_function(merged["functions"], key, entry)
        for name, volatility in table["operators"].items():
            merged["operators"][name] = worst([merged["operators"].get(name, "i"), volatility])
        for name, calls in table["views"].items():
            merged["views"][name] = sorted(set(merged["views"].get(name, [])) | set(calls))
    merged["versions"] = sorted(
        set(merged["versions"]), key=lambda v: [int(p) for p in v.split(".")]
    )
    merged["functions"] = dict(sorted(merged["functions"].items()))
    merged["operators"] = dict(sorted(merged["operators"].items()))
    merged["views"] = dict(sorted(merged["views"].items()))
    return merged


def main(argv: Sequence[str] | None = None) -> int:
    import psycopg

    parser = argparse.ArgumentParser(
        prog="python -m monitor.fence.builtins_table",
        description="Print the built-in catalog table that `invmon lint` judges functions by.",
    )
    parser.add_argument("--dsn", action="append", required=True, help="one per server version")
    args = parser.parse_args(argv)
    tables = []
    for dsn in args.dsn:
        with psycopg.connect(dsn) as conn:
            tables.append(read_builtins(conn))
    sys.stdout.write(dump_table(merge_tables(tables)))
    return 0


def dump_table(table: dict[str, Any]) -> str:
    """JSON with one function or operator per line, so a regeneration diffs readably."""
    lines = ["{", f'"versions": {json.dumps(table["versions"])},']
    for section in ("functions", "operators", "views"):
        entries = [
            f"{json.dumps(key)}: {json.dumps(value, separators=(',', ':'))}"
            for key, value in table[section].items()
        ]
        closing = "}" if section == "views" else "},"
        lines += [f'"{section}": {{', ",\n".join(entries), closing]
    return "\n".join(lines) + "\n}\n"


if __name__ == "__main__":
    raise SystemExit(main())
