"""Every benchmark in one command; writes bench/results.json and regenerates bench/README.md.

    python bench/run.py --dsn postgresql://postgres@127.0.0.1:5432/postgres
    python bench/run.py --dsn ... --rounds 3 --no-peers --idle 10   # quicker, fewer figures

1. data: bench/data.py builds (or reuses) the refunds data set and checks its exact counts;
2. one tick vs the floor: psql running the four shipped queries, a bare psycopg script
   counting them and one fetching every row as psql does (on 1 and on 4 connections: the
   floor of a Python client), `invmon check` at concurrency 1 and 4, and the peers
   (bench/peers.py), in
   rounds that rotate their order; each time is divided by psql's in the same round (paired
   ratio) and the median of those ratios is reported; every tool's counts are checked (==);
3. start-up, the server's own execution time (EXPLAIN ANALYZE) and where a tick's time goes;
4. scale: 1,000 generated invariants loaded, linted and evaluated (two ticks, concurrency
   8); an idle daemon's CPU and memory; peak memory at 10k, 1M and 10M offending rows;
5. delivery: bench/delivery.py (200 incidents through a rate-limited fake Slack);
6. sources: bench/sources.py, peak memory and time of an invariant reading a bucket of
   100,000 objects (moto's S3 server) and a folder of 1,000,000 files, against a script
   listing the same into Python sets (and invmon at an earlier commit with --sources-before);
7. fleet: bench/fleet.py, daemon processes on one PostgreSQL state store, 5,000 invariants
   over ten targets every minute: store work per tick, claim latency, CPU and RSS, bytes a
   day (1 and 3 daemons, and a smaller load);
8. latency: bench/latency.py, a violation committed on a primary to its Slack message,
   through a streaming standby (tests/standby.py), 100 trials;
9. page: bench/page.py, the status page over 1,000 invariants x 30 days of runs: time to
   first byte of / and of a detail page, /healthz while 8 clients fetch pages.

Timing is wall-clock on a shared machine: the README records the machine and the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT)]

import data  # noqa: E402  (bench/ modules, found through the path set above)
import peers  # noqa: E402
import psycopg  # noqa: E402
import scale  # noqa: E402
import sources  # noqa: E402

SHIPPED = ROOT / "invariants"
SECTIONS = [
    "tick",
    "startup",
    "profile",
    "instructions",
    "scale",
    "idle",
    "rows_memory",
    "delivery",
    "sources",
    "fleet",
    "latency",
    "page",
]
INVMON = [sys.executable, "-m", "monitor.cli"]
Counts = dict[str, int]


@dataclass
class Command:
    """One contestant of the tick: how to prepare a run (untimed) and how to read its counts."""

    name: str
    prepare: Callable[[Path], tuple[list[str], dict[str, str]]]
    counts: Callable[[str, str, Path], Counts] | None  # None: not checked (psql prints rows)
    label: str = ""


@dataclass
class Sample:
    wall: float
    rss_kib: int


@dataclass
class Row:
    name: str
    label: str
    walls: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    rss_kib: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "ratio_median": statistics.median(self.ratios),
            "ratio_min": min(self.ratios),
            "ratio_max": max(self.ratios),
            "wall_median_s": statistics.median(self.walls),
            "peak_rss_mib": max(self.rss_kib) / 1024,
        }


def statements(folder: Path) -> dict[str, str]:
    return peers.load_invariants(folder)


def invmon_json_counts(stdout: str, _stderr: str, _work: Path) -> Counts:
    results = json.loads(stdout)["results"]
    bad = [r for r in results if r["status"] not in ("ok", "violated")]
    if bad:
        raise ValueError(f"invmon reported {bad[0]['status']}: {bad[0].get('error')}")
    return {r["invariant"]: r["count"] for r in results}


def plain_counts(stdout: str, _stderr: str, _work: Path) -> Counts:
    return {k: int(v) for k, v in json.loads(stdout).items()}


# The floor for any Python tool: connect, count each query, print.
FLOOR_SCRIPT = """
import json, sys, psycopg
queries = json.load(open(sys.argv[2]))
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    counts = {n: conn.execute(f"SELECT count(*) FROM ({q}) AS q").fetchone()[0]
              for n, q in queries.items()}
