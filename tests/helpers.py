"""Small helpers shared by the tests: poll with a deadline, a clock the test moves, the
monitored `items` table, run SQL, run the real CLI, an invariant built without lint."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest

from monitor.clock import parse_stamp, stamp
from monitor.config import DatabaseConfig
from monitor.durations import parse_schedule
from monitor.invariants.header import InvariantHeader
from monitor.invariants.loader import Invariant

T = TypeVar("T")
# The suite connects as the test server's superuser, which `invmon check` and the daemon
# refuse unless told (monitor/fence/role_check.py; tests/fence/test_role_check.py tests the
# refusal): `check` as the suite runs it, and the allowance of a daemon's config, in Python
# and YAML.
CHECK = ("check", "--allow-privileged-role")
PRIVILEGED = DatabaseConfig(allow_privileged_role=True)
PRIVILEGED_YAML = "database:\n  allow_privileged_role: true\n"


def wait_for(condition: Callable[[], T | None], seconds: float, what: str) -> T:
    """Poll until `condition` returns something truthy; never a fixed sleep."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {seconds}s waiting for {what}")


class FakeClock:
    """The clock a test controls: it moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def items_table(dsn: str, rows: int = 6, bad: tuple[int, ...] = ()) -> None:
    """The monitored table most daemon tests watch: `items (id, note, bad)`."""
    sql(dsn, "CREATE TABLE items (id int PRIMARY KEY, note text, bad bool NOT NULL)")
    marked = f"g IN ({','.join(str(i) for i in bad)})" if bad else "false"
    sql(
        dsn,
        f"INSERT INTO items SELECT g, 'item ' || g, {marked} FROM generate_series(1, {rows}) g",
    )


def sql(dsn: str, statement: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement.encode())


def invmon(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real `invmon` in a subprocess, without the caller's INVMON_* variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("INVMON_")}
    clean.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "monitor.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean,
        timeout=120,
    )


@dataclass(frozen=True)
class Ran:
    """What a command did, the same shape whether run in-process or as a process."""

    returncode: int
    stdout: str
    stderr: str


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> Ran:
    """`invmon` in this process through click's CliRunner (fast), without the caller's
    INVMON_* variables; `invmon()` runs the real executable for end-to-end tests."""
    from click.testing import CliRunner

    from monitor.cli.commands import main

    cleared: dict[str, str | None] = {k: None for k in os.environ if k.startswith("INVMON_")}
    cleared.update(env or {})
    previous = Path.cwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        result = CliRunner().invoke(main, list(args), env=cleared, catch_exceptions=False)
    finally:
        os.chdir(previous)
    return Ran(result.exit_code, result.stdout, result.stderr)


def invariant(
    name: str, sql: str, key: tuple[str, ...] = (), sample: int = 20, timeout: float = 30
) -> Invariant:
    """Built directly, bypassing lint, so the runner's own fences are what is tested."""
    return Invariant(
        name=name,
        path=Path(f"{name}.sql"),
        sql=sql,
        sql_first_line=2,
        header=InvariantHeader(description=f"{name} holds", key=list(key)),
        severity="warning",
        schedule=parse_schedule("every 15m"),
        timeout=timedelta(seconds=timeout),
        sample=sample,
    )


def start_daemon(
    config: Path, log: Path, dsn: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`invmon run --config CONFIG` as a real process, its output in `log`, watching `dsn`
    (with `env` added to the environment)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "monitor.cli", "run", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=log.parent,
            env={**os.environ, "INVMON_DSN": dsn, **(env or {})},
        )


def listening_url(log: Path) -> str:
    """The address a daemon started by `start_daemon` says in `log` it listens on, once it
    does (within 30 s)."""
    found = wait_for(
        lambda: re.search(r"listening on (http://[\d.]+:\d+)", log.read_text()),
        30,
        "the daemon's listener",
    )
    return found.group(1)


def http_get(url: str) -> tuple[int, str]:
    """(status, body) of a GET; (0, "") while nothing listens yet."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except urllib.error.URLError:
        return 0, ""


def require_libxml(dsn: str) -> None:
    """Skip unless the server is built with libxml (the throwaway pgserver is not): XPath
    evaluated by libxml2 is the suite's query that no statement timeout stops."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute("SELECT '<a/>'::xml")
        except psycopg.errors.FeatureNotSupported:
            pytest.skip("this server is built without libxml")


def lock_waits(dsn: str, application: str) -> int:
    """How many sessions of `application` (a LIKE pattern: `invmon:bad_rows`,
    `invmon-state`) wait for a lock now, in the database `dsn` names only."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        [(n,)] = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s"
            " AND datname = current_database() AND wait_event_type = 'Lock'",
            (application,),
        ).fetchall()
    return int(n)


def active_runs(dsn: str, invariant: str = "%", query: str = "%") -> int:
    """How many of invmon's runs (of `invariant`, whose text is like `query`) are active in
    the database `dsn` names now. Only that database: pg_stat_activity is the whole
    server's, and other tests (or another suite) may be running the same invariants."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s"
            " AND query LIKE %s AND state = 'active' AND datname = current_database()",
            (f"invmon:{invariant}", query),
        ).fetchone()
    assert row is not None
    return int(row[0])


# The runs table's rows with a slot: (invariant, first slot, last slot, repeats).
SLOTTED_RUNS = "SELECT invariant, slot, last_slot, repeats FROM runs WHERE slot IS NOT NULL"


def runs_per_slot(
    rows: Iterable[tuple[str, str, str | None, int]], period: timedelta | None = None
) -> Counter[tuple[str, str]]:
    """How many stored runs each (invariant, slot) has, from SLOTTED_RUNS rows. A held
    stretch (monitor/store/stretches.py) keeps its first and last slot and how many runs
    it stands for: those are its slots one `period` apart, and a stretch whose count does
    not fit its slots fails here (a slot stored twice, or one missing, inside it)."""
    counted: Counter[tuple[str, str]] = Counter()
    for invariant, first, last, repeats in rows:
        slots = [parse_stamp(first)]
        if last is not None:
            end = parse_stamp(last)
            if repeats > 2:
                assert period is not None, f"{invariant}: a stretch of {repeats} needs a period"
                slots = [slots[0] + n * period for n in range(repeats - 1)]
            slots.append(end)
            assert len(slots) == repeats and slots == sorted(set(slots)), (invariant, first, last)
            if period is not None:
                assert {b - a for a, b in pairwise(slots)} <= {period}, (invariant, slots)
        counted.update((invariant, stamp(s)) for s in slots)
    return counted


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """The server process `pid` stopped (SIGSTOP) inside the block, and let go after it.
    Innermost of a test's blocks, so that it lets go before anything joins a thread that
    may wait on that process."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except PermissionError:
        pytest.skip("this user cannot stop the server's processes (run as root or postgres)")
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


# An invariant that runs until cancelled (the cross join checks for a cancel between rows),
# well past any bound a test waits.
SLOW_INVARIANT = (
    "-- description: never ends on its own\n-- timeout: 120s\n"
    "SELECT count(*) AS n FROM pg_class a, pg_class b, pg_class c, pg_class d\n"
    "HAVING count(*) < 0\n"
)


def interruptible(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """A process that takes SIGINT as a terminal's Ctrl-C (Python's KeyboardInterrupt): a
    child of a process that ignores it would ignore it too."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("INVMON_")}
    clean.update(env or {})
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=clean,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
