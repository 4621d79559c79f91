"""The `invmon` command line. Thin: it parses flags, calls the core and prints.

Exit codes: 0 everything held (or the command succeeded), 1 a violation or a failing case,
2 the command could not do its job (a user error, an unreachable database, an invalid file):
`InvmonError`, one sentence on stderr, never a traceback.
"""

from __future__ import annotations

import getpass
import logging
import os
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar

import click
import psycopg

from monitor import __version__
from monitor.authoring.ci_output import (
    Finding,
    JunitCase,
    from_problems,
    github_annotations,
    junit_xml,
)
from monitor.cli.render import (
    history_text,
    problems_text,
    results_document,
    results_markdown,
    results_table,
    status_text,
    to_json,
)
from monitor.clock import utc_now
from monitor.config import Config, ConfigError, Target, check_dsn, load_config
from monitor.durations import parse_duration
from monitor.execution.check import CheckOutcome, run_check
from monitor.execution.results import DEFAULT_TARGET, exit_code
from monitor.execution.runner import describe_error
from monitor.invariants.loader import Invariant, load_directory
from monitor.invariants.selection import NothingSelected, select
from monitor.logs import redact
from monitor.store.acks import AckMode, Action
from monitor.store.records import as_document
from monitor.store.storage import StoreInUse, hold_single_daemon

if TYPE_CHECKING:
    from monitor.authoring.scaffold import (
        Planned,  # sqlglot behind it: only `new` and `init` load it
    )
    from monitor.store.state import StateStore

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
EXIT_INVALID = 2


class InvmonError(click.ClickException):
    """The command could not do its job: one sentence on stderr, exit 2."""

    exit_code = EXIT_INVALID

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"invmon: {self.format_message()}", err=True)


def fail(message: str) -> NoReturn:
    raise InvmonError(message)


# --- options, declared once ---------------------------------------------------------------

CONFIG = click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="YAML config file (default: ./invmon.yaml when present).",
)
DSN = click.option(
    "--dsn",
    envvar="INVMON_DSN",
    help="libpq DSN of the monitored database (a read replica). Env: INVMON_DSN.",
)
INVARIANTS = click.option(
    "--invariants",
    "invariants_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder of invariant .sql files (default: from config, else ./invariants).",
)
SCHEMA = click.option(
    "--schema",
    "schema_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Schema file, e.g. `pg_dump --schema-only` (default: `schema:` in config).",
)
JUNIT = click.option(
    "--junit",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write the results as JUnit XML to this file (for any CI).",
)
TARGETS = click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="NAME",
    help="Only the invariants of this target (repeatable); see `targets:` in the config.",
)
SELECT = click.option(
    "--select",
    "selectors",
    multiple=True,
    metavar="SELECTOR",
    help="Only these (repeatable): a name, a folder `payments/`, a glob `pay*/*`, "
    "`tag:money`, or a file path.",
)
TEST_SERVER = click.option(
    "--dsn",
    "admin_dsn",
    help="Admin DSN of a server for scratch databases "
    "(default: INVMON_TEST_DSN, else a throwaway server).",
)


def output_format(*choices: str) -> Callable[[F], F]:
    return click.option(
        "--format", "fmt", type=click.Choice(choices), default=choices[0], show_default=True
    )


def write_junit(path: Path, suite: str, cases: Sequence[JunitCase]) -> None:
    try:
        path.write_text(junit_xml(suite, cases), encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write --junit {str(path)!r}: {exc.strerror}")


def annotate(found: Sequence[Finding]) -> None:
    """Under GitHub Actions, each finding also becomes an annotation at its file and line."""
    if os.environ.get("GITHUB_ACTIONS") == "true" and found:
        click.echo(github_annotations(found))


def _quiet_libraries() -> None:
    # sqlglot warns on stderr when it falls back to a generic Command for statements lint
    # rejects anyway; the pool logs every failed connect, which `check` reports itself.
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)


