"""`invmon lint`: every problem of every invariant file and its fixture, with no database.
The fence against the built-in catalog (and the functions a schema file declares), and with
a schema file, the tables and columns each query names."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pglast.parser import ParseError

from monitor.authoring.ci_output import JunitCase
from monitor.authoring.fixtures import SUFFIX, fixture_path, load_fixture
from monitor.authoring.schema_dump import DumpParseError, dump_statements
from monitor.config import Config
from monitor.fence.builtin_catalog import builtin_catalog
from monitor.fence.catalog import Catalog
from monitor.fence.sqltree import TreeTooDeep, TreeTooLarge, parse
from monitor.fence.tree import node_items
from monitor.invariants.loader import Invariant, LoadResult, load_directory
from monitor.invariants.selection import select_loaded
from monitor.invariants.validate import columns_of
from monitor.problems import Problem

SCHEMA_HOW = "pass --schema, or set `schema:` or `targets.NAME.schema` in the config"


@dataclasses.dataclass
class LintReport:
    loaded: LoadResult
    # Problems of the schema files: reported, and failing the run, but not an invariant's.
    schema: list[Problem] = dataclasses.field(default_factory=list)
    # The invariants whose tables and columns went unchecked: no schema for their target.
    # Said with the counts, so "valid" never reads as more than was checked.
    unchecked: frozenset[str] = frozenset()

    @property
    def problems(self) -> list[Problem]:
        return self.loaded.problems + self.schema

    @property
    def failed(self) -> bool:
        return bool(self.loaded.errors) or any(p.level == "error" for p in self.schema)

    def only(self, selectors: Sequence[str], folder: Path) -> LintReport:
        """The report for the selected files, loaded or not (with their fixtures); each
        selector must match a file, as in every other command."""

        def owner(path: Path) -> Path:
            if path.name.endswith(SUFFIX):  # a fixture goes with its invariant
                return path.with_name(path.name.removesuffix(SUFFIX) + ".sql")
            return path

        chosen = select_loaded(self.loaded, selectors, folder, owner)
        kept = frozenset(i.name for i in chosen.invariants) & self.unchecked
        return LintReport(chosen, self.schema, kept)

    def junit_cases(self) -> list[JunitCase]:
        """One case per file: failed with its problems, or passed."""
        by_path: dict[Path, list[Problem]] = {}
        for problem in self.problems:
            by_path.setdefault(problem.path, []).append(problem)
        for inv in self.loaded.invariants:
            by_path.setdefault(inv.path, [])
        return [
            JunitCase(
                "lint",
                str(path),
                failure="\n".join(str(p) for p in found if p.level == "error") or None,
                file=str(path),
            )
            for path, found in sorted(by_path.items())
        ]

    def counts(self) -> tuple[int, int]:
        """(valid, with errors), counted by invariant: a problem in its fixture is a problem
        of the invariant."""
        broken = {
            p.with_name(p.name.removesuffix(SUFFIX) + ".sql") if p.name.endswith(SUFFIX) else p
            for p in self.loaded.failed_paths()
        }
        return len([i for i in self.loaded.invariants if i.path not in broken]), len(broken)

    def summary(self) -> str:
        valid, broken = self.counts()
        said = f"{valid} invariant{'s' * (valid != 1)} valid, {broken} with errors"
        if not self.unchecked:
            return said
        if len(self.unchecked) == len(self.loaded.invariants):
            return f"{said}; tables and columns not checked (no schema: {SCHEMA_HOW})"
        return (
            f"{said}; tables and columns of {len(self.unchecked)} not checked (no schema for "
            f"their target: {SCHEMA_HOW})"
        )

    def document(self) -> dict[str, object]:
        """`lint --format json`: every problem, and the counts the summary line gives."""
        valid, broken = self.counts()
        return {
            "problems": [
                {"path": str(p.path), "line": p.line, "level": p.level, "message": p.message}
                for p in self.problems
            ],
            "valid": valid,
            "with_errors": broken,
            "failed": self.failed,
            # Linted without a schema: their tables and columns were not checked.
            "tables_unchecked": sorted(self.unchecked),
        }


def schema_problems(path: Path, text: str) -> list[Problem]:
    """A schema file that is not SQL is a problem of its own, at its line: checking queries
    against it would only say "unknown table" for everything."""
    try:
        dump_statements(text)
    except DumpParseError as exc:
        return [Problem(path, exc.line, f"cannot parse the schema file: {exc.message}")]
    return []


def lint_folder(
    config: Config,
    folder: Path,
    schema_sql: str | None,
    target_schemas: Mapping[str, str] | None = None,
) -> LintReport:
    """`target_schemas`: a target's own schema file (`targets.NAME.schema`), used for its
    invariants instead of `schema_sql`."""
    loading = config.loading(with_database=False)
    if schema_sql is not None:
        from monitor.fence.schema_functions import SchemaCatalog

        # The schema's own functions are judged by the volatility they declare there.
        catalog = SchemaCatalog(builtin_catalog(), schema_sql)
        loading = dataclasses.replace(
            loading, policy=dataclasses.replace(loading.policy, catalog=catalog)
        )
    loaded = load_directory(folder, loading)
    fixtures = []
    for inv in loaded.invariants:  # the fixture next to each file: read, not run
        cases = fixture_path(inv.path)
        if cases.exists():
            fixtures.append(load_fixture(cases, inv.key, inv.header.source))
            loaded.problems += fixtures[-1].problems
    own = dict(target_schemas or {})
    unchecked = frozenset(
        i.name for i in loaded.invariants if i.target not in own and schema_sql is None
    )
    if schema_sql is not None or own:
        from monitor.authoring.schema_check import (
            check_against_schema,
            fixture_problems,
            load_schema,
        )
        from monitor.sources.header import COLUMN_TYPES

        tables_of = {name: load_schema(text) for name, text in own.items()}
        fallback = load_schema(schema_sql) if schema_sql is not None else None
        by_path = {fixture_path(i.path): i.target for i in loaded.invariants}
        for inv in loaded.invariants:
            tables = tables_of.get(inv.target, fallback)
            if tables is None:
                continue
            offset = inv.sql_first_line - 1
            # A source is a relation of the query's (its CTE wins over a table so named).
            sources: dict[str, dict[str, str]] = {
                name: {str(column): COLUMN_TYPES[column] for column in spec.columns}
                for name, spec in inv.header.source.items()
            }
            loaded.problems += [
                Problem(inv.path, p.line + offset, p.message, p.level)
                for p in check_against_schema(inv.sql, {**tables, **sources})
            ]
        for fixture in fixtures:
            tables = tables_of.get(by_path.get(fixture.path, ""), fallback)
            if tables is not None:
                loaded.problems += fixture_problems(fixture, tables)
    for inv in loaded.invariants:
        loaded.problems += unfinished(inv.path, inv.path.read_text(encoding="utf-8"))
    keyless = [inv for inv in loaded.invariants if not inv.header.key]
    if keyless:
        builtins = builtin_catalog()  # aggregates are known by name offline, as lint is
        loaded.problems += [h for inv in keyless if (h := key_hint(inv, builtins)) is not None]
    return LintReport(loaded, unchecked=unchecked)


# --- hint: a keyless query whose columns are aggregates ----------------------------------------

# Arguments only an aggregate takes: a user-defined aggregate is known by them too.
_AGGREGATE_FLAGS = ("agg_star", "agg_distinct", "agg_order", "agg_filter", "agg_within_group")


@dataclasses.dataclass(frozen=True)
class OutputColumn:
    name: str | None  # as PostgreSQL names it; None when only a schema could tell (`*`)
    aggregates: tuple[str, ...]  # the aggregates its value is computed from, e.g. ("sum",)
    byte: int  # where it is written in the statement


def _aggregates_in(value: Any, catalog: Catalog) -> list[str]:
    """The aggregates computing `value` itself (a window aggregate too), not those of a
    subquery: a subquery's sum is one value of the outer row's, not the row's own figure."""
    found = []
    for kind, body in node_items(value, stop_at=frozenset({"SubLink"})):
        if kind != "FuncCall":
            continue
        name = tuple(str(p["String"]["sval"]) for p in body.get("funcname", []) if "String" in p)
        routines = catalog.functions([name]).get(name, [])
        if any(r.kind == "a" for r in routines) or any(body.get(f) for f in _AGGREGATE_FLAGS):
            found.append(name[-1] + (" … OVER" if "over" in body else ""))
    return found


