"""Finished deliveries are pruned after the store's retention, and only those nothing still
needs: an open incident's thread (root, replies, the digest listing it) stays whatever its
age, as does anything of an incident closed within the retention, and a row not finished
(PENDING, UNKNOWN) is never touched. Both state stores, the fake Slack Web API, a clock the
test moves over forty days."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fake_slack import FakeSlack
from helpers import FakeClock, items_table, sql
from scenario import World, settle

from alerts.deliveries import Delivery
from monitor.daemon.daemon import Daemon
from monitor.store.state import StateStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RETENTION = timedelta(days=30)  # state.retention as shipped
# Each invariant offends while its item is bad: name -> (item, channel).
WATCHED = {
    "closed_long_ago": (1, "#invariants"),
    "still_open": (2, "#invariants"),
    "closed_lately": (3, "#invariants"),
    "failed_for_good": (4, "#nowhere"),  # Slack knows no such channel: FAILED
    **{f"burst_{n}": (5 + n, "#payments") for n in range(5)},  # one digest
}


@pytest.fixture
def aged(database: str, store: StateStore, tmp_path: Path) -> Iterator[World]:
    items_table(database, rows=10)
    folder = tmp_path / "invariants"
    folder.mkdir()
    for name, (item, channel) in WATCHED.items():
        (folder / f"{name}.sql").write_text(
            f'-- description: {name} holds\n-- channel: "{channel}"\n-- key: [id]\n'
            f"SELECT id FROM items WHERE bad AND id = {item}\n"
        )
    yield World(database, folder, store, FakeClock(T0))


def evaluate(world: World, daemon: Daemon, bad: set[str], names: list[str]) -> None:
    items = ",".join(str(WATCHED[n][0]) for n in bad) or "0"
    sql(world.dsn, f"UPDATE items SET bad = id IN ({items})")
    for name in names:
        daemon.evaluate(name)
    settle(daemon, world.clock, f"{sorted(bad)}")


def incident_of(world: World, name: str) -> int:
    [found] = [i.id for i in world.store.incidents(name)]
    return found


def roots(world: World) -> set[tuple[int, str]]:
    with world.store.storage.transaction() as tx:
        found = tx.rows("SELECT incident_id, channel FROM alert_roots")
    return {(int(i), str(c)) for i, c in found}


def counted(world: World) -> dict[str, int]:
    with world.store.storage.transaction() as tx:
        return dict(tx.rows("SELECT state, count(*) FROM deliveries GROUP BY state"))


def test_only_finished_deliveries_nothing_needs_are_pruned_after_the_retention(
    aged: World,
) -> None:
    world = aged
    names = sorted(WATCHED)
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake, digest_threshold=5)
        evaluate(world, daemon, set(names), names)  # every one opens (five as a digest)
        assert daemon.alerter.summarise(world.clock()) == 3  # a summary in each channel
        settle(daemon, world.clock, "the first summaries")
        world.clock.advance(3600)
        open_after = {"still_open", "closed_lately", "burst_4"}
        evaluate(world, daemon, open_after, names)
        world.clock.advance(35 * 86400)
        evaluate(world, daemon, {"still_open", "burst_4"}, names)  # closed_lately closes
        world.clock.advance(int(4.5 * 86400))
        assert daemon.alerter.summarise(world.clock()) == 2  # recent: within the retention
        settle(daemon, world.clock, "the recent summaries")
        world.clock.advance(86400 // 2)  # forty days in
        cutoff = world.clock() - RETENTION
        # A row still to do, however old (a reply made PENDING again): never pruned, nor
        # the root it goes under, nor that root's place in alert_roots.
        before = daemon.alerter.ledger.all()
        long_ago = incident_of(world, "closed_long_ago")
        pending = [d for d in before if d.incident_id == long_ago and d.root_id][-1]
        assert pending.state == "SENT"
        with world.store.storage.transaction() as tx:  # its count with it (alerts/ledger.py)
            tx.run("UPDATE deliveries SET state = 'PENDING' WHERE id = ?", (pending.id,))
            tx.run("UPDATE delivery_counts SET n = n - 1 WHERE state = 'SENT'")

        kept_incidents = {incident_of(world, n) for n in ("still_open", "closed_lately", "burst_4")}

        def needed(d: Delivery) -> bool:
            return (
                d.id in (pending.id, pending.root_id)
                or d.incident_id in kept_incidents
                or d.action == "post_digest"  # the root of burst_4, still open
                or (d.action == "post_summary" and d.created_at > cutoff)
            )

        kept = {d.idem_key for d in before if needed(d)}
        assert len(kept) < len(before)
        assert {d.state for d in before if not needed(d)} == {"SENT", "FAILED"}

        assert daemon.housekeeping.retention == RETENTION
        # A daemon of the previous release, beside this one through a rolling upgrade, marked
        # rows SENT without counting them: pruning them took the metric below zero.
        with world.store.storage.transaction() as tx:
            tx.run("UPDATE delivery_counts SET n = 2 WHERE state = 'SENT'")
        # A daemon stopping: no batch is begun (the store is about to close).
        ledger = daemon.alerter.ledger.all()
        assert daemon.alerter.prune(world.clock() - RETENTION, lambda: False) == 0
        assert daemon.alerter.ledger.all() == ledger
        daemon.housekeeping.prune()  # the daemon's job, every six hours
        assert {d.idem_key for d in daemon.alerter.ledger.all()} == kept
        digest_listed = {incident_of(world, f"burst_{n}") for n in range(5)}
        undigested = kept_incidents - digest_listed | {long_ago}
        assert roots(world) == {(i, "#invariants") for i in undigested} | {
            (i, "#payments") for i in digest_listed
        }
        assert daemon.alerter.ledger.counts() == counted(world)
        assert daemon.alerter.prune(world.clock() - RETENTION) == 0  # nothing more to go

        # The open incidents' threads still take their messages, each once.
        with world.store.storage.transaction() as tx:  # (and the reply made pending is sent)
            tx.run("UPDATE deliveries SET state = 'SENT' WHERE id = ?", (pending.id,))
            tx.run("UPDATE delivery_counts SET n = n + 1 WHERE state = 'SENT'")
        evaluate(world, daemon, set(), names)  # everything resolves
        daemon.databases.close()
    keys = [m.key for m in fake.messages if m.key]
    assert len(keys) == len(set(keys))
    titles = {m.blocks[0]["text"]["text"]: m for m in fake.roots()}
    last = fake.thread(titles["🚨 5 incidents opened at once"])[-1]
    assert "burst_4" in last.text and "Resolved after 40d" in last.text, last.text
    root = titles["✅ RESOLVED · still_open (lasted 40d 1h)"]
    assert fake.thread(root)[-1].text.startswith("✅ Resolved after 40d 1h")
    assert daemon.alerter.ledger.counts() == counted(world)


def test_nothing_is_pruned_within_the_retention_nor_within_a_day(aged: World) -> None:
    world = aged
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        evaluate(world, daemon, {"closed_long_ago"}, ["closed_long_ago"])
        evaluate(world, daemon, set(), ["closed_long_ago"])
        assert daemon.alerter.summarise(world.clock()) == 1
        settle(daemon, world.clock, "a summary")
        made = {d.idem_key for d in daemon.alerter.ledger.all()}
        world.clock.advance(12 * 3600)
        # A retention shorter than a day still keeps a day: a summary's key is its day.
        assert daemon.alerter.prune(world.clock() - timedelta(minutes=1)) == 0
        world.clock.advance(13 * 3600)
        assert daemon.alerter.prune(world.clock() - RETENTION) == 0
        assert {d.idem_key for d in daemon.alerter.ledger.all()} == made
        assert daemon.alerter.prune(world.clock() - timedelta(minutes=1)) == len(made)
        assert daemon.alerter.ledger.all() == []
        assert roots(world) == set()
        assert daemon.alerter.ledger.counts() == {}
        daemon.databases.close()
    assert len(fake.roots()) == 2  # the incident's root and the summary, once each


def test_a_prune_batch_reads_its_own_rows_by_key_not_every_finished_row(tmp_path: Path) -> None:
    """Each batch read every SENT row off deliveries_due and sorted them by id: the first
    prune after an upgrade from a release that never pruned took hours on 2M rows. The plan
    SQLite makes for a batch's candidates, on a ledger of finished rows."""
    from alerts.ledger import _CANDIDATES

    store = StateStore.open(path=tmp_path / "state.db")
    try:
        with store.storage.transaction() as tx:
            for n in range(200):
                tx.run(
                    "INSERT INTO deliveries (idem_key, invariant, channel, action, state,"
                    " next_attempt_at, created_at, updated_at) VALUES (?, 'i', '#c', 'post_root',"
                    " 'SENT', '2026-01-01', '2026-01-01', '2026-01-01')",
                    (f"k{n}",),
                )
            plan = tx.rows(f"EXPLAIN QUERY PLAN {_CANDIDATES}", (1, 100, "2026-06", "2026-06"))
    finally:
        store.close()
    steps = [str(row[-1]) for row in plan]
    assert steps[0] == "SEARCH d USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)", steps
    assert [s for s in steps if "deliveries_due" in s] == []
