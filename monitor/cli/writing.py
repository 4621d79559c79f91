"""What an author runs: `explain`, `test`, `init`, `new`, `lint`, and `demo`."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from monitor.authoring.ci_output import (
    Finding,
    from_problems,
)
from monitor.cli.options import (
    ALLOW_PRIVILEGED_ROLE,
    CONFIG,
    DSN,
    EXIT_INVALID,
    INVARIANTS,
    JUNIT,
    SCHEMA,
    SELECT,
    TARGETS,
    TEST_SERVER,
    annotate,
    checked_dsn,
    fail,
    output_format,
    write_junit,
)
from monitor.cli.render import (
    problems_text,
    to_json,
)
from monitor.cli.resolving import (
    by_target,
    read_schema,
    read_schema_file,
    require_folder,
    require_targets,
    resolve_config,
    schema_paths,
    selected_invariants,
    test_server_dsn,
)
from monitor.invariants.header import DEFAULT_TARGET
from monitor.invariants.loader import Invariant
from monitor.invariants.selection import NothingSelected
from monitor.logs import redact

if TYPE_CHECKING:
    from monitor.authoring.scaffold import (
        Planned,  # sqlglot behind it: only `new` and `init` load it
    )


@click.command()
@CONFIG
@DSN
@INVARIANTS
@click.argument("names", nargs=-1)
@SELECT
@click.option("--analyze", is_flag=True, help="EXPLAIN ANALYZE: runs the queries (read-only).")
@click.option(
    "--empty-sources",
    is_flag=True,
    help="Plan each `source:` as an empty listing instead of listing it (no bucket access "
    "needed; the cost then leaves the listing out, and says so).",
)
@output_format("text", "json")
@TARGETS
@ALLOW_PRIVILEGED_ROLE
def explain(
    config_path: Path | None,
    dsn: str | None,
    invariants_dir: Path | None,
    names: tuple[str, ...],
    selectors: tuple[str, ...],
    analyze: bool,
    empty_sources: bool,
    fmt: str,
    targets: tuple[str, ...],
    allow_privileged_role: bool,
) -> None:
    """Planner cost of each invariant; exit 1 when one is over its max_cost."""
    from monitor.authoring.explain import (
        Explained,
        RoleRule,
        explain_all,
        explain_document,
        explain_text,
    )
    from monitor.execution.check import privileged_allowance
    from monitor.sources.listing import list_source

    config = resolve_config(config_path, dsn, invariants_dir)
    known = require_targets(config, "explain against")
    selected = selected_invariants(config, names + selectors, targets)
    results: list[Explained] = []
    for name, group in by_target(selected).items():
        target = known[name]
        if not target.dsn:
            reason = config.no_dsn_reason(name)
            results += [Explained(i.name, None, i.header.max_cost, reason) for i in group]
            continue
        allowed, how = privileged_allowance(target, allow_privileged_role)
        try:
            results += explain_all(
                target.dsn,
                group,
                config.max_cost,
                analyze,
                config.fence.allowances(),
                target.database.lock_timeout,
                None if empty_sources else list_source,
                redaction=config.redact.redaction(),
                # ANALYZE runs the queries: as `check` would, never as a role that can write
                # unless allowed. A plan alone runs nothing of theirs.
                role=RoleRule(name, allowed, how) if analyze else None,
                connect_timeout=target.database.connect_timeout,
                overrun_margin=config.daemon.overrun_margin,
            )
        except Exception as exc:  # a refused connection: one sentence, not a traceback
            fail(f"cannot explain on target {name!r}: {redact(str(exc))}")
    text, code = explain_text(results)
    click.echo(to_json(explain_document(results)) if fmt == "json" else text)
    by_name = {i.name: i for i in selected}
    annotate(
        [
            Finding(by_name[r.invariant].path, 1, "error", "invmon explain", line)
            for r in results
            if r.over_budget or r.summary is None
            for line in [explain_text([r])[0]]
        ]
    )
    sys.exit(code)


@click.command(name="test")
@click.argument("names", nargs=-1)
@CONFIG
@INVARIANTS
@SELECT
@TARGETS
@SCHEMA
@TEST_SERVER
@click.option("--strict", is_flag=True, help="An invariant with no firing case is an error.")
@output_format("text", "json")
@JUNIT
@click.option("--watch", is_flag=True, help="Run again, for what changed, on every save.")
def test_command(
    names: tuple[str, ...],
    config_path: Path | None,
    invariants_dir: Path | None,
    selectors: tuple[str, ...],
    targets: tuple[str, ...],
    schema_file: Path | None,
    admin_dsn: str | None,
    strict: bool,
    fmt: str,
    junit: Path | None,
    watch: bool,
) -> None:
    """Run each invariant's fixture cases (NAME.test.yaml) in a throwaway database."""
    import psycopg

    from monitor.authoring.case_report import findings, junit_cases, report_document, report_text
    from monitor.authoring.pgtemp import SchemaLoadError
    from monitor.authoring.tester import run_fixtures
    from monitor.execution.runner import describe_error

    config = resolve_config(config_path, None, invariants_dir)
    server = test_server_dsn(admin_dsn)
    schema_path = schema_file or config.schema_path

    def once(only: set[str] | None = None) -> int:
        selected = selected_invariants(config, names + selectors, targets)
        if only is not None:
            selected = [i for i in selected if i.name in only]
        reports = []
        schemas = schema_paths(config, schema_file)
        refuse_without_schema(selected, schemas)
        # Each target's cases run in a scratch database made from its own schema file.
        for name, group in sorted(by_target(selected).items()):
            schema = schemas[name]
            try:
                reports += run_fixtures(
                    group,
                    read_schema_file(schema),
                    server,
                    config.fence.allowances(),
                    str(schema or "schema"),
                    lambda warning: click.echo(f"warning: {warning}", err=True),
                )
            except SchemaLoadError as exc:
                fail(str(exc))
            except psycopg.Error as exc:
                fail(f"cannot use the test server: {redact(describe_error(exc))}")
        reports.sort(key=lambda r: [i.name for i in selected].index(r.invariant.name))
        text, code = report_text(reports, strict)
        click.echo(to_json(report_document(reports, strict)) if fmt == "json" else text)
        if junit is not None:
            write_junit(junit, "invmon test", junit_cases(reports, strict))
        annotate(findings(reports, strict))
        return code

    if not watch:
        sys.exit(once())
    from monitor.authoring.watching import watch as watching

    def again(only: set[str] | None) -> None:
        click.echo(f"\n== {'all' if only is None else ', '.join(sorted(only)) or 'nothing'}")
        try:
            once(only)
        except click.ClickException as exc:  # a broken file: say it, keep watching
            click.echo(f"invmon: {exc.format_message()}", err=True)
        click.echo("(watching for changes; Ctrl-C stops)")

    try:
        watching(config.invariants, schema_path, again)
    except KeyboardInterrupt:
        sys.exit(0)


