"""The fleet at scale: daemon processes on one PostgreSQL state store, thousands of cheap
invariants over ten targets, every minute.

    python bench/fleet.py [--dsn ADMIN_DSN] [--runs 1:5000,3:5000] [--window 3] [--json]

Each configuration (daemons:invariants) gets databases of its own on the server: ten
targets, each a tiny `items` table (1,000 rows, none bad), and an empty state store. The
invariants are files under one folder per target (`t0/` … `t9/`: a file binds to the target
named like its first folder), each an index lookup of one item, `schedule: every 1m`. The
daemons are real processes (`python -m monitor.cli run --config …`), each with its own
config (the same store and targets; its own listener), `concurrency: 1` per target (so three
daemons hold ~45 connections of the server's 100).

After every invariant's first run (each runs at start-up) and one more whole minute, the
window opens on a minute boundary and lasts `--window` minutes: each minute's slot of every
invariant is due once in it. Measured over the window:

- the state store's work per tick (per minute), from the store database's own counters,
  deltas of `pg_stat_database` (transactions committed and rolled back, rows inserted,
  updated, deleted, fetched) and `pg_stat_user_tables` (index and sequential scans, per
  table): what the server did for the daemons, without pg_stat_statements (which needs
  shared_preload_libraries) or statement logging (the shared server's log). A transaction
  is one BEGIN … COMMIT of the daemon, so at least one round trip and usually three or more;
  an index or sequential scan is (about) one statement reading a table;
- claim latency, two ways: (a) from the claim rows, each slot's `claimed_at` less the moment
  it was due (its slot plus its stable jitter, monitor/daemon/slots.spread): includes the
  scheduler's one-second tick and any backlog; (b) the claim statement's own round trip under
  this load, timed by a probe in this process that claims a slot of an invariant of its own
  ten times a second with the daemon's code (monitor/store/claims.Claims.claim; its
  transactions are taken out of the store's counts);
- CPU (user + system, /proc/PID/stat) and RSS (VmRSS at the end, VmHWM) of each daemon; the
  machine's busy share (/proc/stat) and load average, to say when it was busy;
- whether the fleet keeps up: each slot of the window has exactly one run of every
  invariant (finished `slot_claims` rows of that slot, each closed in the transaction that
  stored its run, `==` the number of invariants) and its last run finished within the
  minute; otherwise the backlog (runs missing) is reported;
- the store's size: rows inserted and updated in `runs` per run over the window (runs that
  held are one row per hour, a held stretch, monitor/store/stretches.py); then, with the
  daemons stopped, each table's total size (heap, indexes, TOAST) as the window left it and
  after VACUUM FULL, over its rows. A day at this load keeps invariants x 24 stretch rows
  (every invariant here holds all day) at the compacted bytes per row; slot_claims are
  pruned an hour after their slot (monitor/store/claims.CLAIMS_KEPT, by a job every ten
  minutes) and the dead row versions of the updates are vacuumed, so both are bounded, not
  a day's growth: reported apart.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

import psycopg  # noqa: E402

from monitor.authoring.pgtemp import scratch_database  # noqa: E402
from monitor.clock import parse_stamp, stamp  # noqa: E402
from monitor.daemon.slots import spread  # noqa: E402
from monitor.durations import parse_schedule  # noqa: E402
from monitor.store.claims import CLAIMS_KEPT, CLAIMS_PRUNED_EVERY, Claims, Due  # noqa: E402
from monitor.store.storage import PostgresStorage  # noqa: E402
from monitor.store.stretches import STRETCH  # noqa: E402

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
TARGETS = 10
ITEMS = 1000
SCHEDULE = "every 1m"
PERIOD = timedelta(minutes=1)  # SCHEDULE's
JITTER = timedelta(seconds=10)  # daemon.jitter as shipped (capped at a tenth of the period)
INVARIANT = """-- description: Fleet bench invariant {i}, item {item} is not bad.
-- severity: info
-- owner: "@bench"
-- key: [id]
-- schedule: {schedule}
SELECT id, note FROM items WHERE bad AND id = {item}
"""
# The bench's invariants, not the daemons' own self-checks (invmon-self/…, once a minute).
FLEET = "invariant LIKE 't_/fleet_%%'"
STAT_DB = (
    "xact_commit",
    "xact_rollback",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
)


def write_invariants(folder: Path, count: int) -> list[str]:
    names = []
    for i in range(count):
        target = f"t{i % TARGETS}"
        (folder / target).mkdir(parents=True, exist_ok=True)
        item = (i // TARGETS) % ITEMS + 1
        path = folder / target / f"fleet_{i:05d}.sql"
        path.write_text(INVARIANT.format(i=i, item=item, schedule=SCHEDULE))
        names.append(f"{target}/fleet_{i:05d}")
    return names


def items_table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, note text, bad bool NOT NULL)")
        conn.execute(
            "INSERT INTO items SELECT g, 'item ' || g, false FROM generate_series(1, %s) g",
            (ITEMS,),
        )
        conn.execute("ANALYZE items")


def config_text(folder: Path, state: str, targets: list[str], port: int) -> str:
    lines = [
        f"invariants: {folder}",
        "state:",
        f"  dsn: {json.dumps(state)}",
        "database:",
        "  allow_privileged_role: true",
        "concurrency: 1",
        "http:",
        f"  listen: 127.0.0.1:{port}",
        "log:",
        "  level: warning",
        "targets:",
    ]
    for n, dsn in enumerate(targets):
        lines += [f"  t{n}:", f"    dsn: {json.dumps(dsn)}"]
    return "\n".join(lines) + "\n"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_memory(pid: int) -> dict[str, int]:
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            found[line.split(":")[0]] = int(line.split()[1])
    return found


def machine_busy() -> tuple[float, float]:
    """(busy jiffies, all jiffies) of the whole machine."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return float(sum(values) - idle), float(sum(values))


