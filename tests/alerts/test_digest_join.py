"""A burst is one digest: an opening that arrives while its channel's digest is recent
(`slack.digest_group_interval`) joins it. The digest is edited in place to list it and its
own message goes in the digest's thread, even when it opened in the same tick as the
others but was planned one alerts round later (issue 27, section 5). Real PostgreSQL state
store, the fake Slack Web API, a clock the test moves."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fake_slack import FakeSlack
from fake_slack import Message as Posted
from helpers import items_table
from scenario import World, deliver_together, postgres_world, settle

from monitor.daemon.daemon import Daemon

BURST = 7


@pytest.fixture
def pg_world(database: str, admin_dsn: str, tmp_path: Path) -> Iterator[World]:
    """Seven invariants that all offend, their state in a PostgreSQL store of this test."""
    items_table(database, rows=BURST)
    folder = tmp_path / "invariants"
    folder.mkdir()
    for n in range(BURST):
        (folder / f"burst_{n}.sql").write_text(
            f"-- description: burst {n}\n-- key: [id]\nSELECT id FROM items WHERE id <= {n + 1}\n"
        )
    with postgres_world(database, folder, admin_dsn) as world:
        yield world


def listed(message: Posted) -> list[str]:
    """The incident lines of a digest, as its blocks show them now."""
    text = "\n".join(
        b["text"]["text"] for b in message.blocks if b["type"] == "section" and "text" in b
    )
    return [line for line in text.splitlines() if line.startswith("• ")]


def first_burst(world: World, daemon: Daemon, fake: FakeSlack) -> Posted:
    """Six of the seven open and are planned: the threshold (5) is reached, so the batch
    goes at once, before the seventh's run has written its event."""
    for n in range(BURST - 1):
        daemon.evaluate(f"burst_{n}")
    daemon.deliver()
    settle(daemon, world.clock, "the first six")
    [digest] = fake.roots()
    assert digest.blocks[0]["text"]["text"] == "🚨 6 incidents opened at once"
    return digest


def assert_one_digest_of_seven(fake: FakeSlack, digest: Posted, title: str) -> None:
    assert fake.roots() == [digest]  # no stand-alone root
    assert digest.blocks[0]["text"]["text"] == title
    assert len(listed(digest)) == BURST
    assert sorted(line.split(" · ")[1].split(" ")[0] for line in listed(digest)) == [
        f"burst_{n}" for n in range(BURST)
    ]
    thread = fake.thread(digest)
    details = [m for m in thread if not m.files]
    assert len(details) == BURST
    assert sorted(m.text.split(" · ")[1].split(" ")[0] for m in details) == [
        f"burst_{n}" for n in range(BURST)
    ]
    assert len([m for m in thread if m.files]) == BURST


def test_an_opening_planned_a_round_after_its_burst_joins_the_digest(pg_world: World) -> None:
    world = pg_world
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake, digest_threshold=5)
        digest = first_burst(world, daemon, fake)
        assert digest.updates == 0
        # The seventh opened in the same tick; its event is planned one round later.
        daemon.evaluate(f"burst_{BURST - 1}")
        settle(daemon, world.clock, "the seventh")
        daemon.databases.close()
    assert_one_digest_of_seven(fake, digest, "🚨 7 incidents opened at once")
    assert digest.updates == 1  # edited in place, once
    [row] = [d for d in daemon.alerter.ledger.all() if d.action == "post_digest"]
    opened = sorted(i.id for i in world.store.open_incidents())
    assert len(opened) == BURST
    assert row.payload["incidents"] == opened


def test_a_later_opening_within_the_group_interval_joins_and_the_title_says_so(
    pg_world: World,
) -> None:
    world = pg_world
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake, digest_threshold=5, digest_group_interval=timedelta(minutes=5))
        digest = first_burst(world, daemon, fake)
        world.clock.advance(150)
        daemon.evaluate(f"burst_{BURST - 1}")
        settle(daemon, world.clock, "the seventh, later")
        daemon.databases.close()
    incidents = world.store.open_incidents()
    spread = max(i.opened_at for i in incidents) - min(i.opened_at for i in incidents)
    assert timedelta(minutes=2) <= spread < timedelta(minutes=3)
    assert_one_digest_of_seven(fake, digest, "🚨 7 incidents opened within 2m 30s")
    assert digest.updates == 1


def test_an_opening_after_the_group_interval_gets_its_own_root(pg_world: World) -> None:
    world = pg_world
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake, digest_threshold=5, digest_group_interval=timedelta(minutes=5))
        digest = first_burst(world, daemon, fake)
        world.clock.advance(5 * 60 + 1)
        daemon.evaluate(f"burst_{BURST - 1}")
        settle(daemon, world.clock, "the seventh, too late")
        daemon.databases.close()
    [_, root] = fake.roots()
    assert root.blocks[0]["text"]["text"].endswith(f"burst_{BURST - 1} violated")
    assert len(listed(digest)) == BURST - 1
    assert digest.updates == 0


def test_two_daemons_planning_the_late_opening_add_it_once(pg_world: World) -> None:
    """Two daemons share the store: whichever plans the seventh, it joins the digest once,
    one edit and one detail, however their planning interleaves."""
    world = pg_world
    with FakeSlack(clock=world.clock) as fake:
        a = world.daemon(fake, digest_threshold=5)
        b = world.daemon(fake, digest_threshold=5)
        digest = first_burst(world, a, fake)
        a.evaluate(f"burst_{BURST - 1}")
        world.clock.advance(2)  # past the quiet window: both may plan it now
        deliver_together([a, b], rounds=5)
        settle(a, world.clock, "two planners")
        for daemon in (a, b):
            daemon.databases.close()
    assert_one_digest_of_seven(fake, digest, "🚨 7 incidents opened at once")
    assert digest.updates == 1
    keys = [m.key for m in fake.messages if m.key]
    assert len(keys) == len(set(keys))
    joins = [d for d in a.alerter.ledger.all() if d.payload.get("kind") == "digest_joined"]
    assert [(d.action, d.state) for d in joins] == [("update_root", "SENT")]
    assert joins[0].payload["incidents"] == [max(i.id for i in world.store.open_incidents())]
