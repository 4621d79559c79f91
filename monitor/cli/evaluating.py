"""`invmon check`: every invariant once, printed (`invmon run`, the daemon, is running.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from monitor.cli.options import (
    ALLOW_PRIVILEGED_ROLE,
    CONFIG,
    DSN,
    INVARIANTS,
    SELECT,
    TABLE_ALIAS,
    TARGETS,
    fail,
    output_format,
)
from monitor.cli.render import (
    problems_text,
    results_document,
    results_markdown,
    results_table,
    to_json,
)
from monitor.cli.resolving import known_targets, require_targets, resolve_config
from monitor.config import Config
from monitor.execution.check import CheckOutcome, run_check
from monitor.execution.results import exit_code
from monitor.invariants.selection import NothingSelected


@click.command()
@CONFIG
@DSN
@INVARIANTS
@SELECT
@TARGETS
@click.option("--only", multiple=True, metavar="NAME", hidden=True)  # the old spelling
@output_format("text", "json", "markdown", aliases=TABLE_ALIAS)
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
@ALLOW_PRIVILEGED_ROLE
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
    from monitor.store.context import IncidentContext

    targets = config.resolved_targets()
    routes = {}
    for inv in outcome.invariants:
        # As monitor.daemon.evaluation.context_of says it, without loading the daemon (its
        # scheduler and metrics) into a one-shot `check`.
        context = IncidentContext.of(inv.header, inv.severity, inv.target, targets.get(inv.target))
        chosen = route(config.slack, context)
        routes[inv.name] = (chosen.channel, chosen.why)
    return routes
