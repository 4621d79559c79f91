"""`invmon lint --schema FILE`: check the tables and columns an invariant uses against a
schema file (e.g. `pg_dump --schema-only`), with no database at all. Pure.

Tables are matched by name, whatever their schema qualifier; views count as tables with
their named output columns.
"""

from __future__ import annotations

import difflib
import re

import sqlglot
from pglast.keywords import RESERVED_KEYWORDS, TYPE_FUNC_NAME_KEYWORDS
from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError, TokenError
from sqlglot.optimizer.scope import Scope, traverse_scope

from monitor.authoring.fixtures import Fixture
from monitor.authoring.schema_dump import without_meta_commands
from monitor.problems import Problem, SqlProblem

Tables = dict[str, dict[str, str]]
# Keys are names as PostgreSQL stores them: unquoted names folded to lower case, quoted ones
# kept. A table is listed as `schema.name`, and also as `name` when its schema is public (the
# search_path a query or a fixture resolves unqualified names in).


def pg_name(identifier: exp.Expr | None) -> str:
    """An identifier as PostgreSQL reads it: `Orders` is orders, `"Orders"` is Orders."""
    if not isinstance(identifier, exp.Identifier):
        return identifier.name if identifier is not None else ""
    return identifier.name if identifier.quoted else identifier.name.lower()


def table_key(table: exp.Table) -> str:
    name = pg_name(table.this)
    schema = pg_name(table.args.get("db"))
    return f"{schema}.{name}" if schema else name


def _listed(tables: Tables, schema: str, name: str, columns: dict[str, str]) -> None:
    tables[f"{schema or 'public'}.{name}"] = columns
    if schema in ("", "public"):
        tables[name] = columns


def load_schema(text: str) -> Tables:
    """Table and view columns from CREATE and ALTER TABLE … ADD COLUMN statements. A dump's
    psql meta-commands (`\\restrict KEY` at its top since pg_dump 15.20) are set aside
    first: read as SQL, one swallowed the CREATE TABLE after it."""
    tables: Tables = {}
    sql = without_meta_commands(text)
    for statement in sqlglot.parse(sql, read="postgres", error_level=ErrorLevel.IGNORE):
        if isinstance(statement, exp.Alter) and isinstance(statement.this, exp.Table):
            found = tables.get(table_key(statement.this))
            for action in statement.args.get("actions") or []:
                if found is not None and isinstance(action, exp.ColumnDef):
                    kind = action.args.get("kind")
                    found[pg_name(action.this)] = kind.sql("postgres") if kind else "text"
            continue
        if not isinstance(statement, exp.Create):
            continue
        kind = str(statement.args.get("kind") or "").upper()
        target = statement.this
        if kind == "TABLE" and isinstance(target, exp.Schema):
            table = target.this
            columns = {
                pg_name(column.this): column.args["kind"].sql("postgres")
                if column.args.get("kind")
                else "text"
                for column in target.expressions
                if isinstance(column, exp.ColumnDef)
            }
            if isinstance(table, exp.Table):
                _listed(tables, pg_name(table.args.get("db")), pg_name(table.this), columns)
        elif kind == "VIEW" and isinstance(target, exp.Table):
            query = statement.expression
            names = getattr(query, "named_selects", []) if query is not None else []
            _listed(
                tables,
                pg_name(target.args.get("db")),
                pg_name(target.this),
                {name: "text" for name in names if name != "*"},
            )
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


_PLAIN = re.compile(r"[a-z_][a-z0-9_$]*")
# Words a table name cannot be unquoted (PostgreSQL's grammar: ColId).
_NOT_A_TABLE_NAME = RESERVED_KEYWORDS | TYPE_FUNC_NAME_KEYWORDS


def _in_sql(key: str) -> str:
    """A table's key (`schema.name`) as SQL names it: a part PostgreSQL would fold or
    misread quoted (`billing."LedgerEntries"`: unquoted, it names billing.ledgerentries),
    a reserved word too (`"user".accounts`)."""
    return ".".join(
        part
        if _PLAIN.fullmatch(part) and part not in _NOT_A_TABLE_NAME
        else '"' + part.replace('"', '""') + '"'
        for part in key.split(".", 1)
    )