print(json.dumps(counts))
"""


# The floor for a Python tool doing psql's work: the four queries, every row fetched, on
# one connection or on four at once. What a client must pay before any query of its own
# (the interpreter, psycopg) and what four connections buy on this machine, so invmon's
# own share of its ratio can be read off beside it.
ROWS_SCRIPT = """
import json, queue, sys, threading, psycopg
queries = json.load(open(sys.argv[2]))
todo = queue.SimpleQueue()
for item in queries.items():
    todo.put(item)
counts = {}
def work():
    with psycopg.connect(sys.argv[1], autocommit=True) as conn:
        while True:
            try:
                name, q = todo.get_nowait()
            except queue.Empty:
                return
            counts[name] = len(conn.execute(q).fetchall())
threads = [threading.Thread(target=work) for _ in range(int(sys.argv[3]))]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(counts))
"""


def tick_commands(dsn: str, with_peers: bool) -> list[Command]:
    queries = statements(SHIPPED)

    def psql(work: Path) -> tuple[list[str], dict[str, str]]:
        script = work / "four.sql"
        script.write_text("".join(f"{q};\n" for q in queries.values()))
        return ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", dsn, "-f", str(script)], {}

    def floor(work: Path) -> tuple[list[str], dict[str, str]]:
        (work / "floor.py").write_text(FLOOR_SCRIPT)
        (work / "queries.json").write_text(json.dumps(queries))
        return [sys.executable, str(work / "floor.py"), dsn, str(work / "queries.json")], {}

    def rows(connections: int) -> Callable[[Path], tuple[list[str], dict[str, str]]]:
        def prepare(work: Path) -> tuple[list[str], dict[str, str]]:
            (work / "rows.py").write_text(ROWS_SCRIPT)
            (work / "queries.json").write_text(json.dumps(queries))
            script = [sys.executable, str(work / "rows.py"), dsn, str(work / "queries.json")]
            return [*script, str(connections)], {}

        return prepare

    def invmon(
        concurrency: int, keys_first: bool = True
    ) -> Callable[[Path], tuple[list[str], dict[str, str]]]:
        def prepare(work: Path) -> tuple[list[str], dict[str, str]]:
            config = work / "invmon.yaml"
            first = "" if keys_first else "database:\n  keys_first: false\n"
            config.write_text(f"concurrency: {concurrency}\n{first}")
            argv = [*INVMON, "check", "--config", str(config), "--invariants", str(SHIPPED)]
            argv.append("--allow-privileged-role")  # the bench's own database, as its admin
            return [*argv, "--dsn", dsn, "--format", "json"], {}

        return prepare

    commands = [
        Command("psql", psql, None, "psql, the four queries back to back (the floor)"),
        Command("psycopg", floor, plain_counts, "Python + psycopg 3, a count of each"),
        Command(
            "psycopg_rows_c1", rows(1), plain_counts, "Python + psycopg 3, every row, 1 connection"
        ),
        Command(
            "psycopg_rows_c4", rows(4), plain_counts, "Python + psycopg 3, every row, 4 connections"
        ),
        Command("invmon_c4", invmon(4), invmon_json_counts, "`invmon check`, concurrency 4"),
        Command("invmon_c1", invmon(1), invmon_json_counts, "`invmon check`, concurrency 1"),
        # Every invariant read whole, as before keys were read first: invmon's own overhead
        # over the client's floor, without the server work keys first saves.
        Command(
            "invmon_whole_c1",
            invmon(1, keys_first=False),
            invmon_json_counts,
            "`invmon check`, concurrency 1, `database.keys_first: false`",
        ),
    ]
    if with_peers:
        parts = peers.dsn_to_parts(dsn)
        labels = {
            "dbt": "dbt test (dbt-core 1.11, threads=1)",
            "soda": "Soda Core v4 contract verify",
            "sqlsentinel": "SQL Sentinel `run`",
        }
        for name in peers.PEERS:

            def prepare(work: Path, name: str = name) -> tuple[list[str], dict[str, str]]:
                return peers.prepare(name, parts, SHIPPED, work)

            def counts(out: str, err: str, work: Path, name: str = name) -> Counts:
                return peers.counts(name, out, err, work)

            commands.append(Command(name, prepare, counts, labels[name]))
    return commands


def tick(dsn: str, expected: Counts, rounds: int, with_peers: bool) -> list[dict[str, Any]]:
    commands = tick_commands(dsn, with_peers)
    if with_peers:
        for name in peers.PEERS:
            peers.install(name)
    rows = {c.name: Row(c.name, c.label) for c in commands}
    for r in range(rounds + 1):  # round 0 warms the caches and is not counted
        order = commands[r % len(commands) :] + commands[: r % len(commands)]
        walls: dict[str, float] = {}
        for command in order:
            with tempfile.TemporaryDirectory(prefix=f"bench-{command.name}-") as tmp:
                work = Path(tmp)
                argv, env = command.prepare(work)
                out, err, code, wall, rss = peers.run_measured(argv, env, work)
                if command.counts is None:
                    if code != 0:
                        raise SystemExit(f"{command.name} failed ({code}): {err[-500:]}")
                else:
                    got = command.counts(out, err, work)
                    if got != expected:
                        raise SystemExit(f"{command.name} counted {got}, expected {expected}")
            walls[command.name] = wall
            if r:
                rows[command.name].walls.append(wall)
                rows[command.name].rss_kib.append(rss)
        if r:
            for name, wall in walls.items():
                rows[name].ratios.append(wall / walls["psql"])
            print(f"  round {r}: " + ", ".join(f"{n} {w:.2f}s" for n, w in walls.items()))
    return [rows[c.name].summary() for c in commands]


def server_execution(dsn: str) -> dict[str, float]:
    """Milliseconds of server execution per shipped query (EXPLAIN ANALYZE, best of 3)."""
    found = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, query in statements(SHIPPED).items():
            times = []
            for _ in range(3):
                plan = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}").fetchone()
                assert plan is not None
                times.append(float(plan[0][0]["Execution Time"]))
            found[name] = min(times)
    return found


def median_wall(argv: list[str], runs: int = 7) -> float:
    walls = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - started)
    return statistics.median(walls)


def import_breakdown() -> dict[str, float]:
    """Milliseconds of what `invmon check` imports (python -X importtime of `check --help`):
    its total, and what the largest third-party packages cost (cumulative, where each is
    first imported)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "monitor.cli", "check", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, float] = {}
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \| *(\S+)$", line)
        if match and "." not in match.group(2) and not match.group(2).startswith("_"):
            found[match.group(2)] = max(found.get(match.group(2), 0.0), int(match.group(1)) / 1e3)
    found.pop("monitor", None)
    # Everything the command imported: the cumulative times of the outermost imports.
    total = sum(
        int(m.group(1)) / 1e3 for m in re.finditer(r"\| +(\d+) \| (\S+)$", done.stderr, re.M)
    )
    top = sorted(
        ((k, v) for k, v in found.items() if k not in ("site", "encodings")), key=lambda kv: -kv[1]
    )
    return {"all of `check`'s imports": total, **dict(top[:7])}