def output_columns(statement: dict[str, Any], catalog: Catalog) -> list[OutputColumn]:
    """The top-level SELECT's output columns (the first branch's names in a UNION), each
    with the aggregates its value is computed from in any branch."""
    columns: list[OutputColumn] = []
    for branch in _branches(statement):
        for position, target in enumerate(branch.get("targetList") or []):
            result = target.get("ResTarget", {})
            aggregates = tuple(_aggregates_in(result.get("val"), catalog))
            if position < len(columns):
                known = columns[position]
                merged = known.aggregates + tuple(
                    a for a in aggregates if a not in known.aggregates
                )
                columns[position] = dataclasses.replace(known, aggregates=merged)
            else:
                # PostgreSQL's name for the column: columns_of reads one target as well as many.
                names = columns_of({"targetList": [target]})
                name = names[0] if names else ("?column?" if "val" in result else None)
                if _is_star(result.get("val")):
                    name = None
                columns.append(OutputColumn(name, aggregates, int(result.get("location", 0))))
    return columns


def _branches(statement: dict[str, Any]) -> list[dict[str, Any]]:
    """The SELECTs of a UNION / INTERSECT / EXCEPT, first branch (which names the columns)
    first; a plain SELECT is its own one branch."""
    found, stack = [], [statement]
    while stack:
        current = stack.pop()
        if current.get("op", "SETOP_NONE") == "SETOP_NONE":
            found.append(current)
        else:
            stack += [current.get("rarg") or {}, current.get("larg") or {}]
    return found


