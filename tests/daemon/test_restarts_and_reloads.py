"""What a restart or a reload finds in the state store is brought up to date: an incident
about a target or a file is closed once what it said is no longer so (from an operator's
review: both stayed open for good)."""

from __future__ import annotations

from fake_slack import FakeSlack
from scenario import World, script, settle

from monitor.store.state import target_subject


def test_a_target_incident_opened_before_a_restart_closes_at_the_first_run_that_reaches_it(
    world: World,
) -> None:
    """A password rotation opened target_unreachable; the daemon restarted with the new
    one, its runs succeeded, and the incident stayed open: the first reading of a target
    was written only when it said the target was down."""
    world.store.record_condition(
        "target_unreachable", target_subject("default"), True, world.clock(), "password failed"
    )
    assert [i.kind for i in world.store.open_incidents()] == ["target_unreachable"]
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        result = daemon.evaluate("bad_items")
        settle(daemon, world.clock, "reachable again")
        daemon.databases.close()
    assert result is not None and result.status == "ok"
    assert world.store.open_incidents() == []


def test_a_file_invalid_since_the_start_is_retired_when_a_reload_finds_it_gone(
    world: World,
) -> None:
    """Its violation was open; the file turned invalid, the daemon restarted (so it never
    ran), then the file was deleted and a SIGHUP came: only 'file fixed' was said, and the
    violation stayed open until the next restart."""
    (world.folder / "other.sql").write_text("-- description: x holds\nSELECT 1 AS id WHERE false\n")
    with FakeSlack(clock=world.clock) as fake:
        first = world.daemon(fake)
        script(world, first, 0)  # bad_items violated: its incident opens
        settle(first, world.clock, "opened")
        first.databases.close()
        (world.folder / "bad_items.sql").write_text("-- description: broken\nSELECT FROM\n")
        world.clock.advance(60)
        second = world.daemon(fake)  # restarted: bad_items is invalid, never installed
        kinds = sorted((i.invariant, i.kind) for i in world.store.open_incidents())
        assert kinds == [("bad_items", "invalid_file"), ("bad_items", "violation")]
        (world.folder / "bad_items.sql").unlink()
        world.clock.advance(60)
        second.reload()
        settle(second, world.clock, "retired")
        second.databases.close()
    assert world.store.open_incidents() == []