def startup() -> dict[str, Any]:
    """What a command pays before it does anything: the interpreter, the driver, the command
    line's own module, and two whole commands that touch no database (`--help`, and `lint`
    of one shipped invariant)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "invariants"
        folder.mkdir()
        shutil.copy(SHIPPED / "expired_lease_jobs.sql", folder)
        lint_one = median_wall([*INVMON, "lint", str(folder)], runs=15)
    return {
        "python_bare_s": median_wall([sys.executable, "-c", "pass"]),
        "import_psycopg_s": median_wall([sys.executable, "-c", "import psycopg"]),
        "import_cli_s": median_wall([sys.executable, "-c", "import monitor.cli.commands"]),
        "help_s": median_wall([*INVMON, "--help"], runs=15),
        "lint_one_s": lint_one,
        "bytecode_cached": not sys.flags.dont_write_bytecode,
        "imports_ms": import_breakdown(),
    }


# --- where one tick's time goes ------------------------------------------------------------

PROFILE_SCRIPT = """
import json, sys, time
started = time.perf_counter()
from pathlib import Path
from monitor.config import Config
from monitor.execution.check import run_check
imported = time.perf_counter()
config = Config.model_validate({"dsn": sys.argv[1], "concurrency": 1})
outcome = run_check(config, Path(sys.argv[2]), allow_privileged_role=True)
done = time.perf_counter()
print(json.dumps({"import_s": imported - started, "total_s": done - started,
                  "runs": {r.invariant: r.duration_ms for r in outcome.results}}))
