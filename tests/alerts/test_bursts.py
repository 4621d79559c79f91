"""When planning lets a channel's events go, and when it holds a burst so that it becomes one
digest (alerts/bursts.py): the rule on its own, then through the daemon against a real state
store and the fake Slack Web API, on a clock the test moves. A lone incident goes as soon as
its run is stored, another channel's burst never holds it, and a burst in one channel is
still one digest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from fake_slack import FakeSlack
from helpers import sql
from scenario import CHANGES, World, settle

from alerts.bursts import Channel, Decision, Rule, decide
from monitor.store.incidents import EventKind
from monitor.store.records import StoredEvent

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RULE = Rule(window=timedelta(seconds=2), threshold=5)


def event(
    event_id: int, incident_id: int, kind: EventKind = "opened", at: float = 0.0
) -> StoredEvent:
    """An event `at` seconds past T0."""
    created = T0 + timedelta(seconds=at)
    return StoredEvent(event_id, incident_id, f"inv{incident_id}", kind, created, {})


def channel(
    *events: StoredEvent,
    running: bool = False,
    last_opening: float | None = None,
    digest_open: bool = False,
) -> Channel:
    last = None if last_opening is None else T0 + timedelta(seconds=last_opening)
    return Channel(events, running, last, digest_open)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# --- the rule ---------------------------------------------------------------------------------


def test_a_lone_opening_in_a_quiet_channel_goes_at_once() -> None:
    lone = event(1, 1)
    assert decide(channel(lone), at(0.01), RULE) == Decision((lone,), None)


def test_an_opening_is_held_while_a_run_of_its_channel_is_in_flight_until_the_quiet_bound() -> None:
    opening = event(1, 1, at=0)
    assert decide(channel(opening, running=True), at(0.5), RULE) == Decision((), at(2))
    assert decide(channel(opening, running=True), at(2), RULE) == Decision((opening,), None)


def test_an_opening_soon_after_another_was_planned_in_its_channel_waits_for_quiet() -> None:
    later = event(2, 2, at=0.6)
    burst = channel(later, last_opening=0.0)
    assert decide(burst, at(0.6), RULE) == Decision((), at(2.6))
    assert decide(burst, at(2.6), RULE) == Decision((later,), None)
    # An opening planned longer than a window ago is no burst.
    assert decide(channel(later, last_opening=-1.5), at(0.6), RULE) == Decision((later,), None)


def test_the_threshold_lets_a_burst_go_as_a_digest_unless_it_would_join_one() -> None:
    five = tuple(event(n, n, at=0) for n in range(1, 6))
    assert decide(channel(*five, running=True), at(0), RULE) == Decision(five, None)
    # Joining a recent digest needs no threshold: while runs are in flight they gather.
    joining = channel(*five, running=True, digest_open=True)
    assert decide(joining, at(0), RULE) == Decision((), at(2))
    assert decide(channel(*five, digest_open=True), at(0), RULE) == Decision(five, None)


def test_events_that_open_nothing_are_never_held() -> None:
    resolved = event(1, 1, "resolved")
    appeared = event(2, 2, "keys_appeared")
    busy = channel(resolved, appeared, running=True, last_opening=0.0)
    assert decide(busy, at(0), RULE) == Decision((resolved, appeared), None)


def test_a_held_channel_holds_its_openings_and_what_follows_them_only() -> None:
    other = event(1, 1, "resolved", at=0)
    opening = event(2, 2, "opened", at=0)
    after = event(3, 2, "keys_appeared", at=0.1)
    held = channel(other, opening, after, running=True)
    assert decide(held, at(0.2), RULE) == Decision((other,), at(2.1))


def test_a_batch_goes_after_six_windows_however_busy_its_channel() -> None:
    first = event(1, 1, at=0)
    late = event(2, 2, at=11.5)
    busy = channel(first, late, running=True, last_opening=11.0)
    assert decide(busy, at(11.9), RULE) == Decision((), at(12))
    assert decide(busy, at(12), RULE) == Decision((first, late), None)


# --- through the daemon -----------------------------------------------------------------------


def violated(folder: Path, name: str, channel_name: str) -> None:
    """An invariant that offends from its first run, posting to `channel_name`."""
    (folder / f"{name}.sql").write_text(
        f'-- description: {name} holds\n-- channel: "{channel_name}"\n-- key: [id]\n'
        "SELECT id FROM items WHERE id <= 2\n"
    )


def test_a_lone_incident_goes_at_once_and_another_channels_burst_does_not_hold_it(
    world: World,
) -> None:
    for name in ("a_0", "a_1"):
        violated(world.folder, name, "#invariants")
    violated(world.folder, "lone", "#payments")
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        daemon.evaluate("a_0")
        # Alone in a quiet channel, nothing else in flight: planned at once, no window.
        assert [e.invariant for e in daemon.pump.dispatch()] == ["a_0"]
        world.clock.advance(0.5)
        daemon.evaluate("a_1")
        # An opening went to this channel half a second ago: a burst, gathered until quiet.
        assert [e.invariant for e in daemon.pump.dispatch()] == []
        assert daemon.pump.holding()
        daemon.evaluate("lone")
        # Another channel: that burst does not hold it.
        assert [e.invariant for e in daemon.pump.dispatch()] == ["lone"]
        world.clock.advance(2)
        assert [e.invariant for e in daemon.pump.dispatch()] == ["a_1"]
        assert not daemon.pump.holding()
        settle(daemon, world.clock, "three roots")
        daemon.databases.close()
    roots = {(m.channel, m.blocks[0]["text"]["text"].split(" · ")[1]) for m in fake.roots()}
    assert roots == {
        ("C0INVARIANTS", "a_0 violated"),
        ("C0INVARIANTS", "a_1 violated"),
        ("C0PAYMENTS", "lone violated"),
    }


def test_a_burst_whose_runs_are_stored_one_by_one_is_one_digest(world: World) -> None:
    """One tick's runs in one channel, planning between each two: while the channel still
    has runs in flight its openings wait for them, so they go together as a digest."""
    names = [f"burst_{n}" for n in range(6)]
    for name in names:
        violated(world.folder, name, "#invariants")
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake, digest_threshold=5)
        claims = daemon.scheduler.tick(world.clock())  # all due at once, after loading
        assert sorted(c.invariant for c in claims) == ["bad_items", *names]
        went: list[list[str]] = []
        for claim in claims:
            daemon.evaluate(claim.invariant, claim)
            went.append([e.invariant for e in daemon.pump.dispatch()])
        # Held while the channel had runs in flight; at the fifth opening, a digest.
        assert went == [[], [], [], [], [], names[:5], []]
        settle(daemon, world.clock, "the digest and the sixth joining it")
        daemon.databases.close()
    [digest] = fake.roots()
    assert digest.blocks[0]["text"]["text"] == "🚨 6 incidents opened at once"
    assert digest.updates == 1  # the sixth joined: one edit


def test_a_stored_run_wakes_the_alerts_turn_when_it_wrote_events_or_a_batch_waits(
    world: World,
) -> None:
    violated(world.folder, "a_0", "#invariants")
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        woken = daemon.pump.woken
        woken.clear()
        daemon.evaluate("bad_items")  # ok: no event, nothing held
        assert not woken.is_set()
        sql(world.dsn, CHANGES[0])
        daemon.evaluate("bad_items")  # opens an incident
        assert woken.is_set()
        assert [e.invariant for e in daemon.pump.dispatch()] == ["bad_items"]
        daemon.evaluate("a_0")  # a burst in #invariants: held behind bad_items' opening
        assert daemon.pump.dispatch() == []
        woken.clear()
        daemon.evaluate("bad_items")  # no new event, but a batch waits: worth a look
        assert woken.is_set()
        daemon.databases.close()
