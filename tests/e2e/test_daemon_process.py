"""`invmon run` as a real process: HTTP endpoints, signals, reload, and restarts after
SIGKILL that neither repeat nor lose an event."""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from builders import process_config
from helpers import http_get as get
from helpers import items_table, sql, start_daemon, wait_for
from psycopg.conninfo import make_conninfo

from monitor.store.state import StateStore

PASSWORD = "s3cret-pw-never-logged"
BAD_ROWS = """\
-- description: No row is marked bad.
-- key: [id]
-- schedule: every 1s
SELECT id FROM items WHERE bad
"""


@dataclass
class DaemonProcess:
    process: subprocess.Popen[bytes]
    log_path: Path
    state_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def lines(self) -> list[dict[str, object]]:
        out = []
        for line in self.log().splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def url(self) -> str:
        found = wait_for(
            lambda: re.search(r"listening on (http://[\d.]+:\d+)", self.log()), 20, "the listener"
        )
        assert isinstance(found, re.Match)
        return found.group(1)

    def stop(self, sig: int = signal.SIGTERM, seconds: float = 40) -> int:
        self.process.send_signal(sig)
        return self.process.wait(timeout=seconds)


@pytest.fixture
def setup(database: str, tmp_path: Path) -> tuple[str, Path]:
    items_table(database, rows=5, bad=(1, 2))
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "bad_rows.sql").write_text(BAD_ROWS)
    return make_conninfo(database, password=PASSWORD), folder


@pytest.fixture
def start(setup: tuple[str, Path], tmp_path: Path) -> Iterator[Callable[[], DaemonProcess]]:
    dsn, folder = setup
    config = process_config(
        tmp_path,
        folder,
        http={"listen": "127.0.0.1:0"},
        log={"format": "json"},
        daemon={"shutdown_grace": "5s"},
    )
    started: list[DaemonProcess] = []

    def launch() -> DaemonProcess:
        log_path = tmp_path / f"daemon-{len(started)}.log"
        process = start_daemon(config, log_path, dsn)
        started.append(DaemonProcess(process, log_path, tmp_path / "state.db"))
        return started[-1]

    yield launch
    for daemon in started:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait()


def test_the_daemon_serves_health_and_metrics_and_exits_0_on_sigterm(
    start: Callable[[], DaemonProcess],
) -> None:
    daemon = start()
    url = daemon.url()
    assert wait_for(lambda: get(f"{url}/healthz")[0] == 200, 20, "healthz")
    # Under "ok", what /readyz notes: the suite's superuser runs because it is allowed.
    allowed = "target default runs as role postgres, which is a superuser"
    assert get(f"{url}/readyz") == (200, f"ok\n{allowed} (allowed: allow_privileged_role)\n")
    metrics = wait_for(
        lambda: (
            (body := get(f"{url}/metrics")[1])
            and 'invmon_offending_rows{invariant="bad_rows",target="default"} 2.0' in body
            and body
        ),
        20,
        "the first run in /metrics",
    )
    assert isinstance(metrics, str)
    assert (
        'invmon_invariant_status{invariant="bad_rows",invmon_invariant_status="violated",'
        'target="default"} 1.0' in metrics
    )
    assert "invmon_open_incidents 1.0" in metrics
    assert wait_for(
        lambda: "invmon_events_pending 0.0" in get(f"{url}/metrics")[1], 20, "the event planned"
    )
    assert 'invmon_replica_lag_seconds{target="default"} 0.0' in metrics
    assert 'invmon_run_duration_seconds_count{invariant="bad_rows",target="default"}' in metrics
    assert 'invmon_last_success_timestamp_seconds{invariant="bad_rows",target="default"}' in metrics
    assert get(f"{url}/nope")[0] == 404
    assert daemon.stop() == 0
    log = daemon.log()
    assert PASSWORD not in log
    messages = [line["msg"] for line in daemon.lines()]
    assert messages[-1] == "stopped"
    assert "event opened: bad_rows" in messages


def test_sighup_with_a_broken_file_reports_it_and_keeps_the_rest_running(
    start: Callable[[], DaemonProcess], setup: tuple[str, Path]
) -> None:
    _, folder = setup
    daemon = start()
    url = daemon.url()
    wait_for(lambda: "evaluated bad_rows" in daemon.log(), 20, "a first run")
    (folder / "broken.sql").write_text("-- description: broken\nSELECT * FROM items FOR UPDATE\n")
    daemon.process.send_signal(signal.SIGHUP)
    wait_for(lambda: "broken.sql:2:" in daemon.log(), 20, "the reload error")
    [error] = [line for line in daemon.lines() if line["level"] == "error"]
    assert error["msg"] == (
        f"invalid invariant file: {folder}/broken.sql:2: FOR UPDATE takes row locks on the "
        "replica; not allowed"
    )
    runs_at_reload = daemon.log().count("evaluated bad_rows")
    wait_for(
        lambda: daemon.log().count("evaluated bad_rows") >= runs_at_reload + 2,
        20,
        "bad_rows to keep running",
    )
    assert "invmon_invalid_files 1.0" in get(f"{url}/metrics")[1]
    assert daemon.stop() == 0


