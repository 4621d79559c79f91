"""Mutes end to end: set with `invmon mute` on one daemon's store, honoured by every daemon
of a fleet sharing it (PostgreSQL), against the fake Slack Web API, on a clock the test
holds. While muted, runs and incidents are recorded and listed and nothing notifies; when
the mute ends, what is still open posts once."""

from __future__ import annotations

import getpass
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from builders import build_daemon, config_file, daemon_config, quick_slack
from fake_slack import FakeSlack
from helpers import PRIVILEGED_YAML, FakeClock, cli, items_table, sql
from scenario import INVARIANT, World, deliver_together, settle

from monitor.authoring.pgtemp import scratch_database
from monitor.config import HttpConfig
from monitor.daemon.daemon import Daemon
from monitor.store.state import StateStore
from monitor.web.page import StatusPage

HOUR = 3600


@dataclass
class Fleet:
    world: World
    state_dsn: str  # the PostgreSQL store every daemon shares


@pytest.fixture
def fleet_world(database: str, admin_dsn: str, tmp_path: Path) -> Iterator[Fleet]:
    items_table(database)
    folder = tmp_path / "invariants"
    (folder / "orders").mkdir(parents=True)
    (folder / "bad_items.sql").write_text(INVARIANT)
    (folder / "orders" / "other.sql").write_text(
        "-- description: nothing\n-- key: [one]\nSELECT 1 AS one WHERE false\n"
    )
    with scratch_database(admin_dsn, prefix="invmon_state") as state:
        store = StateStore.open(dsn=state)
        try:
            yield Fleet(World(database, folder, store, FakeClock()), state)
        finally:
            store.close()


def operator_config(fleet: Fleet, home: Path) -> Path:
    """The config an operator's `invmon mute` reads: the fleet's store and folder."""
    home.mkdir(exist_ok=True)
    written: Path = config_file(home, invariants=fleet.world.folder, state={"dsn": fleet.state_dsn})
    return written


def mute_cli(config: Path, *args: str) -> tuple[int, str]:
    done = cli(*args, "--config", str(config))
    return done.returncode, (done.stdout + done.stderr).strip()


def fleet(of: Fleet, fake: FakeSlack, n: int) -> tuple[list[Daemon], list[StateStore]]:
    world = of.world
    stores = [StateStore.open(dsn=of.state_dsn) for _ in range(n)]
    config = daemon_config(world.folder, slack=quick_slack(fake))
    daemons = [build_daemon(config, world.dsn, s, world.clock, call_timeout=0.3) for s in stores]
    for daemon in daemons:
        daemon.reload()
    return daemons, stores


def quiet_rounds(world: World, daemons: list[Daemon], rounds: int = 5) -> None:
    for _ in range(rounds):
        deliver_together(daemons, 2)
        world.clock.advance(5)


def test_a_mute_set_once_silences_every_daemon_and_what_is_open_posts_once_at_its_end(
    fleet_world: Fleet, tmp_path: Path
) -> None:
    world = fleet_world.world
    config = operator_config(fleet_world, tmp_path / "ops")
    code, said = mute_cli(config, "mute", "bad_items", "--for", "1h", "--reason", "failover")
    assert code == 0, said
    assert said.startswith("muted bad_items until ") and "(mute #1): failover" in said
    world.clock.advance(2)  # the CLI stamps wall time; the daemons' clock is the test's
    with FakeSlack(clock=world.clock) as fake:
        daemons, stores = fleet(fleet_world, fake, 3)
        try:
            sql(world.dsn, "UPDATE items SET bad = id IN (1, 2)")
            assert daemons[1].evaluate("bad_items") is not None
            quiet_rounds(world, daemons)
            sql(world.dsn, "UPDATE items SET bad = id IN (1, 2, 3)")  # a change while muted
            world.clock.advance(60)
            assert daemons[2].evaluate("bad_items") is not None
            quiet_rounds(world, daemons)
            assert (fake.messages, fake.files) == ([], {})
            # Recorded and listed as ever, muted or not.
            [incident] = world.store.open_incidents()
            assert (incident.invariant, incident.last_count) == ("bad_items", 3)
            status = cli("status", "--format", "json", "--config", str(config))
            listed = json.loads(status.stdout)
            assert [(i["invariant"], i["muted_by"]) for i in listed["open_incidents"]] == [
                ("bad_items", 1)
            ]
            assert [(m["id"], m["state"], m["selector"]) for m in listed["mutes"]] == [
                (1, "active", "bad_items")
            ]
            shown = cli("status", "--config", str(config)).stdout.splitlines()
            [row] = [line for line in shown if line.startswith("#") and "bad_items" in line]
            assert row.split("  ")[-1].strip() == "muted (#1)", row
            page = StatusPage(world.store, lambda: daemons[0].invariants, HttpConfig(), world.clock)
            front = page("GET", "/", "", {})
            assert front is not None and front.status == 200
            [muted] = re.findall(
                r'<h2 id="mutes-h">Muted</h2>.*?<li>(.*?)</li>', front.body.decode(), re.S
            )
            assert muted.startswith("#1 bad_items, until ")
            assert muted.endswith(": failover (set by " + getpass.getuser() + " (command line))")
            metrics = [d.metrics.render().decode() for d in daemons]
            assert ["invmon_mutes_active 1.0" in m for m in metrics] == [True, True, True]
            world.clock.advance(HOUR)  # past the mute's end
            quiet_rounds(world, daemons)
            for daemon in daemons:
                settle(daemon, world.clock, "after the mute")
            [root] = fake.roots()
            assert root.blocks[0]["text"]["text"].startswith("🔴 CRITICAL · bad_items")
            assert root.text == "🔴 CRITICAL · bad_items violated: 3 offending rows"
            assert [bool(m.files) for m in fake.thread(root)] == [True]  # its CSV, no reply
            quiet_rounds(world, daemons)
            assert len(fake.messages) == 2  # root and CSV, once
            assert "invmon_mutes_active 0.0" in daemons[0].metrics.render().decode()
        finally:
            for daemon in daemons:
                daemon.close()
            for store in stores:
                store.close()