# --- what several commands need -------------------------------------------------------------


def resolve_config(
    config_path: Path | None, dsn: str | None = None, invariants: Path | None = None
) -> Config:
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        fail(str(exc))
    updates: dict[str, Any] = {}
    if dsn:
        updates["dsn"] = checked_dsn(dsn, "--dsn / INVMON_DSN")
    if invariants:
        updates["invariants"] = invariants
    resolved = config.model_copy(update=updates)
    return resolved.without_unresolved("dsn") if dsn else resolved


def require(config: Config, *fields: str) -> None:
    """The fields this command needs must have their ${VAR}s set (Config.require)."""
    try:
        config.require(*fields)
    except ConfigError as exc:
        fail(str(exc))


def checked_dsn(dsn: str, where: str) -> str:
    try:
        check_dsn(dsn)
    except ValueError as exc:
        fail(f"{where}: {exc}")
    return dsn


def test_server_dsn(admin_dsn: str | None) -> str | None:
    """The server for scratch databases: --dsn, else INVMON_TEST_DSN, else None (a throwaway
    server is started); checked here so a malformed one is a sentence without its password."""
    if admin_dsn:
        return checked_dsn(admin_dsn, "--dsn")
    from_env = os.environ.get("INVMON_TEST_DSN")
    return checked_dsn(from_env, "INVMON_TEST_DSN") if from_env else None


def require_targets(config: Config, purpose: str) -> dict[str, Target]:
    """The targets; at least one must have a database (the others' invariants report why
    they could not run)."""
    targets = config.resolved_targets()
    if list(targets) == [DEFAULT_TARGET]:
        require_database(config, purpose)
    elif not any(t.dsn for t in targets.values()):
        fail(f"no database to {purpose}: no target has a dsn ({', '.join(sorted(targets))})")
    require_folder(config)
    return targets


def require_every_target(config: Config) -> None:
    """A daemon watches every target it is configured with: one without a DSN is a mistake
    in the config, refused at start with each such target named, not a quiet gap."""
    targets = config.resolved_targets()
    if list(targets) == [DEFAULT_TARGET]:
        require_database(config, "monitor")
        return
    missing = [config.no_dsn_reason(name) for name, t in sorted(targets.items()) if not t.dsn]
    if missing:
        fail("cannot start: " + "; ".join(missing))
    require_folder(config)


def require_database(config: Config, purpose: str) -> str:
    require(config, "dsn")
    if not config.dsn:
        fail(f"no database to {purpose}: pass --dsn, set INVMON_DSN, or set dsn in invmon.yaml")
    require_folder(config)
    return config.dsn


def require_folder(config: Config) -> None:
    if not config.invariants.is_dir():
        fail(f"invariants folder {str(config.invariants)!r} not found; pass --invariants DIR")


def read_schema(config: Config, schema_file: Path | None) -> str | None:
    return read_schema_file(schema_file or config.schema_path)


def read_schema_file(schema: Path | None) -> str | None:
    if schema is None:
        return None
    if not schema.is_file():
        fail(f"schema file {str(schema)!r} not found")
    return schema.read_text(encoding="utf-8")


def known_targets(config: Config, targets: Sequence[str]) -> None:
    """Every `--target` names a target of the config."""
    known = config.resolved_targets()
    unknown = sorted(set(targets) - set(known))
    if unknown:
        names = ", ".join(sorted(known))
        fail(f"no target named {', '.join(map(repr, unknown))}; targets: {names}")


def by_target(invariants: Sequence[Invariant]) -> dict[str, list[Invariant]]:
    groups: dict[str, list[Invariant]] = {}
    for inv in invariants:
        groups.setdefault(inv.target, []).append(inv)
    return groups


