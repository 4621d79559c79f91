"""Slack delivery through slack-sdk against a fake Slack Web API: exactly one root message
per incident, each thread event once, the CSV holding exactly the offending rows, under
seeded faults and simulated crashes."""

from __future__ import annotations

import json
import random
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from builders import build_daemon, daemon_config
from fake_slack import TOKEN, FakeSlack
from helpers import FakeClock, items_table
from scenario import (
    INVARIANT,
    World,
    assert_one_clean_incident,
    crash,
    deliver_together,
    script,
    settle,
)

from alerts.slack import SlackTransport
from alerts.transport import TransportError
from monitor.clock import parse_stamp
from monitor.store.acks import Action
from monitor.store.state import StateStore


def test_an_incident_is_announced_updated_and_resolved_in_one_thread(world: World) -> None:
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        for step in range(3):
            script(world, daemon, step)
            settle(daemon, world.clock, f"step {step}")
        daemon.databases.close()
    assert_one_clean_incident(fake, "no faults")
    [root] = fake.roots()
    assert root.updates == 3  # keys appeared, keys gone, resolved
    assert root.channel == "C0INVARIANTS"
    assert [f.title for f in fake.shared_files()] == ["bad_items: 2 offending rows"]
    assert world.store.pending_events() == []
    # root, csv, one reply for the run where row 3 appeared and row 1 went, the resolution's
    # reply, and 3 root updates (keys appeared, keys gone, resolved)
    assert daemon.alerter.ledger.counts() == {"SENT": 7}


def test_a_permanent_error_fails_once_with_a_clear_reason_and_does_not_loop(
    world: World,
) -> None:
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake, channel="#no-such-channel")
        script(world, daemon, 0)
        settle(daemon, world.clock, "permanent")
        daemon.databases.close()
    deliveries = daemon.alerter.ledger.all()
    assert [(d.action, d.state, d.attempts) for d in deliveries] == [
        ("post_root", "FAILED", 1),
        ("upload_csv", "FAILED", 0),
    ]
    assert deliveries[0].last_error == "channel '#no-such-channel' not found or not visible"
    assert deliveries[1].last_error == (
        "its root message failed: channel '#no-such-channel' not found or not visible"
    )
    assert fake.messages == []


def test_a_429_is_rescheduled_by_retry_after_without_sleeping(world: World) -> None:
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        script(world, daemon, 0)
        first_post = iter(["rate_limit"])

        def rate_limit_first_post(method: str) -> str:
            return next(first_post, "none") if method == "chat.postMessage" else "none"

        fake._fault = rate_limit_first_post  # type: ignore[method-assign]
        world.clock.advance(2)  # past the quiet window: the opening is planned
        daemon.deliver()
        [root] = [d for d in daemon.alerter.ledger.all() if d.action == "post_root"]
        assert (root.state, root.last_error) == (
            "PENDING",
            "rate limited by Slack (retry after 1.0s)",
        )
        daemon.deliver()
        assert fake.roots() == []  # not due yet: the clock has not moved
        world.clock.advance(1)
        settle(daemon, world.clock, "after 429")
        daemon.databases.close()
    assert len(fake.roots()) == 1


def test_a_429_holds_every_pending_post_to_that_channel_until_retry_after(
    world: World,
) -> None:
    for name in ("bad_items_b", "bad_items_c", "bad_items_d"):
        (world.folder / f"{name}.sql").write_text(INVARIANT)
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        script(world, daemon, 0)
        for name in ("bad_items_b", "bad_items_c", "bad_items_d"):
            daemon.evaluate(name)
        posts: list[str] = []
        first_post = iter(["rate_limit"])

        def rate_limit_first_post(method: str) -> str:
            if method != "chat.postMessage":
                return "none"
            posts.append(method)
            return next(first_post, "none")

        fake._fault = rate_limit_first_post  # type: ignore[method-assign]
        world.clock.advance(2)  # past the quiet window: four openings, four roots
        daemon.deliver()
        roots = [d for d in daemon.alerter.ledger.all() if d.action == "post_root"]
        assert [d.state for d in roots] == ["PENDING"] * 4
        assert len(posts) == 1  # the other three were held, not each refused in turn
        # And released a second apart, Slack's rate per channel, not all at once when the
        # hold ends (each after the first would draw a 429 of its own).
        with daemon.alerter.ledger.storage.transaction() as tx:
            due = [
                parse_stamp(at)
                for (at,) in tx.rows(
                    "SELECT next_attempt_at FROM deliveries WHERE action = 'post_root' ORDER BY id"
                )
            ]
        assert [at - due[0] for at in due] == [timedelta(seconds=n) for n in range(4)]
        assert due[0] == world.clock() + timedelta(seconds=1)  # the fake's Retry-After
        daemon.deliver()
        assert len(posts) == 1  # still within Retry-After
        world.clock.advance(1)
        settle(daemon, world.clock, "after 429")
        daemon.databases.close()
    assert len(fake.roots()) == 4
    assert len(posts) == 5


