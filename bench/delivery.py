"""Delivery under Slack's rate limit: N incidents opening at once, through the real daemon.

    python bench/delivery.py [--incidents 200] [--seed N] [--json]

Each configuration starts a real `Daemon` (the object `invmon run` serves: its scheduler,
evaluation pool, alerts thread and watchdog) over N violated invariants. Every invariant's
first run happens at start-up, so the N incidents open within a second or two of each other;
the alerts thread plans and delivers them as it always does, once a second. Slack is the
tests' fake Web API (tests/fake_slack.py, a real HTTP server reached through slack-sdk) with
its per-channel token bucket on chat.postMessage: about one message a second, a short burst
allowed, 429 with Retry-After beyond that.

Two configurations: the digest as shipped (`digest_threshold` 5: a burst is one message with
each incident's own message in its thread) and the digest off (a threshold above the burst:
`digest_threshold` has no off switch, and a threshold of N + 1 can never be reached).

Measured from the daemon's start, from the ledger's own timestamps (so the figures do not
depend on how often this script polls): when the incidents opened, when every incident had a
root in the channel (its own message, or the digest it is in), when every incident's own
message was in Slack, and when everything (the CSV files too) was. Also the posts the channel
received, the top-level ones (what scrolls by in the channel), the 429s, whether any post was
retried before its Retry-After had passed, and exactly-once: every idempotency key in Slack
exactly once, and one CSV per incident.

PostgreSQL: INVMON_TEST_DSN or --dsn (an admin DSN; a scratch database is created and dropped).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# A bench script, not a package: the repository root gives `monitor`, `alerts` and the tests'
# fake Slack (imported as the tests import it, from tests/).
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fake_slack import TOKEN, FakeSlack  # noqa: E402

from monitor.authoring.pgtemp import scratch_database  # noqa: E402
from monitor.clock import parse_stamp  # noqa: E402
from monitor.config import Config, DatabaseConfig, HttpConfig, SlackConfig  # noqa: E402
from monitor.daemon.assembly import assemble  # noqa: E402
from monitor.store.state import StateStore  # noqa: E402

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
CHANNEL = "#invariants"
CHANNEL_ID = "C0INVARIANTS"  # what the fake Slack calls #invariants
OWN_MESSAGE = ("post_root", "post_detail")  # an incident's own message, alone or in a digest

INVARIANT = """\
-- description: Bench incident {i}. No item of its range is marked bad.
-- severity: {severity}
-- owner: "@bench"
-- key: [id]
SELECT id, note FROM items WHERE bad AND id BETWEEN {lo} AND {hi}
"""


@dataclass
class Attempt:
    """One chat.postMessage as the fake Slack saw it."""

    at: float  # monotonic
    key: str | None
    retry_after: int | None  # None: accepted


class MeteredSlack(FakeSlack):
    """The fake Slack, also noting each chat.postMessage attempt with its key and outcome, so
    the bench can tell whether a retry came before the Retry-After it was given."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.attempts: list[Attempt] = []

    def _throttle(self, method: str, args: dict[str, Any]) -> int | None:
        wait = super()._throttle(method, args)
        if method == "chat.postMessage":
            metadata = args.get("metadata")
            if isinstance(metadata, str):
                metadata = json.loads(metadata)
            key = ((metadata or {}).get("event_payload") or {}).get("key")
            with self.lock:
                self.attempts.append(Attempt(time.monotonic(), key, wait))
        return wait


@dataclass
class Digest:
    incidents: int
    planned_s: float  # since the daemon started
    sent_s: float | None
    attempts: int  # chat.postMessage calls it took


