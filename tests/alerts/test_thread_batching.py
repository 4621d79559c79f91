"""A keyless invariant whose values move does not spam its thread: rows that appear and go
make at most one reply per incident per `slack.thread_update_interval`, saying the net
change, while the root shows the live count at every run (issue 27, section 4). Real
PostgreSQL state store, the fake Slack Web API, a clock the test moves, no sleeps."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fake_slack import FakeSlack
from fake_slack import Message as Posted
from helpers import sql
from scenario import World, postgres_world, settle

from monitor.daemon.daemon import Daemon

INTERVAL = timedelta(minutes=5)
# No `key:`: each row's key is the whole row, so a moving sum is a new key at every run.
MOVES = """\
-- description: No group has moves.
-- severity: warning
SELECT g, sum(v) AS total FROM moves GROUP BY g ORDER BY g
"""


@pytest.fixture
def pg_world(database: str, admin_dsn: str, tmp_path: Path) -> Iterator[World]:
    sql(database, "CREATE TABLE moves (g int NOT NULL, v int NOT NULL)")
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "moves.sql").write_text(MOVES)
    with postgres_world(database, folder, admin_dsn) as world:
        yield world


def load(world: World, rng: random.Random) -> int:
    """New values, as under write load: 1 to 3 groups, each sum different from any before
    (so every run changes every whole-row key). Returns how many groups offend."""
    groups = rng.randint(1, 3)
    sql(world.dsn, "DELETE FROM moves")
    values = ", ".join(f"({g}, {rng.randint(1, 10**9)})" for g in range(1, groups + 1))
    sql(world.dsn, f"INSERT INTO moves VALUES {values}")
    return groups


def run(world: World, daemon: Daemon) -> None:
    """One run, then one alerts round two seconds later (past the quiet window)."""
    daemon.evaluate("moves")
    world.clock.advance(2)
    daemon.deliver()


def replies(fake: FakeSlack) -> tuple[Posted, list[Posted]]:
    [root] = fake.roots()
    return root, [m for m in fake.thread(root) if not m.files]


def live_keys(world: World) -> set[str]:
    [incident] = world.store.open_incidents()
    return {k.key for k in world.store.incident_keys(incident.id) if k.gone_at is None}


def offending_rows(root: Posted) -> str:
    fields = next(b["fields"] for b in root.blocks if "fields" in b)
    return str(fields[0]["text"])


def mentioned(line: str) -> set[str]:
    return set(re.findall(r"`([^`]*)`", line))


def test_a_keyless_sum_that_moves_every_run_gets_one_reply_per_interval(
    pg_world: World,
) -> None:
    world = pg_world
    rng = random.Random(27)
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)  # the default interval: INTERVAL
        load(world, rng)
        run(world, daemon)  # opens: root and CSV
        settle(daemon, world.clock, "opened")
        load(world, rng)
        run(world, daemon)  # the first change after quiet: replied to at once
        settle(daemon, world.clock, "first change")
        _, first = replies(fake)
        assert len(first) == 1
        assert first[0].text.startswith("🔁 The offending rows changed; now ")
        before = live_keys(world)
        started: datetime = world.clock()
        for _ in range(18):
            groups = load(world, rng)
            run(world, daemon)
        daemon.deliver()
        root, within = replies(fake)
        assert len(within) == 1  # 18 runs, every one a change: nothing more yet
        assert offending_rows(root) == f"*Offending rows*\n{groups}"  # the live count
        after = live_keys(world)
        world.clock.advance(INTERVAL.total_seconds())
        settle(daemon, world.clock, "the interval passed")
        duration = world.clock() - started
        root, thread = replies(fake)
        daemon.databases.close()
    assert len(thread) == 2
    assert len(thread) <= math.ceil(duration / INTERVAL) + 1
    assert offending_rows(root) == f"*Offending rows*\n{groups}"
    summary = thread[1].blocks[0]["text"]["text"]
    [head, appeared, gone] = summary.split("\n")
    rows = "offending row" if groups == 1 else "offending rows"
    assert head == f"🔁 The offending rows changed 18 times in 34s; now {groups} {rows}."
    assert appeared.startswith("➕ ")
    assert gone.startswith("➖ ")
    assert mentioned(appeared) == after - before
    assert mentioned(gone) == before - after


def test_a_change_after_a_quiet_interval_is_replied_to_at_once(pg_world: World) -> None:
    world = pg_world
    rng = random.Random(4)
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)  # the default interval: INTERVAL
        load(world, rng)
        run(world, daemon)
        load(world, rng)
        run(world, daemon)
        settle(daemon, world.clock, "first change")
        world.clock.advance(INTERVAL.total_seconds())  # quiet for an interval
        load(world, rng)
        run(world, daemon)
        daemon.deliver()
        _, thread = replies(fake)
        daemon.databases.close()
    assert [m.text.split(" ")[0] for m in thread] == ["🔁", "🔁"]
    # root, csv, and per change a reply and two root updates (one per event of its run)
    assert daemon.alerter.ledger.counts() == {"SENT": 8}


def test_a_resolution_sends_the_held_changes_first_without_waiting(pg_world: World) -> None:
    world = pg_world
    rng = random.Random(5)
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)  # the default interval: INTERVAL
        for _ in range(4):  # opens, then three changes: one reply now, two held
            load(world, rng)
            run(world, daemon)
        sql(world.dsn, "DELETE FROM moves")
        run(world, daemon)  # resolved, well within the interval
        settle(daemon, world.clock, "resolved", rounds=30)  # far less than the interval
        _, thread = replies(fake)
        daemon.databases.close()
    assert [m.text.split(" ")[0] for m in thread] == ["🔁", "🔁", "✅"]
    assert thread[1].text.startswith("🔁 The offending rows changed 2 times in 2s")


KEYED = """\
-- description: No group has a value.
-- key: [g]
-- sample: 2
SELECT g, v FROM moves WHERE v <> 0
"""


def test_the_root_shows_the_latest_run_as_it_came_while_a_reply_is_held(pg_world: World) -> None:
    """A truth review saw the root hold a count and rows of five minutes before, and mix
    in a row's value from long ago: the root's edit waited behind the reply held for the
    thread's interval, and a row outside the latest sample was shown as an old run saw it.
    The root now shows, at once, the count and the sample of the latest run, as they came
    from the database, and says how many rows it does not show."""
    world = pg_world
    (world.folder / "moves.sql").write_text(KEYED)
    steps = [
        "INSERT INTO moves VALUES (10, 5), (20, 7)",  # opens
        "INSERT INTO moves VALUES (1, 1), (2, 2)",  # a change after quiet: replied at once
        "UPDATE moves SET v = v * 111 WHERE g IN (1, 20); DELETE FROM moves WHERE g = 2",
    ]
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)  # the default interval: INTERVAL
        daemon.reload()
        for step in steps:
            sql(world.dsn, step)
            run(world, daemon)
            daemon.deliver()
        root, thread = replies(fake)
        table = next(b["text"]["text"] for b in root.blocks if "```" in str(b))
        daemon.databases.close()
    assert len(thread) == 1  # the third run's reply is held for the interval
    assert offending_rows(root) == "*Offending rows*\n3"  # the live count, not 4
    body, note = table.split("```")[1], table.split("```")[2]
    # g=20 is left out (now 777; an old run saw 7), and said to be.
    assert [line.split() for line in body.splitlines()] == [["g", "v"], ["1", "111"], ["10", "5"]]
    assert note == "\n_1 more row not shown_"
