"""`invmon demo` as a newcomer runs it: its own throwaway server, every shipped invariant
violated with exactly the planted counts, and nothing left behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PLANTED = {
    name: len(expect.get("keys") or expect.get("rows") or [])
    for name, expect in yaml.safe_load(
        (ROOT / "deploy" / "demo" / "planted.yaml").read_text()
    ).items()
}


def test_the_demo_shows_every_shipped_invariant_violated_with_the_planted_counts(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVMON_")}
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "monitor.cli", "demo"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^(\w+)\s+❌ violated\s+(\d+)\s", done.stdout, re.M)
    }
    assert summary == PLANTED
    assert "0 held, 4 violated, 0 could not be evaluated" in done.stdout
    # The alerts, printed through the delivery ledger since no Slack is configured: one per
    # incident; expired_lease_jobs waits for its second violated run (`for: 2`).
    assert done.stdout.count("── alert to #invariants ──") == 3
    assert done.stdout.count("📎 CSV attached: ") == 3
    assert "(expired_lease_jobs is violated too, but its header says `for: 2`" in done.stdout
    assert done.stdout.rstrip().endswith("Removed the demo database and stopped the server.")
    assert done.stderr == ""
    # The throwaway server's data folder lived under TMPDIR and is gone. (pgserver leaves
    # an empty runtime-<uid> folder of platformdirs' there, which is not the server's.)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("invmon-pg-")] == []