"""


def run_script(source: str | Path, *args: str) -> dict[str, Any]:
    """Run a measuring script (its text, or a file of bench/) in a fresh interpreter, so
    imports and first-use costs are paid as a real start pays them; it prints one JSON
    document."""
    with tempfile.TemporaryDirectory() as tmp:
        script = source if isinstance(source, Path) else Path(tmp) / "measure.py"
        if not isinstance(source, Path):
            script.write_text(source)
        done = subprocess.run(
            [sys.executable, str(script), *args],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def tick_profile(dsn: str) -> dict[str, Any]:
    found = run_script(PROFILE_SCRIPT, dsn, str(SHIPPED))
    found["server_ms"] = server_execution(dsn)
    return found


TRIVIAL_INVARIANT = "-- description: Bench only; holds.\n-- key: [x]\nSELECT 1 AS x WHERE false\n"


# The libraries `invmon check` loads beyond psycopg, each by the modules that load the rest of
# it. psycopg itself is the floor's too (ROWS_SCRIPT).
CHECK_LIBRARIES = {
    "pydantic": ["pydantic.main", "pydantic.types"],
    "pglast": ["pglast"],
    "PyYAML": ["yaml"],
    "click": ["click"],
    "APScheduler": ["apscheduler.triggers.cron"],
    "psycopg_pool": ["psycopg_pool"],
}
# What `check` imports, as it imports it: its command's module, then what its run loads.
CHECK_IMPORTS = (
    "from monitor.cli.commands import main; main.commands['check']; "
    "import alerts.routing, monitor.store.context, apscheduler.triggers.cron"
)


def callgrind(argv: list[str], cwd: Path) -> int:
    """The instructions a command's own process executes (valgrind's callgrind)."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONHASHSEED": "0"},  # str hashes alike in every run
    )
    match = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode not in (0, 1) or match is None:
        raise SystemExit(f"callgrind of {argv[1:4]} failed: {done.stderr[-500:]}")
    return int(match.group(1))


def own_instructions(dsn: str) -> dict[str, Any] | None:
    """The instructions invmon's own process executes for one `invmon check` (valgrind's
    callgrind counts them), of one trivial invariant and of the four shipped ones at
    concurrency 1: a figure that a busy machine does not move, unlike wall times. The
    database's work is in other processes and not counted. Beside them, where the four
    shipped ones' instructions go past the floor's (Python + psycopg fetching every row): each
    library's own (what importing all of them costs, less what it costs without that one),
    invmon's modules, and the run. None without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        trivial = work / "trivial"
        trivial.mkdir()
        (trivial / "holds.sql").write_text(TRIVIAL_INVARIANT)
        (work / "invmon.yaml").write_text("concurrency: 1\n")
        for name, folder in (("trivial", trivial), ("four_shipped", SHIPPED)):
            check = ["check", "--config", str(work / "invmon.yaml"), "--invariants", str(folder)]
            check += ["--allow-privileged-role", "--dsn", dsn, "--format", "json"]
            found[name] = callgrind([*INVMON, *check], work)
        (work / "rows.py").write_text(ROWS_SCRIPT)
        (work / "queries.json").write_text(json.dumps(statements(SHIPPED)))
        floor = callgrind([sys.executable, "rows.py", dsn, "queries.json", "1"], work)

        def imports(modules: list[str]) -> int:
            return callgrind([sys.executable, "-c", f"import {', '.join(modules)}"], work)

        every = [m for modules in CHECK_LIBRARIES.values() for m in modules]
        driver = imports(["psycopg"])  # the interpreter and psycopg: the floor's start
        libraries = imports(["psycopg", *every])
        parts = {
            name: libraries - imports(["psycopg", *(m for m in every if m not in modules)])
            for name, modules in CHECK_LIBRARIES.items()
        }
        parts["shared by several of them"] = libraries - driver - sum(parts.values())
        check_imports = callgrind([sys.executable, "-c", CHECK_IMPORTS], work)
        parts["invmon's modules, and the models they build"] = check_imports - libraries
        # The run, less what the floor runs past its start (its own fetch of every row).
        parts["the run: load, fence, catalog, queries, output"] = (
            found["four_shipped"] - check_imports - (floor - driver)
        )
        found["floor"] = floor
        found["parts"] = parts
    return found


# --- scale ----------------------------------------------------------------------------------

SCALE_SCRIPT = """
import json, sys, time
from pathlib import Path
from monitor.invariants.loader import LoadMemo, load_directory
from monitor.execution.runner import Runner
folder = Path(sys.argv[2])
started = time.perf_counter()
memo = LoadMemo()
invariants = load_directory(folder, memo=memo).invariants
loaded = time.perf_counter() - started
if sys.argv[1] == "--load-only":
    print(json.dumps({"load_s": loaded}))
    sys.exit(0)