@dataclass
class Result:
    config: str
    incidents: int
    digest_threshold: int
    opened_first_s: float = 0.0  # since the daemon started
    opened_last_s: float = 0.0
    all_roots_s: float | None = None  # every incident visible at the top of the channel
    half_roots_s: float | None = None  # half of them
    all_own_messages_s: float | None = None  # every incident's own message, with its buttons
    all_delivered_s: float | None = None  # everything, CSV files included
    wall_s: float = 0.0  # this configuration, start to stop
    posts: int = 0  # messages chat.postMessage put in the channel (roots, digests, replies)
    top_level: int = 0  # of which at the top of the channel, not in a thread
    digests: list[Digest] = field(default_factory=list)
    files_shared: int = 0
    post_requests: int = 0  # chat.postMessage requests, accepted or not
    rate_limited: int = 0  # 429s answered
    early_retries: int = 0  # a post retried before its Retry-After had passed
    max_attempts: int = 0  # the most calls one delivery took
    ledger: dict[str, int] = field(default_factory=dict)
    duplicate_keys: int = 0  # keys in Slack more than once (exactly once: 0)
    incidents_without_one_csv: int = 0
    exactly_once: bool = False
    complete: bool = False


def monitored_table(dsn: str, incidents: int, rng: random.Random) -> list[tuple[int, int]]:
    """`items`, with 1 to 5 bad rows in each incident's range (seeded): the CSVs differ."""
    import psycopg

    ranges = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, note text, bad bool NOT NULL)")
        conn.execute(
            "INSERT INTO items SELECT g, 'item ' || g, false FROM generate_series(1, %s) g",
            (incidents * 10,),
        )
        for i in range(incidents):
            lo = i * 10 + 1
            bad = rng.randint(1, 5)
            conn.execute("UPDATE items SET bad = true WHERE id BETWEEN %s AND %s", (lo, lo + bad))
            ranges.append((lo, lo + 9))
    return ranges


def write_invariants(folder: Path, ranges: list[tuple[int, int]], rng: random.Random) -> None:
    folder.mkdir()
    for i, (lo, hi) in enumerate(ranges):
        severity = rng.choice(["critical", "warning", "warning", "info"])
        text = INVARIANT.format(i=i, severity=severity, lo=lo, hi=hi)
        (folder / f"bench_{i:04d}.sql").write_text(text)


def seconds_since(start: datetime, stamps: list[str]) -> float | None:
    return max((parse_stamp(s) - start).total_seconds() for s in stamps) if stamps else None


def progress(store: StateStore) -> tuple[int, int, int]:
    """(incidents open, deliveries in all, deliveries SENT), read from the state store."""
    with store.storage.transaction() as tx:
        [(opened,)] = tx.rows(
            "SELECT count(*) FROM incidents WHERE kind = 'violation' AND resolved_at IS NULL"
        )
        [(total, sent)] = tx.rows(
            "SELECT count(*), coalesce(sum(CASE WHEN state = 'SENT' THEN 1 ELSE 0 END), 0)"
            " FROM deliveries"
        )
    return int(opened), int(total), int(sent)


def run(
    name: str,
    admin_dsn: str,
    incidents: int,
    seed: int,
    digest_threshold: int,
    rate: float,
    burst: int,
    deadline: float,
) -> Result:
    rng = random.Random(seed)
    result = Result(name, incidents, digest_threshold)
    fake = MeteredSlack(seed=seed, post_rate=(rate, burst))
    with (
        scratch_database(admin_dsn, prefix="invmon_bench") as dsn,
        tempfile.TemporaryDirectory(prefix="invmon-bench-") as scratch,
        fake,
    ):
        folder = Path(scratch) / "invariants"
        write_invariants(folder, monitored_table(dsn, incidents, rng), rng)
        store = StateStore.open(path=Path(scratch) / "state.db")
        # Everything as shipped but where Slack is, and the digest threshold.
        config = Config(
            invariants=folder,
            http=HttpConfig(listen=None),
            # The scratch database is the admin DSN's: a superuser, refused unless allowed.
            database=DatabaseConfig(allow_privileged_role=True),
            slack=SlackConfig(
                token=TOKEN,
                api_url=fake.api_url,
                channel=CHANNEL,
                digest_threshold=digest_threshold,
            ),
        )
        daemon = assemble(config, dsn, store)
        began = time.monotonic()
        start = datetime.now(UTC)
        daemon.start()
        try:
            # Poll the ledger until every incident is open and every delivery is SENT: the
            # daemon's own threads do the work; this only watches, with a deadline.
            while time.monotonic() - began < deadline:
                opened, total, sent = progress(store)
                if opened == incidents and total and sent == total:
                    result.complete = True
                    break
                time.sleep(0.2)
            result.wall_s = time.monotonic() - began
        finally:
            daemon.shutdown()
        measure(result, store, fake, start)
        store.close()
    return result