def selected_invariants(
    config: Config, selectors: Sequence[str], targets: Sequence[str] = ()
) -> list[Invariant]:
    """The selected invariants (all when none) of these targets (all when none), refusing
    to go on past an invalid file."""
    loaded = load_directory(config.invariants, config.loading(with_database=True))
    if loaded.errors:
        click.echo(problems_text(loaded.errors), err=True)
        fail("fix the invalid invariant files first (see `invmon lint`)")
    known_targets(config, targets)
    try:
        chosen = select(loaded.invariants, selectors, config.invariants)
    except NothingSelected as exc:
        fail(str(exc))
    return [i for i in chosen if not targets or i.target in targets]


def _store_where(config: Config) -> str:
    if config.state.dsn:
        from monitor.store.storage import server_address

        return f"state.dsn, {server_address(config.state.dsn)}"
    return f"state.path {str(config.state.path)!r}"


def open_store(config: Config, must_exist: bool = False, read_only: bool = False) -> StateStore:
    """The state store; `must_exist` for commands that use what `invmon run` stored,
    `read_only` for those that only look (a read-only file, a shared store not migrated)."""
    require(config, "state")
    from monitor.store.state import StateStore

    if must_exist and not config.state.dsn and not config.state.path.exists():
        fail(
            f"no state store at {str(config.state.path)!r}: run this where `invmon run` runs, "
            "or pass the same --config"
        )
    try:
        return StateStore.open(
            path=config.state.path,
            dsn=config.state.dsn,
            read_only=read_only,
            connect_timeout=config.database.connect_timeout.total_seconds(),
        )
    except Exception as exc:  # sqlite3 and psycopg errors alike: say where, not a traceback
        fail(f"cannot open the state store ({_store_where(config)}): {redact(str(exc))}")


def read_store(config: Config, reading: Callable[[StateStore], T]) -> T:
    """What a reading command needs from the store, or one sentence saying why not."""
    from monitor.store.store_health import STORE_ERRORS

    store = open_store(config, must_exist=True, read_only=True)
    try:
        return reading(store)
    except STORE_ERRORS as exc:
        fail(
            f"cannot read the state store ({_store_where(config)}): {redact(str(exc))}; "
            "see README, 'Recovering the state store'"
        )
    finally:
        store.close()


# --- the commands -------------------------------------------------------------------------


@click.group()
@click.version_option(__version__, prog_name="invmon")
def main() -> None:
    """invmon: invariants as SQL queries that return offending rows."""
    _quiet_libraries()


@main.command()
@CONFIG
@DSN
@INVARIANTS
@SELECT
@TARGETS
@click.option("--only", multiple=True, metavar="NAME", hidden=True)  # the old spelling
@output_format("table", "json", "markdown")
@click.option(
    "--counts-only",
    is_flag=True,
    help="Statuses and counts only: no row values and no database error text (which can "
    "quote data). For previews whose reader may not read the data.",
)
@click.option(
    "--show-values",
    is_flag=True,
    help="Print values that `redact:` would mask (emails, card numbers, …) as they are.",
)
@click.option(
    "--allow-privileged-role",
    is_flag=True,
    help="Run even as a role that can change the database (a superuser, an owner, …), e.g. "
    "your own on a development database. Without it such a target is refused, as by the "
    "daemon; deploy/readonly-role.sql makes a role that needs no such flag.",
)
def check(
    config_path: Path | None,
    dsn: str | None,
    invariants_dir: Path | None,
    selectors: tuple[str, ...],
    only: tuple[str, ...],
    fmt: str,
    counts_only: bool,
    show_values: bool,
    allow_privileged_role: bool,
    targets: tuple[str, ...],
) -> None:
    """Evaluate every invariant once and exit 0 (all hold), 1 (violated) or 2 (error)."""
    config = resolve_config(config_path, dsn, invariants_dir)
    require_targets(config, "check")
    known_targets(config, targets)
    if show_values:
        click.echo(
            "invmon: warning: --show-values prints offending rows unmasked; they may hold "
            "personal data",
            err=True,
        )
    try:
        outcome = run_check(
            config, config.invariants, selectors + only, show_values, targets, allow_privileged_role
        )
    except NothingSelected as exc:
        fail(str(exc))
    if counts_only:
        outcome = outcome.counts_only()
    if fmt == "json":
        document = results_document(
            outcome.results, outcome.invariants, outcome.problems, routes_of(config, outcome)
        )
        click.echo(to_json(document))
    elif fmt == "markdown":
        click.echo(results_markdown(outcome.results, outcome.problems))
    else:
        if outcome.problems:
            click.echo(problems_text(outcome.problems), err=True)
        click.echo(results_table(outcome.results))
    sys.exit(exit_code(outcome.results))


