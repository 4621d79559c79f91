"""The status page at 1,000 invariants x 30 days of runs, on a PostgreSQL state store.

    python bench/page.py [--dsn ADMIN_DSN] [--invariants 1000] [--days 30] [--json]

The store (a scratch database, migrated by StateStore.open) is filled in PostgreSQL itself:
for each of the 1,000 invariants (bench/scale.py's files, loaded as the daemon loads them)
every 15-minute slot of the last 30 days but the newest, 2,879 runs, is one row of a single
`INSERT … SELECT` over `generate_series` (invariant x slot; one run in ten of the violated
invariants' history violated, the others ok; counts, durations, lag and the slot filled like
a daemon's), then ANALYZE. The newest run of each invariant is stored through
StateStore.record_run, the daemon's own path, so each invariant's state, and the incidents of
the one in ten violated, are what a daemon would have left. Checked before anything is
timed: runs == invariants x 2,880, every invariant exactly 2,880, open incidents == the
violated ones, and `/` lists every invariant.

The page is served as the tests serve it (tests/web/test_status_page_http.py): StatusPage
behind the daemon's real listener (monitor/daemon/http.Listener, waitress) on 127.0.0.1, the
page's cache clock given by this script so that each timed request finds the cache expired
(a cold build, as the first visitor after CACHE_SECONDS pays it). Time to first byte is from
sending the request to reading the status line (http.client), over fresh connections:
`/` and `/invariants/NAME?window=30d` (NAME the violated invariant with the most runs), the
median and the highest of `--repeat` cold requests each, the cold ones interleaved (/, then
detail, …). Then 8 client threads fetch pages (`/`, and detail pages of random invariants
and windows, each mostly a cache miss) for `--load-seconds`, while a probe asks /healthz
every 20 ms: its p50/p99 latency, full response, under that load. The clients and the probe
each run in a process of their own, as a daemon's clients do: in this process they would
share the server's GIL, and the probe would time this script as much as the daemon.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT)]

import psycopg  # noqa: E402
import scale  # noqa: E402

from monitor.authoring.pgtemp import scratch_database  # noqa: E402
from monitor.config import HttpConfig  # noqa: E402
from monitor.daemon.http import Listener, Probe, Routes  # noqa: E402
from monitor.execution.results import RunResult  # noqa: E402
from monitor.execution.rows import offending_key  # noqa: E402
from monitor.invariants.loader import LoadMemo, load_directory  # noqa: E402
from monitor.store.context import IncidentContext  # noqa: E402
from monitor.store.state import StateStore  # noqa: E402
from monitor.web.page import CACHE_SECONDS, StatusPage  # noqa: E402

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
PERIOD = timedelta(minutes=15)

FILL = """
INSERT INTO runs (invariant, started_at, finished_at, status, count, error,
                  replica_lag_seconds, duration_ms, columns_json, sample_json, target, slot,
                  listing_ms)
