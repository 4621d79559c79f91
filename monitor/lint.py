"""`invmon lint`: every problem of every invariant file and its fixture, with no database.
The fence against the built-in catalog (and the functions a schema file declares), and with
a schema file, the tables and columns each query names."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from monitor.ci_output import JunitCase
from monitor.config import Config
from monitor.fixtures import SUFFIX, fixture_path, load_fixture
from monitor.loader import LoadResult, load_directory, name_for
from monitor.problems import Problem
from monitor.schema_dump import DumpParseError, dump_statements
from monitor.selection import NothingSelected, name_matches


@dataclasses.dataclass
class LintReport:
    loaded: LoadResult
    # Problems of the schema files: reported, and failing the run, but not an invariant's.
    schema: list[Problem] = dataclasses.field(default_factory=list)

    @property
    def problems(self) -> list[Problem]:
        return self.loaded.problems + self.schema

    @property
    def failed(self) -> bool:
        return bool(self.loaded.errors) or any(p.level == "error" for p in self.schema)

    def only(self, selectors: Sequence[str], folder: Path) -> LintReport:
        """The report for the selected files, loaded or not (with their fixtures); each
        selector must match a file, as in every other command."""
        tags = {i.name: i.header.tags for i in self.loaded.invariants}

        def name_of(path: Path) -> str | None:
            if path.name.endswith(SUFFIX):  # a fixture goes with its invariant
                path = path.with_name(path.name.removesuffix(SUFFIX) + ".sql")
            try:
                return name_for(path, folder)
            except ValueError:
                return None

        names = {n for p in self.loaded.problems if (n := name_of(p.path))}
        names |= set(tags)
        for selector in selectors:
            if not any(name_matches(n, tags.get(n, []), selector, folder) for n in names):
                shown = ", ".join(sorted(names)[:20]) or "none"
                known_tags = ", ".join(sorted({t for ts in tags.values() for t in ts})) or "none"
                raise NothingSelected(
                    f"--select {selector!r} matches no invariant; names: {shown}; "
                    f"tags: {known_tags}"
                )

        def selected(path: Path) -> bool:
            name = name_of(path)
            return name is not None and any(
                name_matches(name, tags.get(name, []), s, folder) for s in selectors
            )

        problems = [p for p in self.loaded.problems if selected(p.path)]
        chosen = [i for i in self.loaded.invariants if selected(i.path)]
        return LintReport(LoadResult(chosen, problems), self.schema)

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
        return f"{valid} invariant{'s' * (valid != 1)} valid, {broken} with errors"

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
        from monitor.pgcatalog import builtin_catalog
        from monitor.schema_functions import SchemaCatalog

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
    if schema_sql is not None or own:
        from monitor.schema_check import check_against_schema, fixture_problems, load_schema
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
    return LintReport(loaded)