def store_counters(state: str) -> dict[str, Any]:
    with psycopg.connect(state, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            f"SELECT {', '.join(STAT_DB)} FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        tables = {
            str(r[0]): [int(v or 0) for v in r[1:]]
            for r in conn.execute(
                "SELECT relname, seq_scan, idx_scan, n_tup_ins, n_tup_upd, n_tup_del"
                " FROM pg_stat_user_tables"
            )
        }
    return {"db": dict(zip(STAT_DB, (int(v) for v in row), strict=True)), "tables": tables}


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    db = {k: after["db"][k] - before["db"][k] for k in STAT_DB}
    tables = {}
    for name, values in after["tables"].items():
        was = before["tables"].get(name, [0] * len(values))
        change = [a - b for a, b in zip(values, was, strict=True)]
        if any(change):
            tables[name] = dict(
                zip(("seq_scan", "idx_scan", "ins", "upd", "del"), change, strict=True)
            )
    return {"db": db, "tables": tables}


def table_sizes(state: str) -> dict[str, tuple[int, int]]:
    """Each table's total size (heap, indexes, TOAST) and heap size, in bytes."""
    found = counted(
        state,
        "SELECT c.relname, pg_total_relation_size(c.oid), pg_relation_size(c.oid)"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'public' AND c.relkind = 'r'",
    )
    return {str(name): (int(total), int(heap)) for name, total, heap in found}


def counted(state: str, query: str, *args: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(state, autocommit=True) as conn:
        return [tuple(r) for r in conn.execute(query, args or None)]


def wait(condition: Any, seconds: float, what: str, daemons: list[subprocess.Popen[bytes]]) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for d in daemons:
            if d.poll() is not None:
                raise SystemExit(f"a daemon exited ({d.returncode}) while waiting for {what}")
        value = condition()
        if value:
            return value
        time.sleep(0.5)  # polling interval
    raise SystemExit(f"timed out after {seconds:.0f} s waiting for {what}")


class ClaimProbe:
    """The claim statement's round trip under the fleet's load: the daemon's own code
    claiming a fresh slot of an invariant of its own, ten times a second."""

    def __init__(self, state: str) -> None:
        self.storage = PostgresStorage(state)
        self.claims = Claims(self.storage, "bench-probe", timedelta(seconds=30))
        self.timings: list[float] = []
        self.transactions = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="claim-probe", daemon=True)

    def _loop(self) -> None:
        n = 0
        while not self._stop.wait(0.1):
            now = datetime.now(UTC)
            n += 1
            began = time.perf_counter()
            outcome = self.claims.claim(Due(f"bench_probe_{n}", now), now)
            self.timings.append(time.perf_counter() - began)
            self.transactions += 1
            if outcome != "claimed":
                raise RuntimeError(f"the probe's claim was {outcome}")

    def __enter__(self) -> ClaimProbe:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def close(self) -> None:
        with self.storage.transaction() as tx:
            tx.run("DELETE FROM slot_claims WHERE owner = 'bench-probe'", ())
        self.storage.close()