# One seed in the default run (the suite's time budget), all three with --soak.
@pytest.mark.parametrize(
    "seed", [11, pytest.param(23, marks=pytest.mark.soak), pytest.param(47, marks=pytest.mark.soak)]
)
def test_a_restart_after_sigkill_repeats_no_event_and_loses_none(
    seed: int, start: Callable[[], DaemonProcess], setup: tuple[str, Path]
) -> None:
    rng = random.Random(seed)
    dsn, _ = setup
    first = start()
    store_path = first.state_path
    wait_for(store_path.exists, 20, f"the state store (seed {seed})")
    runs_before_kill = rng.randint(1, 4)

    def runs() -> int:
        store = StateStore.open(path=store_path)
        try:
            return sum(r.repeats for r in store.runs("bad_rows", limit=1000))
        finally:
            store.close()

    wait_for(lambda: runs() >= runs_before_kill, 30, f"{runs_before_kill} runs (seed {seed})")
    first.process.kill()
    first.process.wait()
    second = start()
    wait_for(lambda: runs() >= runs_before_kill + 2, 30, f"runs after restart (seed {seed})")
    sql(dsn, "UPDATE items SET bad = false")
    store = StateStore.open(path=store_path)
    try:
        wait_for(
            lambda: [e.kind for e in store.events("bad_rows")][-1:] == ["resolved"],
            30,
            f"the resolution (seed {seed})",
        )
        assert second.stop() == 0, f"seed {seed}"
        events = store.events("bad_rows")
        assert [(e.kind, e.payload.get("keys")) for e in events] == [
            ("opened", ["[1]", "[2]"]),
            ("resolved", None),
        ], f"seed {seed}"
        assert store.pending_events() == [], f"seed {seed}"
        assert store.open_incidents() == [], f"seed {seed}"
    finally:
        store.close()


def test_a_storm_of_signals_never_wedges_the_daemon(start: Callable[[], DaemonProcess]) -> None:
    """Signals land at arbitrary points of the main loop; none may deadlock it."""
    daemon = start()
    daemon.url()  # up and running
    for _ in range(300):
        daemon.process.send_signal(signal.SIGHUP)
    assert daemon.stop() == 0
    assert [line["msg"] for line in daemon.lines()][-1] == "stopped"


SIGNAL_ON_ANOTHER_THREAD = """
import signal, sys, threading, time
from pathlib import Path
from monitor.config import Config, DatabaseConfig, HttpConfig, StateConfig
from monitor.daemon.assembly import assemble
from monitor.store.state import StateStore

folder, state, dsn, which = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
config = Config(
    invariants=folder,
    http=HttpConfig(listen=None),
    state=StateConfig(path=state),
    database=DatabaseConfig(allow_privileged_role=True),  # the suite's superuser
)
store = StateStore.open(path=state)
daemon = assemble(config, dsn, store)

def send_from_this_thread():
    # The kernel may deliver a process signal to any thread; this makes it this one, which
    # is not the main thread, every time.
    deadline = time.monotonic() + 20
    while daemon.probes.health_problem() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    if which == "hup":
        # Written only now, after the start-up load: only the SIGHUP can bring it in.
        assert "new" not in daemon.invariants
        (folder / "new.sql").write_text("-- description: new\\nSELECT 1 AS one WHERE false\\n")
        signal.pthread_kill(threading.get_ident(), signal.SIGHUP)
        deadline = time.monotonic() + 20
        while "new" not in daemon.invariants and time.monotonic() < deadline:
            time.sleep(0.05)
        print("reloaded" if "new" in daemon.invariants else "not reloaded", flush=True)
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

threading.Thread(target=send_from_this_thread, daemon=True).start()
sys.exit(daemon.serve())
"""


@pytest.mark.parametrize("which", ["term", "hup"])
def test_a_signal_delivered_to_another_thread_still_wakes_the_daemon(
    database: str, tmp_path: Path, which: str
) -> None:
    """CPython runs signal handlers on the main thread only, and only once it runs bytecode:
    a signal the kernel hands to a scheduler or HTTP thread must still wake it."""
    folder = tmp_path / "invariants"
    folder.mkdir()
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SIGNAL_ON_ANOTHER_THREAD,
            str(folder),
            str(tmp_path / "s.db"),
            database,
            which,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"the daemon wedged: the {which} signal never woke it\n{err[-2000:]}")
    assert process.returncode == 0, err[-2000:]
    if which == "hup":
        assert out.splitlines() == ["reloaded"]


def test_sighup_rereads_the_config_taking_live_keys_and_naming_those_that_need_a_restart(
    start: Callable[[], DaemonProcess], tmp_path: Path
) -> None:
    import yaml

    daemon = start()
    wait_for(lambda: "evaluated bad_rows" in daemon.log(), 20, "a first run")
    path = tmp_path / "invmon.yaml"
    config = yaml.safe_load(path.read_text())
    config["log"]["level"] = "WARNING"
    config["slack"] = {"routes": {"severity": {"critical": "#pager"}}}
    config["state"]["retention"] = "7d"
    path.write_text(yaml.safe_dump(config))
    daemon.process.send_signal(signal.SIGHUP)
    wait_for(lambda: "config taken live" in daemon.log(), 20, "the re-read config")
    said = [(line["level"], line["msg"]) for line in daemon.lines() if "SIGHUP" in str(line["msg"])]
    assert said == [
        ("warning", "SIGHUP: config state.retention changed; it takes effect after a restart"),
        ("info", "SIGHUP: config taken live: log.level, slack.routes.severity.critical"),
    ]
    path.write_text("log: [not, a, mapping\n")  # now broken: the loaded config stays
    daemon.process.send_signal(signal.SIGHUP)
    wait_for(lambda: "was not re-read" in daemon.log(), 20, "the broken config's error")
    [error] = [line for line in daemon.lines() if "was not re-read" in str(line["msg"])]
    assert error["level"] == "error"
    assert str(error["msg"]).startswith(
        f"SIGHUP: the config was not re-read, the one loaded stays: {path}:"
    )
    # WARNING is the level now: the reload's INFO line after the first SIGHUP never came.
    assert [m for m in daemon.lines() if m["msg"] == "SIGHUP: reloading invariants"] == []
    assert daemon.stop() == 0
