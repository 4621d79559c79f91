"""Each channel's daily summary: what is open, acknowledged, snoozed, and what resolved in
the last day; once per channel and day, whoever asks."""

from __future__ import annotations

from datetime import timedelta

from fake_slack import FakeSlack
from scenario import World, script, settle

from monitor.store.acks import Action


def summaries(fake: FakeSlack) -> list[str]:
    return [str(m.blocks) for m in fake.roots() if m.text.startswith("🗓️ Daily summary")]


def test_a_channel_gets_one_summary_a_day_with_each_incident_in_its_group(
    world: World,
) -> None:
    # Summaries are once per UTC date: start at noon (yesterday's, so never ahead of the
    # database's own clock), or the 23 hours below would cross no midnight when the test
    # starts between 00:00 and 01:00 UTC.
    noon = world.clock.now.replace(hour=12, minute=0, second=0) - timedelta(days=1)
    world.clock.now = noon
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        script(world, daemon, 0)
        settle(daemon, world.clock, "opened")
        [incident] = world.store.open_incidents()
        assert daemon.alerter.summarise(world.clock()) == 1
        assert daemon.alerter.summarise(world.clock()) == 0  # once a day
        settle(daemon, world.clock, "first summary")
        daemon.alerter.act(incident.id, Action("ack", "U1", "ana"), "slack")
        world.clock.advance(24 * 3600)
        assert daemon.alerter.summarise(world.clock()) == 1
        settle(daemon, world.clock, "second summary")
        script(world, daemon, 2)  # everything fixed
        settle(daemon, world.clock, "resolved")
        world.clock.advance(24 * 3600 - 3600)
        daemon.alerter.summarise(world.clock())
        settle(daemon, world.clock, "third summary")
        world.clock.advance(2 * 24 * 3600)
        daemon.alerter.summarise(world.clock())  # nothing left to say: no message
        settle(daemon, world.clock, "quiet day")
        daemon.databases.close()
    first, second, third = summaries(fake)
    assert "🚨 Open* (1)" in first and "bad_items" in first and "2 rows" in first
    assert "👀 Acknowledged* (1)" in second and "🚨 Open" not in second
    assert "✅ Resolved in the last day* (1)" in third and "RESOLVED · bad_items" in third
    assert {m.channel for m in fake.roots() if m.text.startswith("🗓️")} == {"C0INVARIANTS"}
