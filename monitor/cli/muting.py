"""Maintenance: `mute`, `unmute` and `mutes`. A mute is stored in the state store, so every
daemon sharing it honours it from its next alerts turn (monitor/store/mutes.py)."""

from __future__ import annotations

import getpass
import json
from datetime import UTC, datetime
from pathlib import Path

import click

from monitor.cli.options import CONFIG, STORE_ID, fail, output_format
from monitor.cli.resolving import known_targets, open_store, resolve_config
from monitor.clock import shown, stamp, utc_now
from monitor.config import Config
from monitor.durations import parse_duration
from monitor.invariants.loader import load_directory, name_for
from monitor.invariants.selection import name_matches, selector_name
from monitor.store.mute_table import MuteTable
from monitor.store.mutes import Mute, MuteRefused, checked


def parse_time(text: str, flag: str) -> datetime:
    """An ISO 8601 time (`2026-12-02T18:00`, `…Z`, `…+01:00`); UTC when it has no offset."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        fail(f"{flag} {text!r} is not a time; write it like 2026-12-02T18:00Z")
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _names(config: Config, selector: str) -> str:
    """The selector as stored: a folder written without its slash gains it; one that
    matches no invariant file is refused (a typo would otherwise mute nothing, quietly)."""
    wanted = selector_name(selector, config.invariants)
    if (config.invariants / wanted).is_dir():
        wanted = wanted.rstrip("/") + "/"
    loaded = load_directory(config.invariants, config.loading(with_database=False))
    broken = {name_for(p, config.invariants) for p in loaded.failed_paths() if p.suffix == ".sql"}
    names = sorted({i.name for i in loaded.invariants} | broken)
    if not any(name_matches(n, (), wanted, config.invariants) for n in names):
        listed = ", ".join(names[:20]) or "none"
        fail(
            f"mute {selector!r} matches no invariant in {str(config.invariants)!r}; names: {listed}"
        )
    return wanted


@click.command()
@click.argument("selector", required=False)
@click.option("--target", help="Mute this target's invariants (with SELECTOR: only those).")
@click.option("--for", "length", help="How long, from --from: 30m, 2h, 1d.")
@click.option("--until", "until", help="When it ends (ISO 8601; UTC without an offset).")
@click.option("--from", "start", help="When it starts (default: now).")
@click.option("--reason", required=True, help="Why: shown beside every muted incident.")
@click.option("--all", "everything", is_flag=True, help="Mute every invariant of every target.")
@CONFIG
def mute(
    selector: str | None,
    target: str | None,
    length: str | None,
    until: str | None,
    start: str | None,
    reason: str,
    everything: bool,
    config_path: Path | None,
) -> None:
    """Silence notifications for planned work: SELECTOR is a name, a folder/ or a glob.
    Runs and incidents are still recorded; what is still open when it ends posts once."""
    config = resolve_config(config_path)
    now = utc_now()
    starts = parse_time(start, "--from") if start else now
    if (length is None) == (until is None):
        fail("say how long with one of --for DURATION or --until TIME")
    if length is not None:
        try:
            ends = starts + parse_duration(length)
        except ValueError as exc:
            fail(f"--for: {exc}")
        except OverflowError:
            fail(f"--for: {length} from {shown(starts)} ends after the year 9999")
    else:
        assert until is not None
        ends = parse_time(until, "--until")
    if target is not None:
        known_targets(config, (target,))
    names = _names(config, selector) if selector not in (None, "", "*") else None
    try:
        names, why = checked(names, target, starts, ends, reason, everything, now)
    except MuteRefused as exc:
        fail(str(exc))
    store = open_store(config, must_exist=True)
    try:
        added = MuteTable(store.storage).add(
            names, target, starts, ends, why, f"{getpass.getuser()} (command line)", now
        )
    finally:
        store.close()
    when = "from " + shown(starts) + " " if starts > now else ""
    click.echo(
        f"muted {added.what} {when}until {shown(added.ends)} (mute #{added.id}): {why}; "
        "`invmon unmute " + str(added.id) + "` ends it early"
    )


@click.command()
@click.argument("mute_id", metavar="ID", type=STORE_ID)
@CONFIG
def unmute(mute_id: int, config_path: Path | None) -> None:
    """End mute ID now: what it held that is still open posts once."""
    config = resolve_config(config_path)
    store = open_store(config, must_exist=True)
    try:
        ended = MuteTable(store.storage).end(mute_id, utc_now())
    finally:
        store.close()
    if ended is None:
        fail(f"there is no mute #{mute_id}; `invmon mutes` lists them")
    click.echo(f"mute #{ended.id} of {ended.what} ended at {shown(ended.ends)}")


def mute_document(m: Mute, now: datetime) -> dict[str, object]:
    return {
        "id": m.id,
        "state": m.state(now),
        "selector": m.selector,
        "target": m.target,
        "starts_at": stamp(m.starts_at),
        "ends_at": stamp(m.ends),
        "reason": m.reason,
        "created_by": m.created_by,
        "created_at": stamp(m.created_at),
    }


def mute_line(m: Mute, now: datetime) -> str:
    span = f"{shown(m.starts_at)} → {shown(m.ends)}"
    return f"#{m.id}  {m.state(now):<9}  {m.what}  {span}  {m.reason}  ({m.created_by})"


@click.command()
@click.option("--ended", is_flag=True, help="Also list mutes that have ended.")
@CONFIG
@output_format("text", "json")
def mutes(ended: bool, config_path: Path | None, fmt: str) -> None:
    """The mutes active or scheduled (newest first)."""
    config = resolve_config(config_path)
    store = open_store(config, must_exist=True, read_only=True)
    now = utc_now()
    try:
        listed = MuteTable(store.storage).listed(now, include_ended=ended)
    finally:
        store.close()
    if fmt == "json":
        click.echo(json.dumps({"mutes": [mute_document(m, now) for m in listed]}, indent=2))
    elif not listed:
        click.echo("no mutes" + ("" if ended else " active or scheduled"))
    else:
        for m in listed:
            click.echo(mute_line(m, now))