SELECT n.name,
       to_char(s.at + interval '1 second', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
       to_char(s.at + interval '1.2 seconds', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
       CASE WHEN n.violated AND s.k %% 10 = 0 THEN 'violated' ELSE 'ok' END,
       CASE WHEN n.violated AND s.k %% 10 = 0 THEN 1 + s.k %% 7 ELSE 0 END,
       NULL, 0.2, 4 + (s.k %% 13), '[]', '[]', 'default',
       to_char(s.at, 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), NULL
FROM unnest(%(names)s::text[], %(violated)s::bool[]) AS n (name, violated)
CROSS JOIN LATERAL (
    SELECT k, %(first)s::timestamp + k * interval '15 minutes' AS at
    FROM generate_series(0, %(older)s - 1) AS k
) AS s
ORDER BY s.k, n.name
"""


class Ticks:
    """The page cache's clock: moved past CACHE_SECONDS before each cold request."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def expire(self) -> None:
        with self.lock:
            self.now += CACHE_SECONDS + 0.1


def ttfb(port: int, path: str) -> tuple[float, float, int, bytes]:
    """(seconds to the status line, seconds to the whole body, status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        began = time.perf_counter()
        conn.request("GET", path)
        response = conn.getresponse()
        first = time.perf_counter() - began
        body = response.read()
        return first, time.perf_counter() - began, response.status, body
    finally:
        conn.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def fill(store_dsn: str, names: list[str], violated: set[str], runs: int, now: datetime) -> float:
    older = runs - 1
    newest = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
    first = newest - older * PERIOD
    began = time.perf_counter()
    with psycopg.connect(store_dsn, autocommit=True) as conn:
        conn.execute(
            FILL,
            {
                "names": names,
                "violated": [n in violated for n in names],
                "first": first.replace(tzinfo=None),
                "older": older,
            },
        )
        conn.execute("ANALYZE")
    return time.perf_counter() - began


def record_newest(store: StateStore, invariants: dict[str, Any], violated: set[str]) -> None:
    now = datetime.now(UTC)
    slot = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
    for name in invariants:
        ids = [1, 2] if name in violated else []
        rows: list[dict[str, object]] = [{"id": i, "note": f"item {i}"} for i in ids]
        result = RunResult(
            name,
            "violated" if ids else "ok",
            len(ids),
            columns=["id", "note"],
            rows=rows,
            started_at=slot + timedelta(seconds=1),
            duration_ms=5.0,
            keys={offending_key(r, ["id"]): r for r in rows},
            replica_lag=0.2,
        )
        context = IncidentContext(severity="warning", description=name, owner="@bench")
        store.record_run(name, result, slot + timedelta(seconds=1.2), context=context)


def run(admin_dsn: str, count: int, days: int, repeat: int, load_seconds: float) -> dict[str, Any]:
    runs_each = days * 24 * 4
    with (
        scratch_database(admin_dsn, prefix="invmon_page") as store_dsn,
        tempfile.TemporaryDirectory(prefix="invmon-page-") as scratch,
    ):
        folder = Path(scratch) / "invariants"
        scale.write(folder, count)
        loaded = {i.name: i for i in load_directory(folder, memo=LoadMemo()).invariants}
        if len(loaded) != count:
            raise SystemExit(f"{len(loaded)} invariants loaded of {count}")
        names = sorted(loaded)
        violated = {n for i, n in enumerate(names) if i % 10 == 0}
        store = StateStore.open(dsn=store_dsn)
        fill_s = fill(store_dsn, names, violated, runs_each, datetime.now(UTC))
        began = time.perf_counter()
        record_newest(store, loaded, violated)
        newest_s = time.perf_counter() - began
        with psycopg.connect(store_dsn, autocommit=True) as conn:
            conn.execute("ANALYZE")
            [(total,)] = conn.execute("SELECT count(*) FROM runs").fetchall()
            per = conn.execute("SELECT count(*) FROM runs GROUP BY invariant").fetchall()
            [(incidents,)] = conn.execute(
                "SELECT count(*) FROM incidents WHERE resolved_at IS NULL"
            ).fetchall()
            [(size,)] = conn.execute("SELECT pg_database_size(current_database())").fetchall()
        checks = {
            "runs": int(total),
            "runs_expected": count * runs_each,
            "invariants_with_runs": len(per),
            "runs_each": sorted({int(n) for (n,) in per}),
            "open_incidents": int(incidents),
            "open_expected": len(violated),
        }
        if (
            checks["runs"] != checks["runs_expected"]
            or checks["runs_each"] != [runs_each]
            or len(per) != count
            or checks["open_incidents"] != len(violated)
        ):
            raise SystemExit(f"the store is not what was planned: {checks}")

        ticks = Ticks()
        http_config = HttpConfig(listen="127.0.0.1:0")
        page = StatusPage(store, lambda: loaded, http_config, lambda: datetime.now(UTC), ticks)
        routes = Routes(
            healthz=Probe(lambda: None),
            readyz=Probe(lambda: None),
            metrics=lambda: b"",
            page=page,
        )
        listener = Listener("127.0.0.1:0", routes)
        listener.start()
        port = int(listener.address.rsplit(":", 1)[1])
        detail = f"/invariants/{sorted(violated)[0]}?window=30d"
        try:
            _, _, code, body = ttfb(port, "/")
            listed = sum(body.count(f">{n}<".encode()) > 0 for n in names)
            checks["listed_on_page"] = listed
            if code != 200 or listed != count:
                raise SystemExit(f"/ answered {code} listing {listed} of {count} invariants")
            code = ttfb(port, detail)[2]
            if code != 200:
                raise SystemExit(f"{detail} answered {code}")
            cold: dict[str, list[tuple[float, float]]] = {"/": [], "detail": []}
            warm: list[float] = []
            for _ in range(repeat):
                for key, path in (("/", "/"), ("detail", detail)):
                    ticks.expire()
                    first, whole, code, _ = ttfb(port, path)
                    assert code == 200
                    cold[key].append((first, whole))
                warm.append(ttfb(port, "/")[0])  # still cached
            load = under_load(port, names, load_seconds)
        finally:
            listener.stop()
            store.close()
    return {
        "invariants": count,
        "days": days,
        "runs_each": runs_each,
        "checks": checks,
        "fill_s": fill_s,
        "newest_s": newest_s,
        "store_bytes": int(size),
        "detail_path": detail,
        "repeat": repeat,
        "root_ttfb_ms": summary_ms([f for f, _ in cold["/"]]),
        "root_whole_ms": summary_ms([w for _, w in cold["/"]]),
        "detail_ttfb_ms": summary_ms([f for f, _ in cold["detail"]]),
        "detail_whole_ms": summary_ms([w for _, w in cold["detail"]]),
        "root_cached_ttfb_ms": summary_ms(warm),
        "load": load,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
    }


def summary_ms(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values) * 1000,
        "min": min(values) * 1000,
        "max": max(values) * 1000,
        "n": len(values),
    }


def under_load(port: int, names: list[str], seconds: float) -> dict[str, Any]:
    """8 clients fetch pages while a probe asks /healthz every 20 ms, each in a process of
    its own: as the daemon's clients are, so the probe's latency is the daemon's, not a
    share of this process's GIL with 8 client threads."""
    with tempfile.TemporaryDirectory(prefix="invmon-page-load-") as scratch:
        listed = Path(scratch) / "names.json"
        listed.write_text(json.dumps(names))
        me = [sys.executable, str(Path(__file__).resolve())]
        clients = subprocess.Popen(
            [*me, "--clients", str(port), str(seconds), str(listed)], stdout=subprocess.PIPE
        )
        probe = subprocess.Popen([*me, "--probe", str(port), str(seconds)], stdout=subprocess.PIPE)
        probed = json.loads(probe.communicate(timeout=seconds + 120)[0])
        fetched = json.loads(clients.communicate(timeout=seconds + 120)[0])
    if probe.returncode or clients.returncode:
        raise SystemExit(f"the load processes failed: {probe.returncode}, {clients.returncode}")
    latencies = probed["latencies"]
    return {
        "threads": 8,
        "processes": "clients and probe each in a process of its own",
        "seconds": seconds,
        "pages_fetched": fetched["fetched"],
        "pages_by_status": fetched["by_status"],
        "healthz_n": len(latencies),
        "healthz_failed": probed["failed"],
        "healthz_p50_ms": percentile(latencies, 0.5) * 1000,
        "healthz_p99_ms": percentile(latencies, 0.99) * 1000,
        "healthz_max_ms": max(latencies) * 1000,
    }


def clients(port: int, seconds: float, names: list[str]) -> dict[str, Any]:
    """8 client threads fetching `/` and detail pages of random invariants and windows."""
    stop = threading.Event()
    fetched = [0] * 8
    codes: list[Counter[int]] = [Counter() for _ in range(8)]

    def client(n: int) -> None:
        rng = random.Random(n)
        while not stop.is_set():
            if rng.random() < 0.25:
                path = "/"
            else:
                window = rng.choice(["24h", "7d", "30d"])
                path = f"/invariants/{rng.choice(names)}?window={window}"
            try:
                code = ttfb(port, path)[2]
            except OSError:
                code = 0
            fetched[n] += 1
            codes[n][code] += 1

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(8)]
    for t in threads:
        t.start()
    stop.wait(seconds)
    stop.set()
    for t in threads:
        t.join(60)
    by_status = sum(codes, Counter())
    return {"fetched": sum(fetched), "by_status": {str(k): v for k, v in sorted(by_status.items())}}


def probe(port: int, seconds: float) -> dict[str, Any]:
    """/healthz every 20 ms (its own pace), each over a fresh connection, whole response."""
    latencies: list[float] = []
    failed = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _first, whole, code, _ = ttfb(port, "/healthz")
        latencies.append(whole)
        failed += code != 200
        time.sleep(0.02)
    return {"latencies": latencies, "failed": failed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dsn", default=os.environ.get("INVMON_TEST_DSN") or DEFAULT_DSN)
    parser.add_argument("--invariants", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=7, help="cold requests of each page")
    parser.add_argument("--load-seconds", type=float, default=30)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    # The load's own processes (under_load): not for a person to call.
    parser.add_argument("--clients", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--probe", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.clients:
        port, seconds, listed = args.clients
        names = json.loads(Path(listed).read_text())
        print(json.dumps(clients(int(port), float(seconds), names)))
        return 0
    if args.probe:
        print(json.dumps(probe(int(args.probe[0]), float(args.probe[1]))))
        return 0
    result = run(args.dsn, args.invariants, args.days, args.repeat, args.load_seconds)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(json.dumps(result, indent=2), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
