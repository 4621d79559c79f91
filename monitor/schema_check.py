"""`invmon lint --schema FILE`: check the tables and columns an invariant uses against a
schema file (e.g. `pg_dump --schema-only`), with no database at all. Pure.

Tables are matched by name, whatever their schema qualifier; views count as tables with
their named output columns.
"""

from __future__ import annotations

import difflib
import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError, TokenError
from sqlglot.optimizer.scope import Scope, traverse_scope

from monitor.fixtures import Fixture
from monitor.problems import Problem, SqlProblem

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
    return column_problems(statement, tables, start)


def _columns_of(source: object, tables: dict[str, dict[str, str]]) -> set[str] | None:
    """The columns a FROM source offers, lower-cased; None when it cannot be known here (a
    function, a CTE or subquery with `*`)."""
    if isinstance(source, exp.Table):
        known = tables.get(source.name.lower())
        return set(known) if known is not None else None
    expression = getattr(source, "expression", None)
    if not isinstance(expression, exp.Query):
        return None  # unnest(), generate_series(), VALUES: named by their alias, if at all
    names = expression.named_selects
    if not names or "*" in names:
        return None
    return {n.lower() for n in names}


def column_problems(statement: exp.Expr, tables: Tables, start: int = 1) -> list[SqlProblem]:
    """Each column checked in its own scope: `o.state` against the table `o` stands for;
    an unqualified name against the tables in scope (and outer ones, for a correlated
    subquery). Every clause counts: SELECT, WHERE, JOIN, GROUP BY, HAVING, FILTER, ORDER BY."""
    lowered = {
        name.lower(): {c.lower(): t for c, t in cols.items()} for name, cols in tables.items()
    }
    problems: list[SqlProblem] = []
    for scope in traverse_scope(statement):
        select = scope.expression
        if not isinstance(select, exp.Select):
            continue
        offered: dict[str, set[str] | None] = {}
        chain: Scope | None = scope
        while chain is not None:
            for alias, source in chain.sources.items():
                offered.setdefault(alias.lower(), _columns_of(source, lowered))
            chain = chain.parent
        own = {alias.lower() for alias in scope.sources}
        outputs = {e.alias.lower() for e in select.expressions if isinstance(e, exp.Alias)}
        for column in select.find_all(exp.Column):
            if column.find_ancestor(exp.Select) is not select or column.name == "*":
                continue
            name, qualifier = column.name.lower(), column.table.lower()
            line = start + int(column.this.meta.get("line", 1)) - 1
            if qualifier:
                columns = offered.get(qualifier)
                if columns is None or name in columns:
                    continue
                table = _table_name(scope, qualifier)
                problems.append(
                    SqlProblem(
                        line,
                        f"unknown column {qualifier}.{name}: {table} has no column {name!r}"
                        + _did_you_mean(name, columns),
                    )
                )
                continue
            if any(offered.get(a) is None for a in own) or name in outputs:
                continue  # a source whose columns are unknown here could hold it
            everywhere = set().union(*(c for c in offered.values() if c is not None))
            if name not in everywhere:
                names = ", ".join(sorted(_table_name(scope, a) for a in own)) or "no table"
                problems.append(
                    SqlProblem(
                        line,
                        f"unknown column {name!r}: not in {names}"
                        + _did_you_mean(name, everywhere),
                    )
                )
    return problems


def _table_name(scope: Scope, alias: str) -> str:
    chain: Scope | None = scope
    while chain is not None:
        for name, source in chain.sources.items():
            if name.lower() == alias:
                return f"table {source.name}" if isinstance(source, exp.Table) else f"{name!r}"
        chain = chain.parent
    return repr(alias)


def _did_you_mean(name: str, columns: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(columns), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def fixture_problems(fixture: Fixture, tables: Tables) -> list[Problem]:
    """Each case's tables and columns against the schema file, at the case's line."""
    lowered = {n.lower(): {c.lower() for c in cols} for n, cols in tables.items()}
    problems = []
    for case in fixture.cases:
        for table in case.rows:
            name = table.split(".")[-1].lower()
            if name not in lowered:
                problems.append(
                    Problem(
                        fixture.path,
                        case.line,
                        f"{case.name!r}: table {table!r} is not in the schema file"
                        + _did_you_mean(name, set(lowered)),
                    )
                )
                continue
            columns = {str(c) for row in case.rows[table] for c in row}
            for column in sorted(columns):
                if column.lower() not in lowered[name]:
                    problems.append(
                        Problem(
                            fixture.path,
                            case.line,
                            f"{case.name!r}: {table} has no column {column!r}"
                            + _did_you_mean(column.lower(), lowered[name]),
                        )
                    )
    return problems