def test_a_posted_incident_is_edited_silently_while_muted_and_replied_to_once_at_the_end(
    fleet_world: Fleet, tmp_path: Path
) -> None:
    world = fleet_world.world
    with FakeSlack(clock=world.clock) as fake:
        daemons, stores = fleet(fleet_world, fake, 2)
        try:
            sql(world.dsn, "UPDATE items SET bad = id IN (1, 2)")
            daemons[0].evaluate("bad_items")
            settle(daemons[0], world.clock, "the opening")
            [root] = fake.roots()
            before = (len(fake.messages), root.updates)
            config = operator_config(fleet_world, tmp_path / "ops")
            code, said = mute_cli(config, "mute", "--all", "--for", "1h", "--reason", "upgrade")
            assert code == 0, said
            assert said.startswith("muted every invariant until ")
            world.clock.advance(2)
            sql(world.dsn, "UPDATE items SET bad = id IN (2, 3, 4)")
            world.clock.advance(60)
            daemons[1].evaluate("bad_items")
            quiet_rounds(world, daemons)
            assert len(fake.messages) == before[0]  # no reply while muted
            assert root.updates > before[1]  # but the root shows the rows it has now
            assert root.text == "🔴 CRITICAL · bad_items violated: 3 offending rows"
            world.clock.advance(HOUR)
            quiet_rounds(world, daemons)
            replies = [m.text for m in fake.thread(root) if not m.files]
            assert replies == [
                "🔔 Mute #1 (upgrade) ended: this is still open with 3 offending rows. Nothing "
                "was posted about it while it was muted; the message above shows it now."
            ]
        finally:
            for daemon in daemons:
                daemon.close()
            for store in stores:
                store.close()


def test_an_incident_that_opens_and_resolves_while_muted_is_recorded_and_never_posted(
    fleet_world: Fleet, tmp_path: Path
) -> None:
    world = fleet_world.world
    config = operator_config(fleet_world, tmp_path / "ops")
    code, said = mute_cli(config, "mute", "--target", "default", "--for", "1h", "--reason", "x")
    assert code == 0, said
    world.clock.advance(2)
    with FakeSlack(clock=world.clock) as fake:
        daemons, stores = fleet(fleet_world, fake, 1)
        try:
            sql(world.dsn, "UPDATE items SET bad = id = 1")
            daemons[0].evaluate("bad_items")
            quiet_rounds(world, daemons)
            sql(world.dsn, "UPDATE items SET bad = false")
            world.clock.advance(60)
            daemons[0].evaluate("bad_items")
            world.clock.advance(HOUR)
            quiet_rounds(world, daemons)
            assert fake.messages == []
            [closed] = world.store.incidents("bad_items")
            assert closed.resolved_at is not None
        finally:
            daemons[0].close()
            stores[0].close()


def test_the_command_line_refuses_what_cannot_be_meant_and_lists_mutes(
    fleet_world: Fleet, tmp_path: Path
) -> None:
    world = fleet_world.world
    config = operator_config(fleet_world, tmp_path / "ops")
    refusals = {
        (
            "mute",
            "--for",
            "1h",
            "--reason",
            "r",
        ): "this mute would silence every invariant on every target: pass --all to mean it",
        ("mute", "bad_itemz", "--for", "1h", "--reason", "r"): "mute 'bad_itemz' matches no "
        f"invariant in '{world.folder}'; names: bad_items, orders/other",
        ("mute", "bad_items", "--reason", "r"): "say how long with one of --for DURATION or "
        "--until TIME",
        ("mute", "bad_items", "--until", "tomorrow", "--reason", "r"): "--until 'tomorrow' is "
        "not a time; write it like 2026-12-02T18:00Z",
        ("mute", "--target", "nope", "--for", "1h", "--reason", "r"): "no target named 'nope'; "
        "targets: default",
        ("unmute", "42"): "there is no mute #42; `invmon mutes` lists them",
    }
    for args, refusal in refusals.items():
        assert mute_cli(config, *args) == (2, f"invmon: {refusal}"), args
    code, said = mute_cli(config, "mute", "orders", "--for", "2h", "--reason", "reindex")
    assert code == 0 and said.startswith("muted orders/ until "), said
    code, listed = mute_cli(config, "mutes", "--format", "json")
    [shown] = json.loads(listed)["mutes"]
    assert {k: shown[k] for k in ("id", "state", "selector", "target", "reason")} == {
        "id": 1,
        "state": "active",
        "selector": "orders/",
        "target": None,
        "reason": "reindex",
    }
    assert shown["created_by"].endswith(" (command line)")
    code, said = mute_cli(config, "unmute", "1")
    assert (code, said.split(" ended at ")[0]) == (0, "mute #1 of orders/")
    assert mute_cli(config, "mutes") == (0, "no mutes active or scheduled")
    assert mute_cli(config, "mutes", "--ended", "--format", "json")[0] == 0


def test_snooze_by_name_points_to_mute(tmp_path: Path) -> None:
    (tmp_path / "invmon.yaml").write_text(PRIVILEGED_YAML)
    done = cli("snooze", "orders/paid_twice", "2h", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "invmon: snooze takes an open incident's number (see `invmon status`); to silence "
        "an invariant for planned work: invmon mute orders/paid_twice --for 2h --reason …"
    )
