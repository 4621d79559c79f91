"""The scripted incident the alert tests drive, and what Slack must show at the end; the
World it runs in (also on a PostgreSQL store), and daemons that deliver at once."""

from __future__ import annotations

import contextlib
import csv
import io
import random
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from builders import build_daemon, daemon_config, quick_slack
from fake_slack import FakeSlack
from helpers import FakeClock, sql

from alerts.transport import TransportError
from monitor.authoring.pgtemp import scratch_database
from monitor.config import DaemonConfig, TargetConfig
from monitor.daemon.daemon import Daemon
from monitor.store.state import StateStore

INVARIANT = """\
-- description: No item is marked bad.
-- severity: critical
-- owner: "@payments"
-- key: [id]
SELECT id, note FROM items WHERE bad
"""

# Opens with rows 1 and 2, then row 3 appears and row 1 goes, then everything is fixed.
CHANGES = [
    "UPDATE items SET bad = id IN (1, 2)",
    "UPDATE items SET bad = id IN (2, 3)",
    "UPDATE items SET bad = false",
]
EVENTS_AFTER_STEP = [1, 3, 4]  # opened; keys_appeared + keys_gone; resolved


def csv_rows(fake: FakeSlack) -> list[list[dict[str, str]]]:
    out = []
    for file in fake.shared_files():
        assert file.data is not None
        out.append(list(csv.DictReader(io.StringIO(file.data.decode()))))
    return out


def assert_one_clean_incident(fake: FakeSlack, label: str) -> None:
    """The user-visible outcome of the scripted incident: exactly once, in order."""
    roots = fake.roots()
    assert len(roots) == 1, f"{label}: {len(roots)} root messages"
    [root] = roots
    assert root.blocks[0]["text"]["text"].startswith("✅ RESOLVED · bad_items"), label
    thread = fake.thread(root)
    kinds = []
    for message in thread:
        if message.files:
            kinds.append("csv")
        else:
            kinds.append(message.text.split(" ")[0])
    # Row 3 appeared and row 1 went in one run: one reply says both (at most one reply per
    # incident per slack.thread_update_interval).
    assert kinds == ["csv", "🔁", "✅"], f"{label}: thread was {kinds}"
    keys = [m.key for m in thread if m.key]
    assert len(keys) == len(set(keys)), f"{label}: a message was posted twice"
    [rows] = csv_rows(fake)
    assert sorted(rows, key=lambda r: r["id"]) == [
        {"id": "1", "note": "item 1"},
        {"id": "2", "note": "item 2"},
    ], label
    assert len(fake.files) >= 1


@dataclass
class World:
    dsn: str
    folder: Path
    store: StateStore
    clock: FakeClock

    def daemon(
        self, fake: FakeSlack, targets: dict[str, dict[str, object]] | None = None, **slack: object
    ) -> Daemon:
        """`targets`: named targets beside the default one (this world's database)."""
        config = daemon_config(
            self.folder,
            daemon=DaemonConfig(),
            targets={n: TargetConfig.model_validate(t) for n, t in (targets or {}).items()},
            dsn=self.dsn if targets else None,  # beside named targets, `default` is named too
            slack=quick_slack(fake, **slack),
        )
        daemon = build_daemon(config, self.dsn, self.store, self.clock, call_timeout=0.3)
        daemon.reload()
        return daemon


@contextlib.contextmanager
def postgres_world(database: str, folder: Path, admin_dsn: str) -> Iterator[World]:
    """A World watching `database` with `folder`'s invariants, its state in a PostgreSQL
    store of its own, dropped at the end."""
    with scratch_database(admin_dsn, prefix="invmon_state") as state_dsn:
        store = StateStore.open(dsn=state_dsn)
        try:
            yield World(database, folder, store, FakeClock())
        finally:
            store.close()


def deliver_together(daemons: Sequence[Daemon], rounds: int) -> None:
    """Each daemon delivers `rounds` times on a thread of its own, all starting at once."""
    barrier = threading.Barrier(len(daemons))

    def work(daemon: Daemon) -> None:
        barrier.wait()
        for _ in range(rounds):
            daemon.deliver()

    threads = [threading.Thread(target=work, args=(d,)) for d in daemons]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def settle(daemon: Daemon, clock: FakeClock, label: str, rounds: int = 300) -> None:
    """Deliver, moving the clock on a second at a time, until no event waits and no
    delivery is UNKNOWN, nor PENDING and due within `rounds` seconds. One planned for later
    than that (the root's update when a snooze ends) is left for its time."""
    counts: dict[str, int] = {}
    horizon = clock() + timedelta(seconds=rounds)
    for _ in range(rounds):
        daemon.deliver()
        counts = daemon.alerter.ledger.counts()
        waiting = daemon.store.pending_events()
        due = daemon.alerter.ledger.next_due()
        if not counts.get("UNKNOWN") and not waiting and (due is None or due > horizon):
            return
        clock.advance(1)
    raise AssertionError(f"{label}: deliveries did not settle: {counts}")


def script(world: World, daemon: Daemon, step: int) -> None:
    sql(world.dsn, CHANGES[step])
    world.clock.advance(60)
    daemon.evaluate("bad_items")


def crash(daemon: Daemon, fake: FakeSlack, rng: random.Random) -> None:
    """Simulate a worker killed at a random point: after claiming a row, and sometimes after
    Slack accepted the call but before the answer was recorded."""
    claimed = daemon.alerter.ledger.claim("doomed-worker", daemon.clock(), timedelta(seconds=30))
    if claimed is None or rng.random() < 0.5:
        return
    delivery, state = claimed
    if state == "PENDING" and delivery.action in ("post_root", "post_reply") and rng.random() < 0.7:
        with contextlib.suppress(TransportError):
            daemon.alerter.worker._perform(delivery)  # the effect lands...
        # ...and the worker dies before recording it: the claim stays as it was, and what
        # the ledger counted of it (alerts/ledger.py, count_sent) is undone with it.
        with daemon.store.storage.transaction() as tx:
            if tx.rows("SELECT state FROM deliveries WHERE id = ?", (delivery.id,)) == [("SENT",)]:
                tx.run("UPDATE delivery_counts SET n = n - 1 WHERE state = 'SENT'")
            tx.run(
                "UPDATE deliveries SET state = 'UNKNOWN', lease_owner = 'doomed-worker',"
                " lease_until = ? WHERE id = ?",
                (
                    (daemon.clock() + timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                    delivery.id,
                ),
            )