def measure(result: Result, store: StateStore, fake: MeteredSlack, start: datetime) -> None:
    with store.storage.transaction() as tx:
        events = [str(s) for (s,) in tx.rows("SELECT created_at FROM events WHERE kind = 'opened'")]
        rows = tx.rows(
            "SELECT incident_id, action, state, updated_at, attempts, payload_json, created_at"
            " FROM deliveries ORDER BY id"
        )
        roots = tx.rows(
            "SELECT r.incident_id, d.state, d.updated_at FROM alert_roots r"
            " JOIN deliveries d ON d.id = r.delivery_id"
        )
    opened = sorted((parse_stamp(s) - start).total_seconds() for s in events)
    result.opened_first_s, result.opened_last_s = (opened[0], opened[-1]) if opened else (0, 0)
    complete = len(opened) == result.incidents
    states = Counter(str(state) for _, _, state, *_ in rows)
    result.ledger = dict(states)
    result.max_attempts = max((int(r[4]) for r in rows), default=0)
    result.digests = [
        Digest(
            len(json.loads(str(r[5])).get("incidents", [])),
            round((parse_stamp(str(r[6])) - start).total_seconds(), 3),
            round((parse_stamp(str(r[3])) - start).total_seconds(), 3) if r[2] == "SENT" else None,
            int(r[4]),
        )
        for r in rows
        if r[1] == "post_digest"
    ]
    # Each incident is visible once its alert_roots row (own root or digest) is SENT.
    visible = [str(at) for _, state, at in roots if state == "SENT"]
    if complete and len(visible) == len(roots) == result.incidents:
        result.all_roots_s = seconds_since(start, visible)
        half = sorted(visible)[: len(visible) // 2]  # ISO stamps of one format sort by time
        result.half_roots_s = seconds_since(start, half)
    own = [r for r in rows if r[1] in OWN_MESSAGE]
    if complete and len(own) == result.incidents and all(r[2] == "SENT" for r in own):
        result.all_own_messages_s = seconds_since(start, [str(r[3]) for r in own])
    if complete and set(states) == {"SENT"}:
        result.all_delivered_s = seconds_since(start, [str(r[3]) for r in rows])

    with fake.lock:
        posts = [m for m in fake.messages if not m.files]
        files = [f for f in fake.files.values() if f.shares]
        attempts = list(fake.attempts)
    result.posts = len(posts)
    result.top_level = sum(1 for m in posts if m.thread_ts is None)
    result.files_shared = len(files)
    result.post_requests = len(attempts)
    result.rate_limited = sum(fake.rate_limited.values())
    result.early_retries = early_retries(attempts)
    # Exactly once: each key in Slack once, each incident's CSV shared once.
    keys = Counter(m.key for m in posts)
    result.duplicate_keys = sum(1 for k, n in keys.items() if k is None or n > 1)
    titles = Counter((f.title or "").split(":")[0] for f in files)
    invariants = {f"bench_{i:04d}" for i in range(result.incidents)}
    result.incidents_without_one_csv = sum(1 for i in invariants if titles[i] != 1)
    sent_posts = sum(1 for r in rows if r[1] in ("post_root", "post_detail", "post_digest"))
    result.exactly_once = (
        result.duplicate_keys == 0
        and result.incidents_without_one_csv == 0
        and len(keys) == sent_posts == result.posts
    )


def early_retries(attempts: list[Attempt]) -> int:
    """Posts of a key that came before the Retry-After its previous 429 asked for (a tenth of
    a second of slack for the clocks: the ledger's due time and this process's monotonic)."""
    early = 0
    last_429: dict[str, tuple[float, int]] = {}
    for attempt in attempts:
        if attempt.key is None:
            continue
        before = last_429.get(attempt.key)
        if before is not None and attempt.at < before[0] + before[1] - 0.1:
            early += 1
        if attempt.retry_after is not None:
            last_429[attempt.key] = (attempt.at, attempt.retry_after)
    return early


def fmt(seconds: float | None) -> str:
    return "not reached" if seconds is None else f"{seconds:.1f} s"


def summary(result: Result, rate: float, burst: int) -> str:
    digests = "".join(
        f"\n  digest of {d.incidents:<3} incidents    planned {d.planned_s:.1f} s, "
        f"in the channel {fmt(d.sent_s)}, {d.attempts} chat.postMessage calls"
        for d in result.digests
    )
    return "\n".join(
        [
            f"{result.config} (digest_threshold {result.digest_threshold}): "
            f"{result.incidents} incidents, Slack at {rate:g} post/s per channel, "
            f"burst {burst}",
            f"  incidents opened            {result.opened_first_s:.1f} to "
            f"{result.opened_last_s:.1f} s after start",
            f"  every incident in channel   {fmt(result.all_roots_s)} "
            f"(half of them: {fmt(result.half_roots_s)})",
            f"  every incident's own msg    {fmt(result.all_own_messages_s)}",
            f"  everything (CSVs too)       {fmt(result.all_delivered_s)}",
            f"  posts in the channel        {result.posts} "
            f"({result.top_level} top-level, {result.posts - result.top_level} in threads); "
            f"{result.files_shared} CSV files{digests}",
            f"  chat.postMessage requests   {result.post_requests}, of which 429: "
            f"{result.rate_limited}; retried before Retry-After: {result.early_retries}; "
            f"most calls for one delivery: {result.max_attempts}",
            f"  exactly once                {'yes' if result.exactly_once else 'NO'} "
            f"(duplicate keys {result.duplicate_keys}, incidents without exactly one CSV "
            f"{result.incidents_without_one_csv}; ledger {result.ledger})",
            f"  wall time                   {result.wall_s:.1f} s"
            + ("" if result.complete else " (DEADLINE: not everything was delivered)"),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--incidents", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0, help="offending rows and severities")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--dsn", default=None, help="admin DSN (default: INVMON_TEST_DSN)")
    parser.add_argument("--rate", type=float, default=1.0, help="posts per second per channel")
    parser.add_argument("--burst", type=int, default=4, help="posts allowed at once")
    parser.add_argument(
        "--only", choices=["digest", "no-digest"], default=None, help="one configuration"
    )
    parser.add_argument(
        "--deadline", type=float, default=1200, help="seconds per configuration before giving up"
    )
    parser.add_argument("--verbose", action="store_true", help="the daemon's own log lines")
    args = parser.parse_args(argv)
    import os

    admin_dsn = args.dsn or os.environ.get("INVMON_TEST_DSN") or DEFAULT_DSN
    # The daemon logs each opened event as a warning: 200 lines say nothing here.
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR, stream=sys.stderr)
    configurations = [("digest", 5), ("no-digest", args.incidents + 1)]
    results = []
    for name, threshold in configurations:
        if args.only and args.only != name:
            continue
        result = run(
            name,
            admin_dsn,
            args.incidents,
            args.seed,
            threshold,
            args.rate,
            args.burst,
            args.deadline,
        )
        results.append(result)
        if not args.json:
            print(summary(result, args.rate, args.burst), flush=True)
    if args.json:
        document = {
            "incidents": args.incidents,
            "seed": args.seed,
            "rate_per_second": args.rate,
            "burst": args.burst,
            "configurations": [asdict(r) for r in results],
        }
        print(json.dumps(document, indent=2))
    ok = all(r.complete and r.exactly_once for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    sys.exit(main())