def check_against_schema(sql: str, tables: Tables, start: int = 1) -> list[SqlProblem]:
    try:
        [statement] = parse_statements(sql)
    except (ParseError, TokenError, ValueError):
        return []  # lint reports unparseable SQL already
    # Catalog views are always there; names compare as PostgreSQL stores them.
    ctes = {pg_name(cte.args["alias"].this) for cte in statement.find_all(exp.CTE)}
    problems = []
    uses_catalog = False
    for table in statement.find_all(exp.Table):
        name = table.name
        schema = pg_name(table.args.get("db"))
        catalog = schema in ("pg_catalog", "information_schema") or name.startswith("pg_")
        uses_catalog |= catalog
        key = table_key(table)
        if (
            isinstance(table.this, exp.Identifier)
            and not catalog
            and key not in ctes
            and key not in tables
        ):
            elsewhere = [k for k in tables if "." in k and k.split(".", 1)[1] == key]
            hint = (
                f"; it is in schema {elsewhere[0].split('.')[0]}: write {_in_sql(elsewhere[0])}"
                if elsewhere
                else _did_you_mean(key, {k for k in tables if "." not in k})
            )
            problems.append(
                SqlProblem(
                    _line(sql, name, start),
                    f"unknown table {key!r}: not in the schema file{hint}",
                )
            )
    if problems or uses_catalog:
        return problems  # the schema file cannot describe the catalog's columns
    return column_problems(statement, tables, start)


def _columns_of(source: object, tables: dict[str, dict[str, str]]) -> set[str] | None:
    """The columns a FROM source offers, lower-cased; None when it cannot be known here (a
    function, a CTE or subquery with `*`)."""
    if isinstance(source, exp.Table):
        known = tables.get(table_key(source))
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
    problems: list[SqlProblem] = []
    for scope in traverse_scope(statement):
        select = scope.expression
        if not isinstance(select, exp.Select):
            continue
        offered: dict[str, set[str] | None] = {}
        chain: Scope | None = scope
        while chain is not None:
            for alias, source in chain.sources.items():
                offered.setdefault(alias, _columns_of(source, tables))
            chain = chain.parent
        own = set(scope.sources)
        outputs = {pg_name(e.args["alias"]) for e in select.expressions if isinstance(e, exp.Alias)}
        for column in select.find_all(exp.Column):
            if column.find_ancestor(exp.Select) is not select or column.name == "*":
                continue
            name = pg_name(column.this)
            qualifier = column.table
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
            if any(offered.get(a) is None for a in own) or name in outputs or name in own:
                continue  # unknown here, an output's alias, or a whole row (`to_jsonb(t)`)
            everywhere = set().union(*(c for c in offered.values() if c is not None))
            holders = sorted(
                _table_name(scope, a) for a in own if name in (offered.get(a) or set())
            )
            if len(holders) > 1:
                problems.append(
                    SqlProblem(
                        line,
                        f"column reference {name!r} is ambiguous: {' and '.join(holders)} "
                        "both have it; qualify it",
                    )
                )
                continue
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
            if name == alias:
                return (
                    f"table {table_key(source)}" if isinstance(source, exp.Table) else f"{name!r}"
                )
        chain = chain.parent
    return repr(alias)


def _did_you_mean(name: str, columns: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(columns), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def fixture_problems(fixture: Fixture, tables: Tables) -> list[Problem]:
    """Each case's tables and columns against the schema file, at the case's line. A
    fixture names tables and columns exactly (they are quoted when inserted), and an
    unqualified table must be in schema public."""
    problems = []
    for case in fixture.cases:
        for table in case.rows:
            if table not in tables:
                elsewhere = [k for k in tables if "." in k and k.split(".", 1)[1] == table]
                hint = (
                    f"; it is in schema {elsewhere[0].split('.')[0]}: write {elsewhere[0]}"
                    if elsewhere
                    else _did_you_mean(table, set(tables))
                )
                problems.append(
                    Problem(
                        fixture.path,
                        case.line,
                        f"{case.name!r}: table {table!r} is not in the schema file{hint}",
                    )
                )
                continue
            columns = {str(c) for row in case.rows[table] for c in row}
            for column in sorted(columns):
                if column not in tables[table]:
                    problems.append(
                        Problem(
                            fixture.path,
                            case.line,
                            f"{case.name!r}: {table} has no column {column!r}"
                            + _did_you_mean(column, set(tables[table])),
                        )
                    )
    return problems