def invalid_files(port: int) -> int:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    except OSError:
        return 0  # not listening yet
    found = re.search(rb"^invmon_invalid_files (\S+)", text, re.M)
    return int(float(found.group(1))) if found else 0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@contextlib.contextmanager
def databases(admin_dsn: str) -> Iterator[tuple[str, list[str]]]:
    with contextlib.ExitStack() as stack:
        state = stack.enter_context(scratch_database(admin_dsn, prefix="invmon_fleet_state"))
        targets = [
            stack.enter_context(scratch_database(admin_dsn, prefix=f"invmon_fleet_t{n}"))
            for n in range(TARGETS)
        ]
        for dsn in targets:
            items_table(dsn)
        yield state, targets


def next_minute(after: datetime) -> datetime:
    return after.replace(second=0, microsecond=0) + timedelta(minutes=1)


def sleep_until(moment: datetime) -> None:
    while (left := (moment - datetime.now(UTC)).total_seconds()) > 0:
        time.sleep(min(left, 1.0))


def run(admin_dsn: str, daemons_n: int, invariants: int, window: int) -> dict[str, Any]:
    started = time.monotonic()
    with (
        databases(admin_dsn) as (state, targets),
        tempfile.TemporaryDirectory(prefix="invmon-fleet-") as scratch,
    ):
        work = Path(scratch)
        names = write_invariants(work / "invariants", invariants)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("INVMON_")},
            "PYTHONPATH": str(ROOT),
        }
        procs: list[subprocess.Popen[bytes]] = []
        ports = []
        try:
            for n in range(daemons_n):
                port = free_port()
                ports.append(port)
                home = work / f"daemon-{n}"
                home.mkdir()
                (home / "invmon.yaml").write_text(
                    config_text(work / "invariants", state, targets, port)
                )
                with (home / "daemon.log").open("wb") as log:
                    procs.append(
                        subprocess.Popen(
                            [sys.executable, "-m", "monitor.cli", "run", "--config", "invmon.yaml"],
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            cwd=home,
                            env=env,
                        )
                    )

            def first_runs_done() -> bool:
                invalid = invalid_files(ports[0])
                if invalid:
                    raise SystemExit(f"{invalid} invariant files do not validate")
                if not counted(state, "SELECT to_regclass('runs')")[0][0]:
                    return False
                [(n,)] = counted(state, f"SELECT count(DISTINCT invariant) FROM runs WHERE {FLEET}")
                return int(n) >= invariants

            wait(first_runs_done, 900, "every invariant's first run", procs)
            ready_s = time.monotonic() - started
            # One whole minute of steady state before the window opens.
            opens = next_minute(datetime.now(UTC) + timedelta(minutes=1))
            sleep_until(opens)
            before = store_counters(state)
            cpu_before = [proc_cpu(p.pid) for p in procs]
            busy_before = machine_busy()
            load_before = os.getloadavg()
            t0 = time.monotonic()
            probe = ClaimProbe(state)
            with probe:
                sleep_until(opens + timedelta(minutes=window))
            after = store_counters(state)
            elapsed = time.monotonic() - t0
            cpu_after = [proc_cpu(p.pid) for p in procs]
            busy_after = machine_busy()
            load_after = os.getloadavg()
            memory = [proc_memory(p.pid) for p in procs]
            slots = [stamp(opens + timedelta(minutes=m)) for m in range(window)]

            # A slot's run is stored in the transaction that finishes its claim, and a held
            # run may extend a stretch row of an earlier slot: the claims count the runs.
            stored = f"slot = ANY(%s) AND outcome = 'run' AND {FLEET}"

            def window_settled() -> bool:
                [(n,)] = counted(state, f"SELECT count(*) FROM slot_claims WHERE {stored}", slots)
                return int(n) >= invariants * window

            # Whatever is still running of the window's last slot ends (or the backlog shows).
            with contextlib.suppress(SystemExit):
                wait(window_settled, 60, "the window's runs", procs)
            probe.close()
            per_slot = dict(
                counted(
                    state,
                    f"SELECT slot, count(*) FROM slot_claims WHERE {stored} GROUP BY slot",
                    slots,
                )
            )
            per_slot_runs = [int(per_slot.get(s, 0)) for s in slots]
            claims = counted(
                state,
                "SELECT invariant, slot, owner, claimed_at, finished_at, takeovers"
                f" FROM slot_claims WHERE slot = ANY(%s) AND {FLEET}",
                slots,
            )
            # The runs of the window by status: the rows its slots' runs made or extended.
            statuses = dict(
                counted(
                    state,
                    "SELECT status, sum(repeats) FROM runs"
                    f" WHERE COALESCE(last_slot, slot) = ANY(%s) AND {FLEET} GROUP BY status",
                    slots,
                )
            )
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        rows = {
            t: int(counted(state, f"SELECT count(*) FROM {t}")[0][0])
            for t in ("runs", "slot_claims", "events", "incidents", "invariant_state")
        }
        sizes = table_sizes(state)
        with psycopg.connect(state, autocommit=True) as conn:
            conn.execute("VACUUM FULL runs, slot_claims")
        compacted = table_sizes(state)
        schedule = parse_schedule(SCHEDULE)
        late: list[float] = []
        finished_by_slot: dict[str, float] = {}
        owners: dict[str, int] = {}
        for name, slot, owner, claimed_at, finished_at, _taken in claims:
            due = parse_stamp(slot) + spread(name, parse_stamp(slot), schedule, JITTER)
            late.append((parse_stamp(claimed_at) - due).total_seconds())
            owners[owner] = owners.get(owner, 0) + 1
            if finished_at:
                took = (parse_stamp(finished_at) - parse_stamp(slot)).total_seconds()
                finished_by_slot[slot] = max(finished_by_slot.get(slot, 0.0), took)
        work_done = delta(before, after)
        work_done["db"]["xact_commit"] -= probe.transactions
        if "slot_claims" in work_done["tables"]:
            work_done["tables"]["slot_claims"]["ins"] -= probe.transactions
        due_runs = invariants * window
        bytes_per = {t: compacted[t][0] / rows[t] for t in ("runs", "slot_claims") if rows.get(t)}
        runs_table = work_done["tables"].get("runs", {})
        # Held all day: a stretch row an hour (its first run and STRETCH's worth after it).
        runs_per_row = STRETCH // PERIOD + 1
        rows_per_day = invariants * math.ceil(timedelta(days=1) / PERIOD / runs_per_row)
        # Pruned an hour after their slot, by a job every ten minutes: at most this many.
        claims_kept = invariants * ((CLAIMS_KEPT + CLAIMS_PRUNED_EVERY) // PERIOD)
        day = rows_per_day * bytes_per.get("runs", 0)
        bounded = {
            "slot_claims": claims_kept * bytes_per.get("slot_claims", 0),
            "dead_versions": sum(sizes[t][0] - compacted[t][0] for t in ("runs", "slot_claims")),
        }
        kept = [n for n in names if n]  # every file is an invariant
        assert len(kept) == invariants
        return {
            "daemons": daemons_n,
            "invariants": invariants,
            "targets": TARGETS,
            "schedule": SCHEDULE,
            "window_min": window,
            "window_s": elapsed,
            "ready_s": ready_s,
            "slots": slots,
            "runs_per_slot": per_slot_runs,
            "expected_per_slot": invariants,
            "kept_up": all(n == invariants for n in per_slot_runs)
            and all(v < 60 for v in finished_by_slot.values()),
            "backlog_runs": due_runs - sum(per_slot_runs),
            "statuses": statuses,
            "slot_done_after_s": [finished_by_slot.get(s) for s in slots],
            "store": work_done,
            "per_tick": {k: v / window for k, v in work_done["db"].items()},
            "per_run": {k: v / due_runs for k, v in work_done["db"].items()},
            "scans_per_run": sum(
                t["seq_scan"] + t["idx_scan"] for t in work_done["tables"].values()
            )
            / due_runs,
            "claim_late_ms": {
                "p50": percentile(late, 0.5) * 1000,
                "p99": percentile(late, 0.99) * 1000,
                "max": max(late, default=float("nan")) * 1000,
                "n": len(late),
            },
            "claim_roundtrip_ms": {
                "p50": percentile(probe.timings, 0.5) * 1000,
                "p99": percentile(probe.timings, 0.99) * 1000,
                "max": max(probe.timings, default=float("nan")) * 1000,
                "n": len(probe.timings),
            },
            "claims_by_daemon": sorted(owners.values(), reverse=True),
            "takeovers": sum(int(c[5]) for c in claims),
            "daemon_cpu_percent_of_core": [
                100 * (a - b) / elapsed for a, b in zip(cpu_after, cpu_before, strict=True)
            ],
            "daemon_rss_mib": [m.get("VmRSS", 0) / 1024 for m in memory],
            "daemon_peak_rss_mib": [m.get("VmHWM", 0) / 1024 for m in memory],
            "machine_busy_percent": 100
            * (busy_after[0] - busy_before[0])
            / max(1.0, busy_after[1] - busy_before[1]),
            "load_average": [load_before[0], load_after[0]],
            "table_bytes": sizes,
            "table_bytes_compacted": compacted,
            "table_rows": rows,
            "runs_rows_per_run": {
                "inserted": runs_table.get("ins", 0) / due_runs,
                "updated": runs_table.get("upd", 0) / due_runs,
            },
            "bytes_per_row": bytes_per,
            "rows_per_day": rows_per_day,
            "bytes_per_day": day,
            "bytes_bounded": bounded,
            "bytes_per_day_note": f"{invariants:,} invariants x {rows_per_day // invariants} "
            f"stretch rows x {bytes_per.get('runs', 0):,.0f} bytes",
        }


def summary(r: dict[str, Any]) -> str:
    return (
        f"{r['daemons']} daemon(s), {r['invariants']:,} invariants {r['schedule']}: "
        f"runs per slot {r['runs_per_slot']} (expected {r['expected_per_slot']:,}), "
        f"kept up: {r['kept_up']}, backlog {r['backlog_runs']:,}; slots done after "
        f"{r['slot_done_after_s']} s; per tick {r['per_tick']['xact_commit']:,.0f} "
        f"transactions ({r['per_run']['xact_commit']:.2f} per run), "
        f"{r['scans_per_run']:.2f} table scans per run; claim due->claimed p50 "
        f"{r['claim_late_ms']['p50']:.0f} ms p99 {r['claim_late_ms']['p99']:.0f} ms; claim "
        f"round trip p50 {r['claim_roundtrip_ms']['p50']:.1f} ms p99 "
        f"{r['claim_roundtrip_ms']['p99']:.1f} ms; CPU "
        f"{[round(c) for c in r['daemon_cpu_percent_of_core']]}% RSS "
        f"{[round(m) for m in r['daemon_rss_mib']]} MiB; machine busy "
        f"{r['machine_busy_percent']:.0f}%; runs rows per run inserted "
        f"{r['runs_rows_per_run']['inserted']:.3f} updated "
        f"{r['runs_rows_per_run']['updated']:.3f}; "
        f"bytes/day {r['bytes_per_day'] / 1e9:.3f} GB ({r['bytes_per_day_note']}); bounded: "
        f"claims {r['bytes_bounded']['slot_claims'] / 1e6:.0f} MB, dead versions "
        f"{r['bytes_bounded']['dead_versions'] / 1e6:.0f} MB"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dsn", default=os.environ.get("INVMON_TEST_DSN") or DEFAULT_DSN)
    parser.add_argument(
        "--runs",
        default="1:5000,3:5000",
        help="configurations, daemons:invariants, measured in this order",
    )
    parser.add_argument("--window", type=int, default=3, help="minutes measured")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    # Stopped by a signal, the databases are still dropped and the daemons stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = []
    for spec in args.runs.split(","):
        daemons_n, invariants = (int(x) for x in spec.split(":"))
        result = run(args.dsn, daemons_n, invariants, args.window)
        results.append(result)
        print(summary(result), file=sys.stderr, flush=True)
    document = {"window_min": args.window, "configurations": results}
    if args.json:
        print(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