def refuse_without_schema(invariants: Sequence[Invariant], schemas: dict[str, Path | None]) -> None:
    """Cases run in an empty scratch database: without a schema, every case of an invariant
    that reads a table would fail with `relation … does not exist`. Say so once instead."""
    from monitor.authoring.fixtures import fixture_path
    from monitor.fence.sqltree import tables_read

    needing = {
        inv.name: tables
        for inv in invariants
        if schemas.get(inv.target) is None
        and fixture_path(inv.path).exists()
        and (tables := tables_read(inv.sql))
    }
    if not needing:
        return
    tables = sorted({t for found in needing.values() for t in found})
    fail(
        f"no schema was given, and {len(needing)} invariant{'s' * (len(needing) > 1)} with "
        f"cases read{'s' * (len(needing) == 1)} tables a scratch database does not have "
        f"({shorten_list(tables)}); nothing was run. Give the schema with --schema FILE or "
        "`schema: FILE` in invmon.yaml (per target under `targets:`), e.g. the output of "
        "`pg_dump --schema-only` of the production database"
    )


def shorten_list(items: Sequence[str], at_most: int = 5) -> str:
    shown = ", ".join(items[:at_most])
    return shown + (f" and {len(items) - at_most} more" if len(items) > at_most else "")


def write_planned(root: Path, planned: Sequence[Planned]) -> None:
    """Write each file under `root`, never over one that exists; say what happened."""
    for item in planned:
        target = root / item.path
        if target.exists():
            click.echo(f"kept     {target} (it exists)")
            continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(item.text, encoding="utf-8")
            if item.executable:
                target.chmod(0o755)
        except OSError as exc:
            fail(f"cannot write {str(target)!r}: {exc.strerror}")
        click.echo(f"created  {target}")


