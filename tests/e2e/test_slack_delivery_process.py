"""The real daemon process delivering to the fake Slack under seeded faults, SIGKILLed at
seeded points and restarted: still one root message, each event once, the CSV exact."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from builders import process_config, slack_to
from fake_slack import FakeSlack
from helpers import items_table, sql, start_daemon, wait_for
from scenario import CHANGES, EVENTS_AFTER_STEP, INVARIANT, assert_one_clean_incident

from monitor.store.state import StateStore


@pytest.fixture
def items(database: str, tmp_path: Path) -> tuple[str, Path]:
    items_table(database)
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "bad_items.sql").write_text(INVARIANT)
    return database, folder


@pytest.fixture
def launcher(
    items: tuple[str, Path], tmp_path: Path
) -> Iterator[Callable[[Path], subprocess.Popen[bytes]]]:
    dsn, _ = items
    started: list[subprocess.Popen[bytes]] = []

    def launch(config: Path) -> subprocess.Popen[bytes]:
        process = start_daemon(config, tmp_path / f"daemon-{len(started)}.log", dsn)
        started.append(process)
        return process

    yield launch
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def store_state(path: Path) -> tuple[int, int, dict[str, int]]:
    store = StateStore.open(path=path)
    try:
        with store.storage.transaction() as tx:
            rows = tx.rows("SELECT state, count(*) FROM deliveries GROUP BY state")
        return len(store.events("bad_items")), len(store.pending_events()), dict(rows)
    finally:
        store.close()


def run_seed(
    seed: int,
    items: tuple[str, Path],
    tmp_path: Path,
    launch: Callable[[Path], subprocess.Popen[bytes]],
) -> None:
    rng = random.Random(seed)
    label = f"seed {seed}"
    dsn, folder = items
    state = tmp_path / "state.db"
    with FakeSlack(seed=seed, fault_rate=0.3, answer_delay=0.4) as fake:
        slack = slack_to(
            fake, settle="1s", timeout="0.3s", lease="3s", digest_window="1s", max_backoff="2s"
        )
        config = process_config(
            tmp_path,
            folder,
            http={"listen": None},
            log={"format": "json"},
            defaults={"schedule": "every 1s"},
            daemon={"shutdown_grace": "2s"},
            slack=slack,
        )
        process = launch(config)

        def step_done(step: int) -> bool:
            if not state.exists():
                return False
            events, pending, deliveries = store_state(state)
            busy = deliveries.get("PENDING", 0) + deliveries.get("UNKNOWN", 0)
            return events >= EVENTS_AFTER_STEP[step] and pending == 0 and busy == 0

        for step, change in enumerate(CHANGES):
            sql(dsn, change)
            for _ in range(rng.randint(0, 2)):
                # Kill after a seeded number of further Slack calls, or once this step's
                # work is all done (then the kill lands between steps).
                target = len(fake.calls) + rng.randint(1, 6)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    if len(fake.calls) >= target or step_done(step):
                        break
                    time.sleep(0.05)
                process.send_signal(signal.SIGKILL)
                process.wait()
                process = launch(config)

            def events_stored(s: int = step) -> bool:
                return state.exists() and store_state(state)[0] >= EVENTS_AFTER_STEP[s]

            wait_for(events_stored, 60, f"the events of step {step} ({label})")
        fake.faults_off()

        def settled() -> bool:
            _events, pending, deliveries = store_state(state)
            return pending == 0 and set(deliveries) == {"SENT"}

        wait_for(settled, 90, f"every delivery to be SENT ({label}): {store_state(state)}")
        # A SIGTERM during start-up (before the handlers exist) would just kill it.
        log = max(tmp_path.glob("daemon-*.log"), key=lambda p: int(p.stem.split("-")[1]))
        wait_for(lambda: "invmon running" in log.read_text(), 30, f"start-up ({label})")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, label
    assert store_state(state)[0] == 4, label
    assert_one_clean_incident(fake, label)


# One seed in the default run; the other, and the 200-seed sweep, with --soak.
@pytest.mark.parametrize("seed", [5, pytest.param(8, marks=pytest.mark.soak)])
def test_sigkill_restarts_under_faults_never_double_or_lose_a_message(
    seed: int,
    items: tuple[str, Path],
    tmp_path: Path,
    launcher: Callable[[Path], subprocess.Popen[bytes]],
) -> None:
    run_seed(seed, items, tmp_path, launcher)


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(2000, 2200))
def test_soak_sigkill_restarts_over_200_seeds(
    seed: int,
    items: tuple[str, Path],
    tmp_path: Path,
    launcher: Callable[[Path], subprocess.Popen[bytes]],
) -> None:
    run_seed(seed, items, tmp_path, launcher)