def test_slack_sdk_never_retries_a_post_on_its_own() -> None:
    with FakeSlack() as fake:
        transport = SlackTransport(TOKEN, fake.api_url, timeout=0.3)
        seen: list[str] = []

        def reset_every_call(method: str) -> str:
            seen.append(method)
            return "reset"

        fake._fault = reset_every_call  # type: ignore[method-assign]
        with pytest.raises(TransportError) as caught:
            transport.post("C0INVARIANTS", "x", [], "key-1")
    assert caught.value.kind == "ambiguous"
    assert seen == ["chat.postMessage"]  # one request: no silent second post
    assert fake.messages == []


def test_two_workers_sharing_a_postgres_store_never_send_the_same_row(
    database: str, admin_dsn: str, tmp_path: Path
) -> None:
    from monitor.authoring.pgtemp import scratch_database

    items_table(database, rows=3, bad=(1, 2))
    folder = tmp_path / "invariants"
    folder.mkdir()
    for n in range(8):
        (folder / f"inv_{n}.sql").write_text(INVARIANT.replace("bad", f"bad AND id > {n % 2}"))
    with scratch_database(admin_dsn, prefix="invmon_state") as state_dsn, FakeSlack() as fake:
        stores = [StateStore.open(dsn=state_dsn), StateStore.open(dsn=state_dsn)]
        clock = FakeClock()
        world_a = World(database, folder, stores[0], clock)
        world_b = World(database, folder, stores[1], clock)
        a = world_a.daemon(fake, digest_threshold=100)
        b = world_b.daemon(fake, digest_threshold=100)
        for name in sorted(a.invariants):
            a.evaluate(name)
        deliver_together([a, b], rounds=30)
        settle(a, clock, "shared store")
        for daemon in (a, b):
            daemon.databases.close()
        for store in stores:
            store.close()
    keys = [m.key for m in fake.messages if m.key]
    assert len(keys) == len(set(keys))
    assert len(fake.roots()) == 8
    assert len(fake.shared_files()) == 8


def test_a_burst_of_openings_goes_out_as_one_digest(world: World) -> None:
    for n in range(6):
        (world.folder / f"burst_{n}.sql").write_text(
            f"-- description: burst {n}\n-- key: [id]\nSELECT id FROM items WHERE id <= {n + 1}\n"
        )
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake, digest_threshold=5, signing_secret="s")
        for name in sorted(daemon.invariants):
            daemon.evaluate(name)
        settle(daemon, world.clock, "digest")
        [digest] = fake.roots()
        assert digest.blocks[0]["text"]["text"] == "🚨 6 incidents opened at once"
        thread = fake.thread(digest)
        details = [m for m in thread if not m.files]
        assert len(details) == 6
        assert len([m for m in thread if m.files]) == 6
        # Acking one incident updates its own message in the thread (where its buttons are).
        burst_0 = next(i for i in world.store.open_incidents() if i.invariant == "burst_0")
        outcome = daemon.alerter.act(burst_0.id, Action("ack", "U1", "ana"), "test")
        assert outcome.changed
        settle(daemon, world.clock, "ack in a digest")
        daemon.databases.close()
    detail = next(m for m in details if "burst_0" in m.text)
    assert detail.updates == 1
    assert "👀 Acknowledged by @ana" in json.dumps(detail.blocks, ensure_ascii=False)
    assert [m.updates for m in details if m is not detail] == [0] * 5


def test_reminders_go_in_the_thread_once_per_interval(world: World) -> None:
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake, repeat_interval=timedelta(hours=4))
        script(world, daemon, 0)
        settle(daemon, world.clock, "opened")
        assert daemon.alerter.remind() == 0
        world.clock.advance(4 * 3600 + 1)
        assert daemon.alerter.remind() == 1
        assert daemon.alerter.remind() == 0
        settle(daemon, world.clock, "reminded")
        daemon.databases.close()
    [root] = fake.roots()
    reminders = [m for m in fake.thread(root) if m.text.startswith("⏰")]
    assert len(reminders) == 1


