"""What on-call runs: `status`, `history`, `ack`, `unack`, `snooze`, `unquarantine`."""

from __future__ import annotations

import getpass
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from monitor.cli.muting import mute_document, mute_line
from monitor.cli.options import CONFIG, STORE_ID, TABLE_ALIAS, TARGETS, fail, output_format
from monitor.cli.render import (
    history_text,
    status_text,
    to_json,
)
from monitor.cli.resolving import known_targets, open_store, read_store, resolve_config
from monitor.clock import utc_now
from monitor.config import AckMode
from monitor.durations import parse_duration
from monitor.store.acks import CLI_ACTOR, Action
from monitor.store.records import as_document

if TYPE_CHECKING:
    from monitor.store.mutes import Mute
    from monitor.store.state import StateStore


@click.command()
@CONFIG
@TARGETS
@output_format("text", "json", aliases=TABLE_ALIAS)
def status(config_path: Path | None, targets: tuple[str, ...], fmt: str) -> None:
    """Open incidents and each invariant's last run, from the state store."""
    config = resolve_config(config_path)
    known_targets(config, targets)
    now = utc_now()
    since = now - timedelta(days=1)

    def mutes_of(store: StateStore) -> list[Mute]:
        from monitor.store.mute_table import MuteTable

        table = MuteTable(store.storage)
        return table.listed(now) if table.kept() else []

    incidents, runs, closed, mutes, retired = read_store(
        config,
        lambda s: (
            s.open_incidents(),
            s.latest_runs(),
            s.closed_since(since),
            mutes_of(s),
            s.retired(),
        ),
    )
    # A removed invariant's last run is no current result: a reviewer saw one listed as
    # "❌ violated" after its file was gone (the page and /metrics drop it).
    runs = [r for r in runs if r.invariant not in retired]
    if targets:
        incidents = [i for i in incidents if i.target in targets]
        runs = [r for r in runs if r.target in targets]
        closed = [i for i in closed if i.target in targets]
    from monitor.store.mutes import muting

    # Each open incident's mute, as the alerts turn would find it now.
    muted = {i.id: m for i in incidents if (m := muting(mutes, i.invariant, i.target, now))}
    if fmt == "json":
        document = {
            # `muted_by`: the id of the mute that holds its notifications, or null.
            "open_incidents": [
                {**as_document(i), "muted_by": m.id if (m := muted.get(i.id)) else None}
                for i in incidents
            ],
            # Closed in the last day, each with its `state`: resolved, or retired (its
            # file removed while it was open).
            "closed_incidents": [as_document(i) for i in closed],
            "last_runs": [as_document(r) for r in runs],
            # Active and scheduled: their incidents are recorded and listed above, and
            # post once the mute ends.
            "mutes": [mute_document(m, now) for m in mutes],
        }
        click.echo(to_json(document))
        return
    click.echo(status_text(incidents, runs, closed, muted))
    if mutes:
        click.echo("\nMutes (notifications wait; runs and incidents are recorded):")
        for m in mutes:
            click.echo("  " + mute_line(m, now))


@click.command()
@click.argument("name", required=False)
@CONFIG
@TARGETS
@click.option("--limit", default=20, show_default=True, help="How many runs and incidents.")
@output_format("text", "json", aliases=TABLE_ALIAS)
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


UPDATED_BY_THE_DAEMON = (
    "Recorded in the state store. The running daemon updates the alert within seconds, "
    "where it delivers alerts: in Slack, or on its standard output (its journal or "
    "container log) if it has no slack.token."
)


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
        # Said of the daemon, which this shell cannot see: its token is often in its own
        # environment only (a systemd EnvironmentFile), and it may not be running at all.
        click.echo(UPDATED_BY_THE_DAEMON)
    sys.exit(0 if outcome.changed else 1)


def _cli_action(kind: str, **details: Any) -> Action:
    user = getpass.getuser()
    return Action(kind, f"{CLI_ACTOR}{user}", user, **details)  # type: ignore[arg-type]


@click.command()
@click.argument("incident", type=STORE_ID)
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


@click.command()
@click.argument("incident", type=STORE_ID)
@CONFIG
def unack(incident: int, config_path: Path | None) -> None:
    """Remove an incident's acknowledgement; reminders resume."""
    _act(config_path, incident, _cli_action("unack"))


@click.command()
@click.argument("incident")
@click.argument("duration")
@CONFIG
def snooze(incident: str, duration: str, config_path: Path | None) -> None:
    """Silence an open incident's reminders and change notices for DURATION (e.g. 4h).
    For planned work on an invariant, a folder or a target, see `invmon mute`."""
    if incident.isdigit() and not 0 < int(incident) < 2**63:
        fail(f"there is no incident #{incident}; `invmon status` lists the open ones")
    if not incident.isdigit():
        fail(
            "snooze takes an open incident's number (see `invmon status`); to silence an "
            f"invariant for planned work: invmon mute {incident} --for {duration} --reason …"
        )
    try:
        length = parse_duration(duration)
    except ValueError as exc:
        fail(str(exc))
    _act(config_path, int(incident), _cli_action("snooze", snooze_for=length))


@click.command()
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
