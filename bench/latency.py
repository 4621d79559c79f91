"""From a committed violation to the Slack message: how long, and how much of it is invmon's.

    python bench/latency.py [--dsn ADMIN_DSN] [--trials 100] [--json]

The monitored database is a real streaming pair (tests/standby.py: a primary and a hot
standby fed by streaming replication, built from PostgreSQL's own binaries); the daemon
watches the standby, as it watches a read replica. The daemon is the real one (`assemble`,
the object `invmon run` serves: scheduler, workers, alerts thread), its state store a
scratch PostgreSQL database, Slack the tests' fake Web API (tests/fake_slack.py) with its
per-channel limit on chat.postMessage (1 a second, a burst of 4).

Ten invariants (`schedule: every 3s`, each watching one row of `items` and posting to its
own channel) run ten trials each, side by side: a trial commits `bad = true` on the primary
(T0: the commit returned), notes when the standby shows it (T1, polled every 2 ms: the
replica lag), waits for the incident's root message in the fake Slack (T2: when the fake
accepted the chat.postMessage), then commits the fix and waits for the incident to resolve
before the next trial (at a random moment of the schedule's period, so trials do not line up
with slots).

For each trial:
- due: the moment the slot whose run opened the incident was due (its slot, from the run's
  row, plus its stable jitter, monitor/daemon/slots.spread, which is what the scheduler waits);
- slot due -> root posted: T2 - due;
- commit -> root posted: T2 - T0, of which the replica lag T1 - T0;
- invmon's own time: T2 - max(due, T1), what remains past both the schedule and the lag
  (the run cannot see the row before T1 nor start before its slot is due).
Checked: every trial's incident opened exactly once and got exactly one root message.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import psycopg  # noqa: E402
from fake_slack import TOKEN, FakeSlack  # noqa: E402
from standby import running_standby_pair  # noqa: E402

from monitor.authoring.pgtemp import scratch_database  # noqa: E402
from monitor.clock import parse_stamp  # noqa: E402
from monitor.config import Config, DatabaseConfig, HttpConfig, SlackConfig  # noqa: E402
from monitor.daemon.assembly import assemble  # noqa: E402
from monitor.daemon.slots import spread  # noqa: E402
from monitor.durations import parse_schedule  # noqa: E402
from monitor.store.state import StateStore  # noqa: E402

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
SCHEDULE = "every 3s"
JITTER = timedelta(seconds=10)  # daemon.jitter as shipped; capped at a tenth of the period
LANES = 10
INVARIANT = """-- description: Latency bench {i}, item {i} is not bad.
-- severity: warning
-- owner: "@bench"
-- channel: "#bench-{i}"
-- key: [id]
-- schedule: {schedule}
SELECT id, note FROM items WHERE bad AND id = {i}
"""


class TimedSlack(FakeSlack):
    """The fake Slack, noting when it accepted each top-level message, by channel."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.roots_at: dict[str, list[tuple[float, str]]] = {}

    def call(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        answer = super().call(method, args)
        if method == "chat.postMessage" and answer.get("ok") and not args.get("thread_ts"):
            self.roots_at.setdefault(str(answer["channel"]), []).append(
                (time.time(), str(args.get("text", "")))
            )
        return answer


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def wait_for(condition: Any, seconds: float, what: str, pace: float = 0.002) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(pace)
    raise SystemExit(f"timed out after {seconds:.0f} s waiting for {what}")


def lane(
    i: int,
    trials: int,
    primary: str,
    standby: str,
    store: StateStore,
    fake: TimedSlack,
    rng: random.Random,
    out: list[dict[str, Any]],
) -> None:
    channel = f"C0BENCH{i}"
    name = f"lat_{i}"
    with psycopg.connect(primary, autocommit=True) as p, psycopg.connect(standby) as s:
        s.autocommit = True
        for _ in range(trials):
            time.sleep(rng.uniform(0, 3))  # anywhere in the schedule's period
            seen = len(fake.roots_at.get(channel, []))
            p.execute("UPDATE items SET bad = true WHERE id = %s", (i,))
            t0 = time.time()

            def replayed() -> bool:
                row = s.execute("SELECT bad FROM items WHERE id = %s", (i,)).fetchone()
                return bool(row and row[0])

            wait_for(replayed, 30, f"the standby to show item {i}")
            t1 = time.time()

            def posted(seen: int = seen) -> float | None:
                roots = fake.roots_at.get(channel, [])
                return roots[seen][0] if len(roots) > seen else None

            t2 = wait_for(posted, 60, f"the root message of {name}", pace=0.01)
            p.execute("UPDATE items SET bad = false WHERE id = %s", (i,))

            def resolved() -> bool:
                with store.storage.transaction() as tx:
                    rows = tx.rows(
                        "SELECT count(*) FROM incidents WHERE invariant = ? AND"
                        " resolved_at IS NULL",
                        (name,),
                    )
                return int(rows[0][0]) == 0

            wait_for(resolved, 60, f"{name}'s incident to resolve", pace=0.05)
            with store.storage.transaction() as tx:
                [(slot, started, finished, planned)] = tx.rows(
                    "SELECT r.slot, r.started_at, r.finished_at, d.created_at"
                    " FROM incidents i JOIN events e ON e.incident_id = i.id"
                    " AND e.kind = 'opened' JOIN runs r ON r.id = e.run_id"
                    " JOIN alert_roots a ON a.incident_id = i.id"
                    " JOIN deliveries d ON d.id = a.delivery_id"
                    " WHERE i.invariant = ? ORDER BY i.id DESC LIMIT 1",
                    (name,),
                )
            at = parse_stamp(str(slot))
            due = (at + spread(name, at, parse_schedule(SCHEDULE), JITTER)).timestamp()
            began, ended = (parse_stamp(str(v)).timestamp() for v in (started, finished))
            planned_at = parse_stamp(str(planned)).timestamp()
            out.append(
                {
                    "lane": i,
                    "lag_s": t1 - t0,
                    "commit_to_root_s": t2 - t0,
                    "due_to_root_s": t2 - due,
                    "own_s": t2 - max(due, t1),
                    "commit_to_due_s": due - t0,
                    # Where invmon's time goes, from the store's own timestamps: the slot due
                    # to its run started (the one-second tick), the run, the stored run to
                    # the alert planned (the alerts turn, once a second, and the digest's
                    # quiet window), planned to accepted by Slack.
                    "due_to_started_s": began - due,
                    "run_s": ended - began,
                    "stored_to_planned_s": planned_at - ended,
                    "planned_to_root_s": t2 - planned_at,
                }
            )


def run(admin_dsn: str, trials: int, seed: int) -> dict[str, Any]:
    per_lane = trials // LANES
    rng = random.Random(seed)
    channels = {f"C0BENCH{i}": f"bench-{i}" for i in range(LANES)}
    fake = TimedSlack(seed=seed, channels=channels, post_rate=(1.0, 4))
    with (
        running_standby_pair() as pair,
        scratch_database(admin_dsn, prefix="invmon_latency") as state,
        tempfile.TemporaryDirectory(prefix="invmon-latency-") as scratch,
        fake,
    ):
        with pair.primary() as conn:
            conn.execute("CREATE TABLE items (id int PRIMARY KEY, note text, bad bool NOT NULL)")
            conn.execute(
                "INSERT INTO items SELECT g, 'item ' || g, false FROM generate_series(0, %s) g",
                (LANES - 1,),
            )
        pair.wait_caught_up()
        folder = Path(scratch) / "invariants"
        folder.mkdir()
        for i in range(LANES):
            (folder / f"lat_{i}.sql").write_text(INVARIANT.format(i=i, schedule=SCHEDULE))
        store = StateStore.open(dsn=state)
        config = Config(
            invariants=folder,
            http=HttpConfig(listen=None),
            database=DatabaseConfig(allow_privileged_role=True),
            slack=SlackConfig(token=TOKEN, api_url=fake.api_url, channel="#bench-0"),
        )
        daemon = assemble(config, pair.standby_dsn, store)
        daemon.start()
        found: list[dict[str, Any]] = []
        try:
            # Every invariant has run once (each runs at start-up) before the first trial.
            def first_runs() -> bool:
                with store.storage.transaction() as tx:
                    [(n,)] = tx.rows("SELECT count(DISTINCT invariant) FROM runs")
                return int(n) == LANES

            wait_for(first_runs, 60, "every invariant's first run", pace=0.1)
            threads = [
                threading.Thread(
                    target=lane,
                    args=(
                        i,
                        per_lane,
                        pair.primary_dsn,
                        pair.standby_dsn,
                        store,
                        fake,
                        random.Random(rng.random()),
                        found,
                    ),
                    name=f"lane-{i}",
                )
                for i in range(LANES)
            ]
            began = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.monotonic() - began
        finally:
            daemon.shutdown()
        with store.storage.transaction() as tx:
            incidents = dict(
                tx.rows("SELECT invariant, count(*) FROM incidents GROUP BY invariant")
            )
        store.close()
    roots = {c: len(v) for c, v in fake.roots_at.items()}
    checks = {
        "trials": len(found),
        "incidents_per_invariant": sorted({int(n) for n in incidents.values()}),
        "roots_per_channel": sorted(set(roots.values())),
        "rate_limited": sum(fake.rate_limited.values()),
    }
    if (
        len(found) != per_lane * LANES
        or checks["incidents_per_invariant"] != [per_lane]
        or checks["roots_per_channel"] != [per_lane]
    ):
        raise SystemExit(f"not one incident and one root per trial: {checks}")

    def stats(key: str) -> dict[str, float]:
        values = [t[key] * 1000 for t in found]
        return {
            "p50": statistics.median(values),
            "p99": percentile(values, 0.99),
            "min": min(values),
            "max": max(values),
        }

    return {
        "trials": len(found),
        "lanes": LANES,
        "schedule": SCHEDULE,
        "rate_per_second": 1.0,
        "burst": 4,
        "wall_s": wall,
        "checks": checks,
        "lag_ms": stats("lag_s"),
        "due_to_root_ms": stats("due_to_root_s"),
        "commit_to_root_ms": stats("commit_to_root_s"),
        "own_ms": stats("own_s"),
        "parts_ms": {
            part: stats(f"{part}_s")
            for part in ("due_to_started", "run", "stored_to_planned", "planned_to_root")
        },
        "load_average": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dsn", default=os.environ.get("INVMON_TEST_DSN") or DEFAULT_DSN)
    parser.add_argument("--trials", type=int, default=100, help="a multiple of 10")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    with contextlib.suppress(KeyboardInterrupt):
        result = run(args.dsn, args.trials, args.seed)
        print(json.dumps(result, indent=2), file=sys.stdout if args.json else sys.stderr)
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