def test_without_slack_alerts_are_printed_through_the_same_ledger(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = build_daemon(daemon_config(world.folder), world.dsn, world.store, world.clock)
    daemon.reload()
    script(world, daemon, 0)
    settle(daemon, world.clock, "console")
    daemon.databases.close()
    out = capsys.readouterr().out
    assert "── alert to #invariants · incident #1 (bad_items) ──" in out
    assert "🔴 CRITICAL · bad_items violated" in out
    assert "📎 CSV of incident #1: bad_items: 2 offending rows" in out
    assert daemon.alerter.ledger.counts() == {"SENT": 2}


def run_seed(world: World, seed: int) -> None:
    rng = random.Random(seed)
    label = f"seed {seed}"
    with FakeSlack(seed=seed, fault_rate=0.35, answer_delay=0.35, clock=world.clock) as fake:
        daemon = world.daemon(fake)
        for step in range(3):
            script(world, daemon, step)
            for _ in range(rng.randint(1, 6)):
                if rng.random() < 0.3:
                    crash(daemon, fake, rng)
                daemon.deliver()
                world.clock.advance(rng.choice([0, 1, 3, 40]))
        fake.faults_off()
        world.clock.advance(60)  # past every lease and settle window
        settle(daemon, world.clock, label)
        daemon.databases.close()
    assert_one_clean_incident(fake, label)
    counts = daemon.alerter.ledger.counts()
    assert set(counts) == {"SENT"}, f"{label}: {counts}"
    # The counts kept as rows change are the rows' states, whatever crashed meanwhile.
    with world.store.storage.transaction() as tx:
        rows = dict(tx.rows("SELECT state, count(*) FROM deliveries GROUP BY state"))
    assert counts == rows, label


SEEDS = range(int(__import__("os").environ.get("INVMON_SOAK_SEEDS", "12")))


@pytest.mark.parametrize("seed", SEEDS)
def test_faults_and_crashes_never_double_or_lose_a_message(world: World, seed: int) -> None:
    run_seed(world, seed)


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(1000, 1200))
def test_soak_faults_and_crashes_over_200_seeds(world: World, seed: int) -> None:
    run_seed(world, seed)


def test_a_slow_post_keeps_its_lease_so_no_other_worker_posts_it_again(world: World) -> None:
    """The worker renews its lease while a call is in flight (real time passes here)."""
    from alerts.worker import DeliveryWorker, WorkerSettings

    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        script(world, daemon, 0)
        world.clock.advance(3)
        daemon.pump.dispatch()
        entered, release = threading.Event(), threading.Event()
        first = iter([True])

        def hold_first_post(method: str) -> str:
            if method == "chat.postMessage" and next(first, False):
                entered.set()
                release.wait(20)  # in flight far longer than the lease
            return "none"

        fake._fault = hold_first_post  # type: ignore[method-assign]
        # A 2 s lease renewed every third of it: a busy machine would have to starve the
        # renewing thread for over a second to flip this (a 0.6 s lease flipped under load).
        settings = WorkerSettings(lease=timedelta(seconds=2), settle=timedelta(seconds=0))
        views = daemon.alerter.worker.views
        start, began = world.clock(), time.monotonic()

        def real_clock() -> datetime:  # the scenario's time, moving as real time passes
            return start + timedelta(seconds=time.monotonic() - began)

        def worker(owner: str) -> DeliveryWorker:
            transport = SlackTransport(TOKEN, fake.api_url, timeout=30)
            return DeliveryWorker(
                daemon.alerter.ledger, transport, views, real_clock, settings, owner=owner
            )

        slow = threading.Thread(target=lambda: worker("A").run_due(limit=1))
        slow.start()
        assert entered.wait(5)
        rival = worker("B")
        deadline = time.monotonic() + 5.0  # two and a half lease lengths of real time
        while time.monotonic() < deadline:
            assert rival.run_due(limit=1) == 0  # the only row is leased to A
            assert fake.roots() == []  # B never took the post over while A held it
            time.sleep(0.05)
        release.set()
        slow.join()
        daemon.databases.close()
    assert len(fake.roots()) == 1
    [root] = [d for d in daemon.alerter.ledger.all() if d.action == "post_root"]
    assert (root.state, root.slack_ts) == ("SENT", fake.roots()[0].ts)