def routes_of(config: Config, outcome: CheckOutcome) -> dict[str, tuple[str, str]]:
    """Each checked invariant's Slack channel and the rule that chose it, as the daemon
    would route an incident it opened."""
    from alerts.routing import route
    from monitor.daemon.evaluation import context_of

    targets = config.resolved_targets()
    routes = {}
    for inv in outcome.invariants:
        chosen = route(config.slack, context_of(inv, targets.get(inv.target)))
        routes[inv.name] = (chosen.channel, chosen.why)
    return routes


@main.command()
@CONFIG
@DSN
@INVARIANTS
@click.option("--once", is_flag=True, help="Evaluate every invariant once, store it, and exit.")
def run(config_path: Path | None, dsn: str | None, invariants_dir: Path | None, once: bool) -> None:
    """Run the daemon: evaluate every invariant on its schedule until SIGTERM."""
    from monitor.daemon.daemon import Daemon
    from monitor.daemon.process import SignalLoop, Stopped
    from monitor.logs import setup_logging

    config = resolve_config(config_path, dsn, invariants_dir)
    require(config)  # a daemon starts with every reference set, or not at all
    setup_logging(config.log.format, config.log.level)
    require_every_target(config)
    if once:
        sys.exit(_run_once(config))
    signals = SignalLoop()
    # The handlers go in before anything slow (reaching the state store, loading and
    # vetting the invariants): a SIGTERM meanwhile stops cleanly, a SIGHUP waits its turn.
    with signals.installed():
        try:
            lock = _single_daemon_lock(config)
            logging.getLogger("invmon.daemon").info(
                "opening the state store (%s)", _store_where(config)
            )
            store = signals.wait_for(lambda: open_store(config), "reaching the state store")
        except Stopped as stopped:
            logging.getLogger("invmon.daemon").info("stopped before start, %s", stopped.doing)
            sys.exit(0)
        try:
            daemon = Daemon.build(config, config.dsn, store, signals=signals)
            code = daemon.serve(supervise=True)
        except OSError as exc:
            fail(f"cannot listen on http.listen {config.http.listen}: {exc.strerror or exc}")
        finally:
            store.close()
            if lock is not None:
                lock.close()
    if code != 0:
        # Runs still in flight past every bound: their threads would hold the interpreter's
        # exit (it joins the workers), so end here, the reason already logged.
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(code)
    sys.exit(code)


def _single_daemon_lock(config: Config) -> IO[str] | None:
    """A SQLite store serves one daemon: its lock file, held for the process's life."""
    if config.state.dsn:
        return None
    try:
        return hold_single_daemon(config.state.path)
    except StoreInUse as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot lock the state store {str(config.state.path)!r}: {exc.strerror}")


def _run_once(config: Config) -> int:
    """`run --once`: burst mode, every invariant once through the daemon's full path."""
    from monitor.daemon.daemon import Daemon

    lock = _single_daemon_lock(config)
    store = open_store(config)
    daemon = Daemon.build(config, config.dsn, store)
    try:
        change, results = daemon.run_once()
        return exit_code(results, load_failed=bool(change.invalid))
    finally:
        daemon.close()
        store.close()
        if lock is not None:
            lock.close()


