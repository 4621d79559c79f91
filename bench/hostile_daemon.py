"""The daemon through every hostile input of issue 11 at once; reports its peak memory.

Starts `invmon run` against a scratch database with invariants whose rows are hostile
(a 1,000-column row, a 10 MB text, a 50 MB bytea, repeat('x', 50,000,000) x 20), files that
are hostile (a YAML alias bomb in a header, a 50 MB file, bytes that are not UTF-8), a fake
Slack Web API for the alerts and their CSVs, and hostile HTTP clients (a body with
`Content-Length: -1` that would go on for 500 MB, 300 clients that never finish). It waits
for two passes of every invariant, then reads the daemon's peak RSS (VmHWM) from /proc.

Target: peak RSS under 150 MB; state store growth and CSV sizes bounded.

    INVMON_BENCH_DSN=postgresql://postgres@127.0.0.1:5432/postgres python bench/hostile_daemon.py
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fake_slack import TOKEN, FakeSlack  # noqa: E402

from monitor.authoring.pgtemp import scratch_database  # noqa: E402

TARGET_MB = 150
HEADER = "-- description: Bench only, hostile rows\n-- timeout: 5m\n-- schedule: every 30s\n"
ROWS = {
    "wide_row": HEADER
    + "SELECT "
    + ", ".join(f"repeat('w', 5000) AS c{i}" for i in range(1000))
    + "\n",
    "ten_mb_text": HEADER + "-- key: [id]\nSELECT 1 AS id, repeat('t', 10000000) AS body\n",
    "fifty_mb_bytea": HEADER
    + "-- key: [id]\nSELECT 1 AS id, decode(repeat('ab', 50000000), 'hex') AS blob\n",
    "twenty_long_rows": HEADER
    + "-- key: [g]\nSELECT g, repeat('x', 50000000) AS x FROM generate_series(1, 20) AS g\n",
}


def hostile_files(folder: Path) -> None:
    for name, text in ROWS.items():
        (folder / f"{name}.sql").write_text(text)
    levels = ["&a0 [x,x,x,x,x,x,x,x,x]"] + [
        f"&a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)
    ]
    (folder / "alias_bomb.sql").write_text(
        f"-- description: x\n-- tags: [{', '.join(levels)}]\nSELECT 1 AS a WHERE false\n"
    )
    with (folder / "fifty_mb.sql").open("w") as big:
        big.write("-- description: a huge IN list\nSELECT 1 AS a WHERE 1 IN (")
        big.write(",".join(["1234567"] * 6_500_000))
        big.write(")\n")
    (folder / "latin1.sql").write_bytes(b"-- description: caf\xe9\nSELECT 1 AS a WHERE false\n")


def attack_http(address: str) -> tuple[int, int]:
    """(bytes the daemon took of a Content-Length: -1 body, slow clients it accepted)."""
    host, port = address.rsplit(":", 1)
    sent = 0
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(b"POST /slack/actions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")
        chunk = b"z" * (1 << 20)
        try:
            while sent < 500 << 20:
                conn.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # refused: the daemon closed the connection
    slow = []
    for _ in range(300):
        try:
            conn = socket.create_connection((host, int(port)), timeout=5)
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            slow.append(conn)
        except OSError:
            break
    for conn in slow:
        conn.close()
    return sent, len(slow)


def store_bytes(state: Path) -> int:
    """The SQLite store with its write-ahead log, where new pages land first."""
    return sum(p.stat().st_size for p in state.parent.glob(state.name + "*"))


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def runs_per_invariant(state: Path) -> dict[str, int]:
    if not state.exists():
        return {}
    with sqlite3.connect(f"file:{state}?mode=ro", uri=True) as db:
        try:
            return dict(db.execute("SELECT invariant, count(*) FROM runs GROUP BY invariant"))
        except sqlite3.OperationalError:
            return {}


def wait(condition: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.5)


def main() -> int:
    admin = os.environ.get("INVMON_BENCH_DSN") or os.environ.get("INVMON_TEST_DSN")
    if not admin:
        raise SystemExit("set INVMON_BENCH_DSN to a PostgreSQL DSN")
    with (
        tempfile.TemporaryDirectory() as tmp,
        scratch_database(admin, "invmon_bench") as dsn,
        FakeSlack() as slack,
    ):
        work = Path(tmp)
        folder = work / "invariants"
        folder.mkdir()
        hostile_files(folder)
        state = work / "state.db"
        (work / "invmon.yaml").write_text(
            f"invariants: {folder}\nstate:\n  path: {state}\n"
            "http:\n  listen: 127.0.0.1:0\n"
            f"slack:\n  token: {TOKEN}\n  api_url: {slack.api_url}\n"
            "  channel: C0INVARIANTS\n  digest_threshold: 100\n"
        )
        log = work / "daemon.log"
        started = time.monotonic()
        with log.open("wb") as out:
            daemon = subprocess.Popen(
                [sys.executable, "-m", "monitor.cli", "run", "--config", str(work / "invmon.yaml")],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "INVMON_DSN": dsn},
                cwd=work,
            )
        try:
            wait(lambda: "listening on" in log.read_text(), 60, "the listener")
            address = log.read_text().split("listening on http://", 1)[1].split()[0]
            wait(lambda: len(runs_per_invariant(state)) == len(ROWS), 600, "the first pass")
            first_size = store_bytes(state)
            sent, slow = attack_http(address)
            wait(lambda: min(runs_per_invariant(state).values()) >= 2, 600, "the second pass")
            wait(lambda: len(slack.shared_files()) >= len(ROWS), 120, "the CSVs")
            grown = (store_bytes(state) - first_size) / (1 << 20)
            peak = peak_rss_mb(daemon.pid)
            csv_sizes = sorted(f.length for f in slack.shared_files())
        finally:
            daemon.terminate()
            daemon.wait(60)
        took = time.monotonic() - started
        problems = [line for line in log.read_text().splitlines() if "Traceback" in line]
        print(
            f"peak_rss={peak:.1f} MB (target {TARGET_MB}) state_store_growth_second_pass="
            f"{grown:.2f} MB largest_csv={csv_sizes[-1] / 1024:.0f} KiB "
            f"http_body_taken={sent / (1 << 20):.0f} MiB of 500 slow_clients={slow} "
            f"wall={took:.0f}s tracebacks={len(problems)}"
        )
        ok = peak < TARGET_MB and not problems and csv_sizes[-1] <= 4 << 20
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