def _is_star(value: Any) -> bool:
    fields = (value or {}).get("ColumnRef", {}).get("fields", []) if isinstance(value, dict) else []
    return bool(fields) and "A_Star" in fields[-1]


def key_hint_message(statement: dict[str, Any], catalog: Catalog) -> tuple[str, int] | None:
    """(the hint, the byte of the first aggregate column) when a query without `key:` has
    aggregate output columns; None otherwise. Pure: the parse tree in, the words out."""
    columns = output_columns(statement, catalog)
    moving = [c for c in columns if c.aggregates]
    if not moving:
        return None
    functions = list(dict.fromkeys(a for c in moving for a in c.aggregates))
    names = ", ".join(repr(c.name) for c in moving)
    plural = len(moving) > 1
    said = (
        f"no `key:`, and column{'s' * plural} {names} {'are' if plural else 'is'} computed "
        f"by {'an aggregate' if len(functions) == 1 else 'aggregates'} ({', '.join(functions)}):"
        " without `key:` a row's identity is its whole value, so a row whose"
        f" {' or '.join(functions)} moves is a new offending row each run (a row gone and a row"
        " appeared in the incident's thread); "
    )
    stable = [c for c in columns if not c.aggregates]
    grouped = any(b.get("groupClause") for b in _branches(statement))
    if stable and all(c.name is not None for c in stable):
        listed = ", ".join(str(c.name) for c in stable)
        advice = f"write `key: [{listed}]` (the columns that are not aggregates)"
    elif stable:
        advice = "write `key:` naming the columns that are not aggregates (list them, not `*`)"
    elif grouped:
        advice = "select the GROUP BY columns too and name them in `key:`"
    elif any(not a.endswith(" OVER") for c in moving for a in c.aggregates):
        advice = (
            "the query returns one row: give it a constant label, e.g. `SELECT 'all' AS scope,"
            " …` with `key: [scope]`"
        )
    else:
        advice = "select the columns that identify a row and name them in `key:`"
    return said + advice, moving[0].byte


def unfinished(path: Path, text: str) -> list[Problem]:
    """A warning (lint still passes) at each line that says TODO: a file `invmon new` wrote
    and nobody finished (its placeholder description, its `WHERE false`) is valid SQL and
    would otherwise read as a valid invariant; its cases fail `invmon test` anyway."""
    return [
        Problem(path, number, "still says TODO: finish it before it is merged", "warning")
        for number, line in enumerate(text.splitlines(), start=1)
        if "TODO" in line
    ]


def key_hint(inv: Invariant, catalog: Catalog) -> Problem | None:
    """A hint (never an error) at the first aggregate column of a keyless invariant."""
    try:
        raw = parse(inv.sql)["stmts"][0]["stmt"]
    except (TreeTooLarge, TreeTooDeep, ParseError):
        return None  # judged already: the fence says what is wrong with such a text
    statement = raw.get("SelectStmt")
    if not statement:
        return None
    found = key_hint_message(statement, catalog)
    if found is None:
        return None
    message, byte = found
    line = inv.sql_first_line + inv.sql.encode("utf-8")[:byte].count(b"\n")
    return Problem(inv.path, line, message, "hint")