@main.command()
@CONFIG
@TARGETS
@output_format("table", "json")
def status(config_path: Path | None, targets: tuple[str, ...], fmt: str) -> None:
    """Open incidents and each invariant's last run, from the state store."""
    config = resolve_config(config_path)
    known_targets(config, targets)
    since = utc_now() - timedelta(days=1)
    incidents, runs, closed = read_store(
        config, lambda s: (s.open_incidents(), s.latest_runs(), s.closed_since(since))
    )
    if targets:
        incidents = [i for i in incidents if i.target in targets]
        runs = [r for r in runs if r.target in targets]
        closed = [i for i in closed if i.target in targets]
    if fmt == "json":
        document = {
            "open_incidents": [as_document(i) for i in incidents],
            # Closed in the last day, each with its `state`: resolved, or retired (its
            # file removed while it was open).
            "closed_incidents": [as_document(i) for i in closed],
            "last_runs": [as_document(r) for r in runs],
        }
        click.echo(to_json(document))
        return
    click.echo(status_text(incidents, runs, closed))


@main.command()
@click.argument("name", required=False)
@CONFIG
@TARGETS
@click.option("--limit", default=20, show_default=True, help="How many runs and incidents.")
@output_format("table", "json")
def history(
    name: str | None, config_path: Path | None, targets: tuple[str, ...], limit: int, fmt: str
) -> None:
    """Recent runs and incidents of one invariant, or of every invariant of a target."""
    if name is None and not targets:
        fail("name an invariant, or a target with --target, to show its history")
    config = resolve_config(config_path)
    known_targets(config, targets)
    runs, incidents = read_store(
        config, lambda s: (s.runs(name, limit, targets), s.incidents(name, limit, targets))
    )
    title = name or f"target {', '.join(targets)}"
    if not runs and not incidents:
        what = repr(name) if name else title
        fail(f"no history for {what} in the state store; check the name with `invmon status`")
    if fmt == "json":
        document = {
            "invariant": name,
            "targets": list(targets),
            "runs": [as_document(r) for r in runs],
            "incidents": [as_document(i) for i in incidents],
        }
        click.echo(to_json(document))
        return
    click.echo(history_text(title, runs, incidents))


def _act(config_path: Path | None, incident: int, action: Action) -> None:
    """Record an ack/unack/snooze from the command line; the daemon updates Slack."""
    from alerts.alerter import record_action

    config = resolve_config(config_path)
    store = open_store(config, must_exist=True)
    try:
        outcome = record_action(store, config.slack, incident, action, "cli")
    finally:
        store.close()
    click.echo(outcome.message)
    if outcome.changed:
        click.echo("The alert in Slack is updated by the running daemon within seconds.")
    sys.exit(0 if outcome.changed else 1)


def _cli_action(kind: str, **details: Any) -> Action:
    user = getpass.getuser()
    return Action(kind, f"cli:{user}", user, **details)  # type: ignore[arg-type]


@main.command()
@click.argument("incident", type=int)
@click.option(
    "--until-resolved",
    "mode",
    flag_value="until_resolved",
    default=True,
    help="Silence reminders and change notices until it resolves (default).",
)
@click.option(
    "--until-new-rows",
    "mode",
    flag_value="until_new_rows",
    help="Silence them until a new offending row appears.",
)
@CONFIG
def ack(incident: int, mode: AckMode, config_path: Path | None) -> None:
    """Acknowledge an incident (for when Slack is down)."""
    _act(config_path, incident, _cli_action("ack", mode=mode))


@main.command()
@click.argument("incident", type=int)
@CONFIG
def unack(incident: int, config_path: Path | None) -> None:
    """Remove an incident's acknowledgement; reminders resume."""
    _act(config_path, incident, _cli_action("unack"))


@main.command()
@click.argument("incident", type=int)
@click.argument("duration")
@CONFIG
def snooze(incident: int, duration: str, config_path: Path | None) -> None:
    """Silence an incident's reminders and change notices for DURATION (e.g. 4h)."""
    try:
        length = parse_duration(duration)
    except ValueError as exc:
        fail(str(exc))
    _act(config_path, incident, _cli_action("snooze", snooze_for=length))


