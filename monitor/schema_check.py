"""`invmon lint --schema FILE`: check the tables and columns an invariant uses against a
schema file (e.g. `pg_dump --schema-only`), with no database at all. Pure.

Tables are matched by name, whatever their schema qualifier; views count as tables with
their named output columns.
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, OptimizeError, ParseError, TokenError
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from monitor.problems import SqlProblem

Tables = dict[str, dict[str, str]]


def load_schema(text: str) -> Tables:
    """Table and view columns from CREATE statements; everything else is skipped."""
    tables: Tables = {}
    for statement in sqlglot.parse(text, read="postgres", error_level=ErrorLevel.IGNORE):
        if not isinstance(statement, exp.Create):
            continue
        kind = str(statement.args.get("kind") or "").upper()
        target = statement.this
        if kind == "TABLE" and isinstance(target, exp.Schema):
            table = target.this
            columns = {
                column.name: column.args["kind"].sql("postgres")
                if column.args.get("kind")
                else "text"
                for column in target.expressions
                if isinstance(column, exp.ColumnDef)
            }
            tables[table.name] = columns
        elif kind == "VIEW" and isinstance(target, exp.Table):
            query = statement.expression
            names = getattr(query, "named_selects", []) if query is not None else []
            tables[target.name] = {name: "text" for name in names if name != "*"}
    return tables


def parse_statements(sql: str) -> list[exp.Expr]:
    # A trailing "; -- comment" parses as a separate Semicolon node; it is not a statement.
    return [
        s
        for s in sqlglot.parse(sql, read="postgres")
        if s is not None and not isinstance(s, exp.Semicolon)
    ]


def _line(sql: str, name: str, default: int) -> int:
    code = re.sub(r"--[^\n]*", lambda m: " " * len(m.group(0)), sql)
    match = re.search(rf"\b{re.escape(name)}\b", code, re.I)
    return code.count("\n", 0, match.start()) + 1 if match else default


def check_against_schema(sql: str, tables: Tables, start: int = 1) -> list[SqlProblem]:
    try:
        [statement] = parse_statements(sql)
    except (ParseError, TokenError, ValueError):
        return []  # lint reports unparseable SQL already
    # Unquoted names are case-insensitive in PostgreSQL; catalog views are always there.
    ctes = {cte.alias.lower() for cte in statement.find_all(exp.CTE)}
    known = {name.lower() for name in tables}
    problems = []
    uses_catalog = False
    for table in statement.find_all(exp.Table):
        name = table.name
        catalog = table.db.lower() in ("pg_catalog", "information_schema") or name.startswith("pg_")
        uses_catalog |= catalog
        if (
            isinstance(table.this, exp.Identifier)
            and not catalog
            and name.lower() not in ctes
            and name.lower() not in known
        ):
            problems.append(
                SqlProblem(
                    _line(sql, name, start), f"unknown table {name!r}: not in the schema file"
                )
            )
    if problems or uses_catalog:
        return problems  # the schema file cannot describe the catalog's columns
    try:
        qualify(
            statement.copy(),
            schema=MappingSchema(dict(tables), dialect="postgres"),
            dialect="postgres",
            validate_qualify_columns=True,
        )
    except OptimizeError as exc:
        text = str(exc)
        found = re.search(r"Unknown column: (\w+)|Column '([^']+)' could not be resolved", text)
        column = (found.group(1) or found.group(2)) if found else None
        if column is None:
            return [SqlProblem(start, f"cannot check against the schema: {text}", "warning")]
        line = _line(sql, column, start)
        if _known_anywhere(column, tables, statement):
            # Quoting, inheritance, a function's output or an ambiguity: not provably wrong.
            return [
                SqlProblem(
                    line, f"could not resolve column {column!r} against the schema", "warning"
                )
            ]
        return [
            SqlProblem(
                line,
                f"unknown column {column!r}: no table in this query has it in the schema file",
            )
        ]
    return []


def _known_anywhere(column: str, tables: Tables, statement: exp.Expr) -> bool:
    """The name exists in some table, or the query itself defines it (an alias)."""
    lowered = column.lower()
    if any(lowered == c.lower() for columns in tables.values() for c in columns):
        return True
    aliases = {a.name.lower() for a in statement.find_all(exp.TableAlias) if a.name}
    aliases |= {
        c.name.lower()
        for a in statement.find_all(exp.TableAlias)
        for c in a.columns
        if isinstance(c, exp.Identifier)
    }
    aliases |= {a.alias.lower() for a in statement.find_all(exp.Alias) if a.alias}
    return lowered in aliases