@click.command()
@click.argument("directory", default=".", type=click.Path(path_type=Path, file_okay=False))
def init(directory: Path) -> None:
    """Start a repository of invariants: config, .gitignore, schema placeholder, an example
    invariant with its cases, the PR workflow, its check script, PR template, CODEOWNERS,
    and the scripts that make and check invmon's least-privilege database role."""
    from monitor.authoring.scaffold import invmon_source, repository
    from monitor.cli.demo import shipped_folder

    kit = shipped_folder("deploy/ci", "monitor.ci_kit")
    roles = shipped_folder("deploy", "monitor.role_scripts")
    has_invariants = any((directory / "invariants").rglob("*.sql"))
    source = invmon_source()
    write_planned(directory, repository(kit, roles, source, has_invariants))
    click.echo(
        "\nNext: put the production schema in db/schema.sql (the command is in the file), "
        "then `invmon lint` and `invmon test`; `invmon new NAME` starts the next invariant."
    )
    if not source:
        # Only a git install knows the commit it came from; the workflow would stop at once.
        click.echo(
            "The PR workflow installs invmon from the repository variable INVMON_SOURCE, "
            "which this install cannot fill in: set it to a release, e.g. "
            "'invariant-monitor @ git+https://github.com/your-org/invmon@vX.Y.Z'."
        )


@click.command()
@click.argument("name")
@CONFIG
@INVARIANTS
@SCHEMA
@click.option("--table", help="The table it is about (default: the schema's first).")
def new(
    name: str,
    config_path: Path | None,
    invariants_dir: Path | None,
    schema_file: Path | None,
    table: str | None,
) -> None:
    """Write NAME.sql and NAME.test.yaml in the invariants folder, from the schema."""
    from monitor.authoring.scaffold import name_problem, new_invariant
    from monitor.authoring.schema_check import load_schema

    if (problem := name_problem(name)) is not None:
        fail(problem)
    config = resolve_config(config_path, None, invariants_dir)
    schema_sql = read_schema(config, schema_file)
    tables = load_schema(schema_sql) if schema_sql else {}
    if table is not None and table not in tables:
        known = ", ".join(sorted(t for t in tables if not t.startswith("public."))) or (
            "none (no schema file)"
        )
        fail(f"--table {table!r} is not in the schema; tables: {known}")
    write_planned(config.invariants, new_invariant(name, table, tables))


@click.command()
@click.argument("directory", required=False, type=click.Path(path_type=Path, file_okay=False))
@CONFIG
@INVARIANTS
@SELECT
@SCHEMA
@output_format("text", "json")
@JUNIT
def lint(
    directory: Path | None,
    config_path: Path | None,
    invariants_dir: Path | None,
    selectors: tuple[str, ...],
    schema_file: Path | None,
    fmt: str,
    junit: Path | None,
) -> None:
    """Validate every invariant file and its fixture; print all problems as path:line:
    message. The folder is DIRECTORY or --invariants, as for the other commands."""
    from monitor.authoring.lint import lint_folder, schema_problems

    config = resolve_config(config_path, None, directory or invariants_dir)
    require_folder(config)
    own: dict[str, str] = {}
    if schema_file is None:  # --schema is one file for all; else each target's own
        for name, target in config.resolved_targets().items():
            text = read_schema_file(target.schema_path) if target.schema_path else None
            if text is not None and name != DEFAULT_TARGET:
                own[name] = text
    report = lint_folder(config, config.invariants, read_schema(config, schema_file), own)
    for path in {schema_file or config.schema_path, *schema_paths(config, None).values()}:
        if path is not None and path.is_file():
            report.schema += schema_problems(path, path.read_text(encoding="utf-8"))
    if selectors:
        try:
            report = report.only(selectors, config.invariants)
        except NothingSelected as exc:
            fail(str(exc))
    if fmt == "json":
        click.echo(to_json(report.document()))
    elif report.problems:
        click.echo(problems_text(report.problems))
    click.echo(report.summary(), err=True)
    if junit is not None:
        write_junit(junit, "invmon lint", report.junit_cases())
    annotate(from_problems(report.problems))
    sys.exit(EXIT_INVALID if report.failed else 0)


@click.command()
@click.option(
    "--dsn",
    "admin_dsn",
    help="Use this server (scratch databases are created on it and dropped) "
    "instead of starting a throwaway one.",
)
def demo(admin_dsn: str | None) -> None:
    """Start a throwaway PostgreSQL with planted violations and run every shipped invariant."""
    import psycopg

    from monitor.cli.demo import run_demo
    from monitor.execution.runner import describe_error

    server = checked_dsn(admin_dsn, "--dsn") if admin_dsn else None
    try:
        code = run_demo(server, click.echo)
    except psycopg.Error as exc:
        fail(f"cannot use the server: {redact(describe_error(exc))}")
    sys.exit(code)