started = time.perf_counter()
again = load_directory(folder, memo=memo).invariants
reloaded = time.perf_counter() - started
ticks = []
with Runner(sys.argv[1], 8, None) as runner:
    for _ in range(2):
        wall, cpu = time.perf_counter(), time.process_time()
        results = runner.run_all(invariants)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        statuses = sorted({r.status for r in results})
        n = len(results)
        ticks.append({"runs": n, "wall_s": wall, "cpu_ms_per_run": cpu * 1000 / n,
                      "runs_per_s": n / wall, "statuses": statuses,
                      "violated": sum(r.status == "violated" for r in results)})
print(json.dumps({"files": len(invariants), "load_s": loaded, "reload_s": reloaded,
                  "ticks": ticks}))
"""


def scale_figures(dsn: str, every: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "invariants"
        scale.write(folder, 1000, every)
        found = run_script(SCALE_SCRIPT, dsn, str(folder))
        # The load alone, each in a fresh process as a daemon's start-up pays it: the median.
        loads = [run_script(SCALE_SCRIPT, "--load-only", str(folder))["load_s"] for _ in range(5)]
        found["load_s"], found["load_runs_s"] = statistics.median(loads), loads
        found["lint_s"] = median_wall([*INVMON, "lint", "--invariants", str(folder)], runs=3)
    return found


def idle_daemon(dsn: str, seconds: float) -> dict[str, Any]:
    """The daemon with the shipped invariants, measured between ticks once all have run."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        port = _free_port()
        (work / "invmon.yaml").write_text(
            f"invariants: {SHIPPED}\nstate:\n  path: {work / 'state.db'}\n"
            f"http:\n  listen: 127.0.0.1:{port}\nlog:\n  level: warning\n"
            # The bench's own database, as its admin (the daemon refuses such a role unless
            # told, monitor/fence/role_check.py).
            "database:\n  allow_privileged_role: true\n"
        )
        with (work / "daemon.log").open("wb") as log:
            proc = subprocess.Popen(
                [*INVMON, "run", "--config", str(work / "invmon.yaml")],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=work,
                env={**os.environ, "INVMON_DSN": dsn},
            )
        try:
            _wait_for_runs(port, 4, deadline=time.monotonic() + 300, proc=proc)
            before, rss_before = _proc_cpu(proc.pid), _proc_rss(proc.pid)
            started = time.monotonic()
            time.sleep(seconds)  # the measurement window itself, not a wait for a condition
            elapsed = time.monotonic() - started
            after, rss_after = _proc_cpu(proc.pid), _proc_rss(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    return {
        "window_s": elapsed,
        "cpu_percent_of_core": 100 * (after - before) / elapsed,
        "rss_mib": max(rss_before, rss_after) / 1024,
    }


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_runs(port: int, count: int, deadline: float, proc: subprocess.Popen[bytes]) -> None:
    url = f"http://127.0.0.1:{port}/metrics"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the daemon exited ({proc.returncode}) before its first tick")
        try:
            text = urllib.request.urlopen(url, timeout=2).read().decode()
        except OSError:
            text = ""
        done = re.findall(r"^invmon_last_success_timestamp_seconds\{", text, re.M)
        if len(done) >= count:
            return
        time.sleep(0.2)  # polling interval
    raise SystemExit("the daemon did not finish its first tick in time")


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


ROWS_INVARIANT = """-- description: Bench only; every generated row offends.
-- key: [id]
-- timeout: 5m
-- sample: 20
SELECT g AS id, md5(g::text) AS note FROM generate_series(1, {n}) AS g
"""


def offending_rows_memory(dsn: str, sizes: list[int]) -> list[dict[str, Any]]:
    found = []
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            (work / "inv").mkdir()
            (work / "inv" / "rows.sql").write_text(ROWS_INVARIANT.format(n=n))
            argv = [*INVMON, "check", "--allow-privileged-role", "--dsn", dsn]
            argv += ["--invariants", str(work / "inv")]
            out, err, _, wall, rss = peers.run_measured([*argv, "--format", "json"], {}, work)
            count = json.loads(out)["results"][0]["count"]
            if count != n:
                raise SystemExit(f"{n:,} offending rows counted as {count}: {err[-300:]}")
            found.append({"rows": n, "peak_rss_mib": rss / 1024, "wall_s": wall})
    return found


def delivery_figures(incidents: int) -> dict[str, Any]:
    return run_script(BENCH / "delivery.py", "--incidents", str(incidents), "--json")


def bench_script(name: str, *args: str) -> dict[str, Any]:
    """A section measured by a script of bench/ in a process of its own (its --json)."""
    return run_script(BENCH / name, *args, "--json")


def machine(dsn: str) -> dict[str, str]:
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    memory = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        jit = conn.execute("SHOW jit").fetchone()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory_gib": f"{int(memory) / 1024 / 1024:.0f}",
        "postgresql": str(row[0]) if row else "?",
        "jit": str(jit[0]) if jit else "?",
        "python": platform.python_version(),
        "commit": commit or "?",
        "date": time.strftime("%Y-%m-%d"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", required=True, help="a PostgreSQL server to build data on")
    parser.add_argument("--dbname", default="invmon_bench")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-peers", action="store_true", help="skip dbt, Soda, SQL Sentinel")
    parser.add_argument("--idle", type=float, default=60, help="idle window in seconds")
    parser.add_argument("--incidents", type=int, default=200)
    parser.add_argument("--rows", default="10000,1000000,10000000")
    parser.add_argument("--source-objects", type=int, default=100_000, help="in the S3 bucket")
    parser.add_argument("--folder-objects", type=int, default=1_000_000)
    parser.add_argument("--source-rounds", type=int, default=3)
    parser.add_argument("--sources-before", help="also measure sources at this commit")
    parser.add_argument(
        "--fleet-runs",
        default="1:5000,3:5000,3:2500",
        help="fleet configurations measured, daemons:invariants (bench/fleet.py --runs)",
    )
    parser.add_argument("--fleet-window", type=int, default=2, help="minutes of each")
    parser.add_argument("--latency-trials", type=int, default=100)
    parser.add_argument("--page-invariants", type=int, default=1000)
    parser.add_argument("--page-days", type=int, default=30)
    parser.add_argument(
        "--reuse",
        default="",
        help="sections kept from bench/results.json instead of measured again, e.g. "
        "delivery,idle,rows_memory (a README regenerated this way says which)",
    )
    parser.add_argument(
        "--only",
        default="",
        help="measure only these sections, e.g. startup,tick,profile; every other one is "
        "kept from bench/results.json (as --reuse would keep it)",
    )
    args = parser.parse_args()
    reuse = {s for s in args.reuse.split(",") if s}
    only = {s for s in args.only.split(",") if s}
    if only:
        reuse |= set(SECTIONS) - only
    earlier = json.loads((BENCH / "results.json").read_text()) if reuse else {}
    if not shutil.which("psql"):
        raise SystemExit("psql is needed: it is the floor every figure is compared with")

    shape = data.Shape(args.scale, args.every)
    if {"tick", "profile", "instructions", "scale", "idle"} <= reuse:
        # Nothing measured reads the refunds data set: neither built nor checked again.
        dsn, expected = args.dsn, earlier["expected"]
    else:
        dsn = data.ensure(args.dsn, args.dbname, shape)
        expected = data.check(dsn, shape)
    results: dict[str, Any] = {"machine": machine(dsn), "shape": asdict(shape)}
    if reuse:
        # Which run the carried sections come from (that run's own, if it carried too).
        results["carried_from"] = earlier.get("carried_from") or earlier["machine"]
    results["expected"] = expected
    sizes = [int(n) for n in args.rows.split(",") if n]
    measure: dict[str, Callable[[], Any]] = {
        "tick": lambda: tick(dsn, expected, args.rounds, not args.no_peers),
        "startup": startup,
        "profile": lambda: tick_profile(dsn),
        "instructions": lambda: own_instructions(dsn),
        "scale": lambda: scale_figures(dsn, args.every),
        "idle": lambda: idle_daemon(dsn, args.idle),
        "rows_memory": lambda: offending_rows_memory(args.dsn, sizes),
        "delivery": lambda: delivery_figures(args.incidents) if args.incidents else None,
        "sources": lambda: sources.run(
            args.dsn,
            args.source_objects,
            args.folder_objects,
            args.source_rounds,
            args.sources_before,
            f"{args.dbname}_sources",
        ),
        "fleet": lambda: bench_script(
            "fleet.py",
            "--dsn",
            args.dsn,
            "--runs",
            args.fleet_runs,
            "--window",
            str(args.fleet_window),
        ),
        "latency": lambda: bench_script(
            "latency.py", "--dsn", args.dsn, "--trials", str(args.latency_trials)
        ),
        "page": lambda: bench_script(
            "page.py",
            "--dsn",
            args.dsn,
            "--invariants",
            str(args.page_invariants),
            "--days",
            str(args.page_days),
        ),
    }
    assert list(measure) == SECTIONS
    results["reused"] = sorted(reuse & set(measure))
    # What the sections measured again said in the run before, for the README's before/after.
    results["previous"] = {
        section: earlier[section]
        for section in measure
        if section not in reuse and section in earlier
    }
    # Which invmon each "before" came from: the section's own run when it says, not the last
    # run's. A section carried over keeps the before it had, so its before/after stays on
    # the page until it is measured again.
    earlier_at = earlier.get("measured_at", {})
    results["previous_at"] = {
        section: (earlier_at.get(section) or earlier["machine"])["commit"]
        for section in results["previous"]
    }
    for section in sorted(reuse & set(measure)):
        kept = (earlier.get("previous") or {}).get(section)
        if kept is not None:
            results["previous"][section] = kept
            results["previous_at"][section] = (earlier.get("previous_at") or {}).get(
                section, earlier["previous"].get("commit", "?")
            )
    # Which invmon each section's figures came from: a section carried over keeps the run
    # it was measured in, so the page never dates it by the run that merely copied it.
    now = {k: results["machine"][k] for k in ("commit", "date", "cpu")}
    earlier_at = earlier.get("measured_at", {})
    results["measured_at"] = {}
    for section, run in measure.items():
        if section in reuse and section in earlier:
            results[section] = earlier[section]
            was = earlier_at.get(section) or results.get("carried_from") or now
            # Runs before the cpu was kept per section were all on the carried run's machine.
            cpu = was.get("cpu") or (results.get("carried_from") or now)["cpu"]
            results["measured_at"][section] = {"commit": was["commit"], "date": was["date"]}
            results["measured_at"][section]["cpu"] = cpu
        else:
            print(f"{section} ...", flush=True)
            results[section] = run()
            results["measured_at"][section] = now
    results["commands"] = {
        "psql": "psql -X -q -v ON_ERROR_STOP=1 DSN -f four.sql",
        "python + psycopg, every row": "python rows.py DSN queries.json 1  # or 4 connections "
        "(ROWS_SCRIPT in bench/run.py)",
        "invmon": "invmon check --config invmon.yaml --invariants invariants --dsn DSN "
        "--format json  # invmon.yaml: concurrency: 1 or 4",
        **peers.COMMANDS_DOC,
    }
    (BENCH / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    import report  # bench/report.py: results.json -> README.md

    (BENCH / "README.md").write_text(report.render(results))
    print(f"wrote {BENCH / 'results.json'} and {BENCH / 'README.md'}")


if __name__ == "__main__":
    main()