@main.command()
@click.argument("name")
@CONFIG
def unquarantine(name: str, config_path: Path | None) -> None:
    """Schedule again an invariant quarantined for overrunning its timeout."""
    from monitor.clock import utc_now

    config = resolve_config(config_path)
    store = open_store(config, must_exist=True)
    try:
        lifted = store.lift_quarantine(
            name, f"lifted by {getpass.getuser()} (command line)", utc_now()
        )
    finally:
        store.close()
    if lifted is None:
        fail(f"{name!r} is not quarantined; `invmon status` lists open incidents")
    click.echo(f"{name} is scheduled again: every daemon sharing this store runs it.")


@main.command()
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
) -> None:
    """Planner cost of each invariant; exit 1 when one is over its max_cost."""
    from monitor.authoring.explain import Explained, explain_all, explain_document, explain_text
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


@main.command(name="test")
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
    from monitor.authoring.case_report import findings, junit_cases, report_document, report_text
    from monitor.authoring.pgtemp import SchemaLoadError
    from monitor.authoring.tester import run_fixtures

    config = resolve_config(config_path, None, invariants_dir)
    server = test_server_dsn(admin_dsn)
    schema_path = schema_file or config.schema_path

    def once(only: set[str] | None = None) -> int:
        selected = selected_invariants(config, names + selectors, targets)
        if only is not None:
            selected = [i for i in selected if i.name in only]
        reports = []
        known = config.resolved_targets()
        refuse_without_schema(selected, {n: schema_file or t.schema_path for n, t in known.items()})
        # Each target's cases run in a scratch database made from its own schema file.
        for name, group in sorted(by_target(selected).items()):
            schema = schema_file or known[name].schema_path
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


@main.command()
@click.argument("directory", default=".", type=click.Path(path_type=Path, file_okay=False))
def init(directory: Path) -> None:
    """Start a repository of invariants: config, schema placeholder, an example invariant
    with its cases, the PR workflow, its check script, PR template and CODEOWNERS."""
    from monitor.authoring.scaffold import invmon_source, repository
    from monitor.cli.demo import shipped_folder

    kit = shipped_folder("deploy/ci", "monitor.ci_kit")
    has_invariants = any((directory / "invariants").rglob("*.sql"))
    write_planned(directory, repository(kit, invmon_source(), has_invariants))
    click.echo(
        "\nNext: put the production schema in db/schema.sql (the command is in the file), "
        "then `invmon lint` and `invmon test`; `invmon new NAME` starts the next invariant."
    )


@main.command()
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
    from monitor.authoring.scaffold import new_invariant
    from monitor.authoring.schema_check import load_schema

    config = resolve_config(config_path, None, invariants_dir)
    schema_sql = read_schema(config, schema_file)
    tables = load_schema(schema_sql) if schema_sql else {}
    if table is not None and table not in tables:
        known = ", ".join(sorted(t for t in tables if not t.startswith("public."))) or (
            "none (no schema file)"
        )
        fail(f"--table {table!r} is not in the schema; tables: {known}")
    write_planned(config.invariants, new_invariant(name, table, tables))


@main.command()
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
    for path in {
        schema_file or config.schema_path,
        *(t.schema_path for t in config.resolved_targets().values()),
    }:
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


@main.command()
@click.option(
    "--dsn",
    "admin_dsn",
    help="Use this server (a scratch database is created and dropped) "
    "instead of starting a throwaway one.",
)
def demo(admin_dsn: str | None) -> None:
    """Start a throwaway PostgreSQL with planted violations and run every shipped invariant."""
    from monitor.cli.demo import run_demo

    server = checked_dsn(admin_dsn, "--dsn") if admin_dsn else None
    try:
        code = run_demo(server, click.echo)
    except psycopg.Error as exc:
        fail(f"cannot use the server: {redact(describe_error(exc))}")
    sys.exit(code)


if __name__ == "__main__":
    main()
