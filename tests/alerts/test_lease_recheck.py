"""A worker frozen between claiming a delivery and calling Slack, for longer than its lease,
must not send once it resumes: Slack has no idempotency key, so the lease is re-checked in
the store immediately before each call that creates something (issue 27, §6).

Two workers share one PostgreSQL state store and one clock the test moves. Worker A is
frozen inside the rendering of its message (after its claim, before its call), the clock
jumps past the lease, worker B takes the row over and sends it; then A resumes.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fake_slack import TOKEN, FakeSlack
from helpers import FakeClock, items_table, wait_for
from scenario import INVARIANT, World, script

from alerts.content import Views
from alerts.ledger import Ledger
from alerts.messages import IncidentView
from alerts.slack import SlackTransport
from alerts.worker import DeliveryWorker, WorkerSettings, send_margin
from monitor.authoring.pgtemp import scratch_database
from monitor.store.state import StateStore

# A 60 s lease: A's renewing thread waits a third of it in real time (20 s) before it
# renews, far longer than a test takes, so while A is frozen nothing renews its lease (as in
# a real freeze, where that thread stops too). Settle 0: B reconciles without waiting.
SETTINGS = WorkerSettings(lease=timedelta(seconds=60), settle=timedelta(seconds=0))
LEASE = SETTINGS.lease.total_seconds()


class FreezingViews(Views):
    """Views that block the first rendering until released: the freeze, placed after the
    claim and before the Slack call."""

    def __init__(self, store: StateStore, clock: FakeClock) -> None:
        super().__init__(store, lambda _: None, clock)
        self.entered = threading.Event()
        self.release = threading.Event()
        self._first = True
        self._lock = threading.Lock()

    def _freeze(self) -> None:
        with self._lock:
            first, self._first = self._first, False
        if first:
            self.entered.set()
            assert self.release.wait(30), "the test never released the frozen worker"

    def incident(self, incident_id: int) -> IncidentView:
        self._freeze()
        return super().incident(incident_id)

    def csv_file(self, incident_id: int, max_rows: int, max_bytes: int) -> tuple[bytes, str]:
        self._freeze()
        return super().csv_file(incident_id, max_rows, max_bytes)


@dataclass
class Pair:
    world: World
    fake: FakeSlack
    state_dsn: str
    stores: list[StateStore]

    def worker(self, owner: str, views: Views | None = None) -> DeliveryWorker:
        store = StateStore.open(dsn=self.state_dsn)  # its own connection
        self.stores.append(store)
        return DeliveryWorker(
            Ledger(store.storage),
            SlackTransport(TOKEN, self.fake.api_url, timeout=5),
            views or Views(store, lambda _: None, self.world.clock),
            self.world.clock,
            SETTINGS,
            owner=owner,
        )

    def frozen(self, owner: str) -> tuple[DeliveryWorker, FreezingViews]:
        store = StateStore.open(dsn=self.state_dsn)
        self.stores.append(store)
        views = FreezingViews(store, self.world.clock)
        return self.worker(owner, views), views


@pytest.fixture
def pair(database: str, admin_dsn: str, tmp_path: Path) -> Iterator[Pair]:
    """One incident opened and planned (a root post and its CSV) in a PostgreSQL store."""
    items_table(database)
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "bad_items.sql").write_text(INVARIANT)
    with scratch_database(admin_dsn, prefix="invmon_state") as state_dsn, FakeSlack() as fake:
        store = StateStore.open(dsn=state_dsn)
        world = World(database, folder, store, FakeClock())
        daemon = world.daemon(fake)
        script(world, daemon, 0)
        world.clock.advance(3)  # past the digest window: the opening is planned alone
        daemon.pump.dispatch()
        daemon.databases.close()
        found = Pair(world, fake, state_dsn, [store])
        yield found
        for opened in found.stores:
            opened.close()


def run_frozen(worker: DeliveryWorker, views: FreezingViews) -> threading.Thread:
    thread = threading.Thread(target=lambda: worker.run_due(limit=1), name="frozen-A")
    thread.start()
    assert views.entered.wait(10), "worker A never reached its message"
    return thread


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("not sending")]


def test_a_worker_frozen_past_its_lease_does_not_post_after_another_posted(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="invmon.alerts")
    a, views = pair.frozen("A")
    thread = run_frozen(a, views)  # A claimed the root post and froze before sending it
    pair.world.clock.advance(LEASE + 1)  # the freeze outlasts the lease
    b = pair.worker("B")

    def b_posted() -> bool:
        b.run_due(limit=1)  # reconciles (not in Slack), then posts
        return len(pair.fake.roots()) == 1

    wait_for(b_posted, 10, "worker B to post the root")
    views.release.set()
    thread.join(10)
    assert not thread.is_alive()
    [root] = pair.fake.roots()
    assert len(pair.fake.messages) == 1  # A did not post a second root
    [row] = [d for d in Ledger(pair.stores[0].storage).all() if d.action == "post_root"]
    assert (row.state, row.slack_ts, row.lease_owner) == ("SENT", root.ts, None)
    assert refusals(caplog) == [
        "not sending: the lease on this delivery was lost or is about to run out;"
        " the worker that holds it now decides"
    ]


def test_a_worker_frozen_past_its_lease_does_not_share_a_second_csv(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="invmon.alerts")
    assert pair.worker("root").run_due(limit=1) == 1  # the root is posted first
    assert len(pair.fake.roots()) == 1
    a, views = pair.frozen("A")
    thread = run_frozen(a, views)  # A claimed the CSV upload and froze while building it
    pair.world.clock.advance(LEASE + 1)
    b = pair.worker("B")

    def b_shared() -> bool:
        b.run_due(limit=1)
        return len(pair.fake.shared_files()) == 1

    wait_for(b_shared, 10, "worker B to share the CSV")
    views.release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert len(pair.fake.shared_files()) == 1  # A's own upload was never completed
    [row] = [d for d in Ledger(pair.stores[0].storage).all() if d.action == "upload_csv"]
    assert row.state == "SENT"
    assert len(refusals(caplog)) == 1


def test_a_lease_with_less_than_the_margin_left_is_not_used_to_send(pair: Pair) -> None:
    """Nobody took the row over yet, but the lease is about to run out: a call started now
    could land after another worker took the row; leave it to be reconciled."""
    margin = send_margin(SETTINGS.lease).total_seconds()
    assert margin == 15.0
    a, views = pair.frozen("A")
    thread = run_frozen(a, views)
    pair.world.clock.advance(LEASE - margin + 1)  # 14 s of lease left
    views.release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert pair.fake.messages == []
    ledger = Ledger(pair.stores[0].storage)
    [row] = [d for d in ledger.all() if d.action == "post_root"]
    assert (row.state, (row.lease_owner or "").split("/")[0]) == ("UNKNOWN", "A")  # in doubt
    pair.world.clock.advance(margin)  # the lease ran out: the next worker reconciles
    b = pair.worker("B")
    wait_for(lambda: b.run_due(limit=1) and pair.fake.roots(), 10, "B to post the root")
    assert len(pair.fake.messages) == 1


def test_the_margin_is_a_quarter_of_the_lease_at_least_5s_at_most_half() -> None:
    leases = (2, 8, 12, 20, 60, 300)
    margins = [send_margin(timedelta(seconds=s)).total_seconds() for s in leases]
    assert margins == [1.0, 4.0, 5.0, 5.0, 15.0, 75.0]


class SlowPost(SlackTransport):
    """A transport whose chat.postMessage is held in flight until released, as a slow Slack
    call can be."""

    def __init__(self, token: str, api_url: str) -> None:
        super().__init__(token, api_url, timeout=5)
        self.in_post, self.go = threading.Event(), threading.Event()

    def post(self, *args: Any, **kwargs: Any) -> Any:
        self.in_post.set()
        self.go.wait(10)
        return super().post(*args, **kwargs)


def test_two_threads_of_one_worker_cannot_send_on_each_other_s_claim(pair: Pair) -> None:
    """The alerts loop and the watchdog's turn deliver through one DeliveryWorker, one owner
    name. A, frozen past its lease, resumed while B (the same worker's other thread) had
    taken the row over and was posting: A's re-check compared only the owner and passed, and
    Slack got two roots. Each claim now holds the row under a name of its own."""
    a, views = pair.frozen("worker-one")
    thread = run_frozen(a, views)  # the alerts loop's turn, frozen after its claim
    pair.world.clock.advance(LEASE + 1)  # its lease lapsed
    store = StateStore.open(dsn=pair.state_dsn)
    pair.stores.append(store)
    slow = SlowPost(TOKEN, pair.fake.api_url)
    b = DeliveryWorker(
        Ledger(store.storage),
        slow,
        Views(store, lambda _: None, pair.world.clock),
        pair.world.clock,
        SETTINGS,
        owner="worker-one",  # the same worker's other thread
    )
    b.run_due(limit=1)  # reconciles A's row (not in Slack): PENDING again
    posting = threading.Thread(target=lambda: b.run_due(limit=1), name="test-b-posting")
    posting.start()
    try:
        assert slow.in_post.wait(10), "B never reached its post"
        views.release.set()  # A resumes while B's post is in flight
        thread.join(10)
        assert not thread.is_alive()
    finally:
        slow.go.set()
        posting.join(10)
    assert not posting.is_alive()
    assert len(pair.fake.roots()) == 1


class FlakyLedger(Ledger):
    """The store refuses the first renewal, as a locked SQLite file or a PostgreSQL store's
    blip does; later ones go through. Counts every renewal asked."""

    def __init__(self, storage: Any) -> None:
        super().__init__(storage)
        self.renewals = 0
        self._counting = threading.Lock()  # guards renewals: the keeper thread counts

    def renew(self, delivery: Any, until: Any) -> bool:
        with self._counting:
            self.renewals += 1
            first = self.renewals == 1
        if first:
            raise sqlite3.OperationalError("database is locked")
        return super().renew(delivery, until)


def test_one_failed_renewal_does_not_end_the_renewals(pair: Pair) -> None:
    """The keeper thread died on the first store error (a bare traceback on stderr), so the
    lease lapsed while the work went on. It now says so and renews at the next period."""
    store = StateStore.open(dsn=pair.state_dsn)
    pair.stores.append(store)
    views = FreezingViews(store, pair.world.clock)
    ledger = FlakyLedger(store.storage)
    quick = WorkerSettings(lease=timedelta(seconds=0.6), settle=timedelta(seconds=0))
    worker = DeliveryWorker(
        ledger,
        SlackTransport(TOKEN, pair.fake.api_url, timeout=5),
        views,
        pair.world.clock,
        quick,
        owner="flaky",
    )
    thread = run_frozen(worker, views)  # claimed, held while frozen: the keeper renews
    try:
        wait_for(lambda: ledger.renewals >= 3, 30, "two renewals after the failed one")
    finally:
        views.release.set()
        thread.join(30)
    assert not thread.is_alive()
