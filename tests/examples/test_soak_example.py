"""examples/soak, run as a reader would run it: the pytest plugin asserts the shipped
invariants after every seed of the refunds soak. The service that deduplicates where it
writes holds on every seed; the one that checks before it creates is caught on some, and
each failure names its seed and a command that replays that seed alone."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

EXAMPLE = ROOT / "examples" / "soak"
RERUN = re.compile(r"rerun this case alone: (.+)$", re.MULTILINE)
OUTCOME = re.compile(r"^(PASSED|FAILED) \S+::test_refunds_soak\[(\d+)-(\w+)\]", re.MULTILINE)


def pytest_run(args: list[str], cwd: Path, admin_dsn: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "INVMON_TEST_DSN": admin_dsn, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("INVMON_DSN", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def outcomes(output: str) -> dict[str, dict[int, str]]:
    found: dict[str, dict[int, str]] = {}
    for status, seed, service in OUTCOME.findall(output):
        found.setdefault(service, {})[int(seed)] = status
    return found


def replay(command: str, cwd: Path, admin_dsn: str) -> subprocess.CompletedProcess[str]:
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "pytest"], command
    return pytest_run(words[3:], cwd, admin_dsn)


def test_the_quick_soak_catches_check_then_create_and_each_failure_replays_by_its_seed(
    tmp_path: Path, admin_dsn: str
) -> None:
    ran = pytest_run([str(EXAMPLE)], tmp_path, admin_dsn)
    seen = outcomes(ran.stdout)
    assert seen["dedup_at_write"] == dict.fromkeys(range(8), "PASSED"), ran.stdout[-3000:]
    failed = {s for s, status in seen["check_then_create"].items() if status == "FAILED"}
    # Deterministic per seed: the same seeds fail on every machine and every run.
    assert failed == {4, 6, 7}, ran.stdout[-3000:]
    assert ran.returncode == 1
    assert re.search(r"=+ 3 failed, 13 passed, 384 deselected in ", ran.stdout, re.MULTILINE)
    assert (
        "1 invariant violated after test_refunds_soak.py::test_refunds_soak[4-check_then_create]"
        " (seed 4)" in ran.stdout
    )
    assert "duplicate_settled_refunds: 1 offending row" in ran.stdout

    # The rerun line, typed as printed from where pytest ran, fails the same way, alone.
    # Each once (with CI set, pytest's summary repeats a failure's whole message too).
    commands = sorted(set(RERUN.findall(ran.stdout)))
    assert len(commands) == 3
    for command, seed in zip(commands, (4, 6, 7), strict=True):
        assert command.endswith(f"test_refunds_soak[{seed}-check_then_create]'")
    again = replay(commands[0], tmp_path, admin_dsn)
    assert re.search(r"=+ 1 failed in ", again.stdout, re.MULTILINE), again.stdout[-3000:]
    first = ran.stdout.split("test_refunds_soak[4-check_then_create] ___")[1]
    block = re.compile(r"duplicate_settled_refunds: .*?\n {0,4}\n", re.DOTALL)
    rows_then = block.search(first)
    rows_now = block.search(again.stdout)
    assert rows_then is not None and rows_now is not None
    # The same disputes, counts and amounts (timestamps differ between the two runs).
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00")
    assert stamp.sub("T", rows_now.group(0)) == stamp.sub("T", rows_then.group(0))


@pytest.mark.soak
def test_the_long_soak_holds_on_every_seed_when_the_refund_is_deduplicated_where_written(
    tmp_path: Path, admin_dsn: str
) -> None:
    ran = pytest_run([str(EXAMPLE), "--soak"], tmp_path, admin_dsn)
    seen = outcomes(ran.stdout)
    assert seen["dedup_at_write"] == dict.fromkeys(range(200), "PASSED")
    failed = sorted(s for s, status in seen["check_then_create"].items() if status == "FAILED")
    print(f"check_then_create failed on {len(failed)} of 200 seeds: {failed}")
    assert 0 < len(failed) < 200
    assert len(seen["check_then_create"]) == 200
    # Every failing seed replays alone, and fails again.
    for command in sorted(set(RERUN.findall(ran.stdout))):
        again = replay(command, tmp_path, admin_dsn)
        assert re.search(r"=+ 1 failed in ", again.stdout, re.MULTILINE), (
            command,
            again.stdout[-2000:],
        )
