"""Routes and labels that do what they say: the channel an alert goes to is the one the
documented precedence picks, the log line and `check --format json` say which rule picked
it, and with several databases every message names its own."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from builders import config_file
from fake_slack import FakeSlack
from helpers import CHECK, PRIVILEGED, cli
from scenario import World, script, settle

CHANNELS = {
    "C0INVARIANTS": "invariants",
    "C0INCIDENTS": "incidents",
    "C0PAYALERTS": "payments-alerts",
}

SHOP = """\
-- description: No item is marked bad.
-- severity: critical
-- target: shop
-- key: [id]
SELECT id, note FROM items WHERE bad
"""


def test_a_severity_route_outranks_the_targets_channel(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """The target's `channel:` is a default: a critical alert of a target whose channel is
    #payments-alerts goes where `slack.routes.severity.critical` says, and the log line of
    its opening names the channel and the rule."""
    (world.folder / "bad_items.sql").write_text(SHOP)
    caplog.set_level(logging.WARNING, logger="invmon.daemon")
    with FakeSlack(clock=world.clock, channels=CHANNELS) as fake:
        daemon = world.daemon(
            fake,
            targets={"shop": {"dsn": world.dsn, "channel": "#payments-alerts"}},
            routes={"severity": {"critical": "#incidents"}},
        )
        script(world, daemon, 0)
        settle(daemon, world.clock, "opened")
        daemon.databases.close()
    assert [m.channel for m in fake.roots()] == ["C0INCIDENTS"]
    opened = [r for r in caplog.records if r.getMessage() == "event opened: bad_items"]
    assert [(r.fields["channel"], r.fields["route"]) for r in opened] == [  # type: ignore[attr-defined]
        ("#incidents", "slack.routes.severity critical")
    ]


def test_without_a_route_the_targets_channel_is_taken(world: World) -> None:
    (world.folder / "bad_items.sql").write_text(SHOP)
    with FakeSlack(clock=world.clock, channels=CHANNELS) as fake:
        daemon = world.daemon(
            fake,
            targets={"shop": {"dsn": world.dsn, "channel": "#payments-alerts"}},
            routes={"severity": {"warning": "#incidents"}},
        )
        script(world, daemon, 0)
        settle(daemon, world.clock, "opened")
        daemon.databases.close()
    assert [m.channel for m in fake.roots()] == ["C0PAYALERTS"]


def test_with_several_targets_the_default_targets_alert_names_its_database(
    world: World,
) -> None:
    """`bad_items` runs on the `default` target; with `shop` configured beside it, a reader
    must still be able to tell which database the alert is about."""
    with FakeSlack(clock=world.clock, channels=CHANNELS) as fake:
        daemon = world.daemon(fake, targets={"shop": {"dsn": world.dsn}})
        script(world, daemon, 0)
        settle(daemon, world.clock, "opened")
        daemon.databases.close()
    [root] = fake.roots()
    [fields] = [b["fields"] for b in root.blocks if "fields" in b]
    assert {"type": "mrkdwn", "text": "*Database*\ndefault"} in fields
    footer = root.blocks[-1]["elements"][0]["text"]
    assert footer.startswith("incident #") and " · database default" in footer


def test_with_one_target_no_database_is_named(world: World) -> None:
    with FakeSlack(clock=world.clock, channels=CHANNELS) as fake:
        daemon = world.daemon(fake)
        script(world, daemon, 0)
        settle(daemon, world.clock, "opened")
        daemon.databases.close()
    [root] = fake.roots()
    assert "Database" not in json.dumps(root.blocks)
    assert "database default" not in json.dumps(root.blocks)


def test_check_json_says_where_each_invariant_would_alert_and_why(
    tmp_path: Path, database: str
) -> None:
    folder = tmp_path / "invariants"
    folder.mkdir()
    body = "-- key: [n]\nSELECT 1 AS n WHERE false\n"
    files = {
        "own.sql": "-- description: d\n-- channel: '#own'\n-- owner: '@payments'\n",
        "owned.sql": "-- description: d\n-- owner: '@payments'\n-- severity: critical\n",
        "critical.sql": "-- description: d\n-- severity: critical\n",
        "shop.sql": "-- description: d\n-- target: shop\n",
        "plain.sql": "-- description: d\n",
    }
    for name, head in files.items():
        (folder / name).write_text(head + body)
    rules = {"owner": {"@payments": "#payments"}, "severity": {"critical": "#incidents"}}
    config_file(
        tmp_path,
        database=PRIVILEGED,
        dsn=database,
        targets={"shop": {"dsn": database, "channel": "#shop"}},
        slack={"channel": "#invariants", "routes": rules},
    )
    ran = cli(*CHECK, "--format", "json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    routes = {r["invariant"]: (r["channel"], r["route"]) for r in json.loads(ran.stdout)["results"]}
    assert routes == {
        "own": ("#own", "the file's channel:"),
        "owned": ("#payments", "slack.routes.owner @payments"),
        "critical": ("#incidents", "slack.routes.severity critical"),
        "shop": ("#shop", "targets.shop.channel"),
        "plain": ("#invariants", "slack.channel"),
    }
