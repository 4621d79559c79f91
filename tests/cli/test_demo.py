"""`invmon demo` as a newcomer runs it: its own throwaway server, every shipped invariant
violated with exactly the planted counts, and nothing left behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PLANTED = {
    name: len(expect.get("keys") or expect.get("rows") or [])
    for name, expect in yaml.safe_load(
        (ROOT / "deploy" / "demo" / "planted.yaml").read_text()
    ).items()
}


def statuses(text: str) -> dict[str, tuple[str, str, str]]:
    """Each invariant's target, status and count, from the results tables in `text`."""
    return {
        m.group(1): (m.group(2), m.group(3), m.group(4))
        for m in re.finditer(r"^([\w/]+)\s+(\w+)\s+(❌ violated|⚠️ error)\s+(\S+)\s", text, re.M)
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
    main, found_live, live = done.stdout.partition("\nAcross two systems: ")
    assert found_live
    rows = statuses(main)
    # Each invariant ran on the target of its folder: the shipped ones on payments with
    # exactly the planted counts, the second database's with its own, and the dead one
    # could not be evaluated, without holding the others back.
    assert rows == {
        **{f"payments/{name}": ("payments", "❌ violated", str(n)) for name, n in PLANTED.items()},
        "subscriptions/one_active_subscription_per_product": ("subscriptions", "❌ violated", "2"),
        "warehouse/nightly_load_finished": ("warehouse", "⚠️ error", "-"),
    }
    assert "0 held, 5 violated, 1 could not be evaluated" in done.stdout
    # The alerts, printed through the delivery ledger since no Slack is configured: five
    # incidents open at once, so one summary with each in its thread. The dead database is
    # one target-level incident, not one per invariant; expired_lease_jobs waits for its
    # second violated run (`for: 2`).
    assert done.stdout.count("── alert to #invariants ──") == 1
    assert "🚨 5 incidents opened at once" in done.stdout
    assert done.stdout.count("── alert to #invariants (in thread") == 5
    # Each detail and CSV in the digest's thread names its incident.
    assert done.stdout.count("📎 CSV of incident #") == 4
    assert "── alert to #invariants (in thread " in done.stdout
    assert re.search(
        r"\) · incident #\d+ ──\n    🔌 TARGET UNREACHABLE · warehouse: invariants paused$",
        done.stdout,
        re.M,
    )
    assert done.stdout.count("🔌 TARGET UNREACHABLE · warehouse: invariants paused") == 2
    assert done.stdout.count("database subscriptions") == 1
    assert "(payments/expired_lease_jobs is violated too, but its header says `for: 2`" in (
        done.stdout
    )
    # The live form of orphaned_receipts, its bucket a folder holding the seed's objects:
    # the planted problems, and invoice 5007, which the day-old inventory cannot judge yet.
    assert statuses(live) == {
        "payments/orphaned_receipts_live": ("payments", "❌ violated", "5"),
    }
    problems = re.findall(
        r"^\s+(missing_object|referenced_by_many|unreferenced)\s+(\S+)\s", live, re.M
    )
    assert sorted(problems) == [
        ("missing_object", "5006"),
        ("missing_object", "5007"),
        ("missing_object", "5008"),
        ("referenced_by_many", "receipts/inv-5004.pdf"),
        ("unreferenced", "receipts/inv-5008.pdf"),
    ]
    assert "0 held, 1 violated, 0 could not be evaluated" in live
    assert done.stdout.rstrip().endswith("Removed the demo databases and stopped the server.")
    assert done.stderr == ""
    # The throwaway server's data folder lived under TMPDIR and is gone. (pgserver leaves
    # an empty runtime-<uid> folder of platformdirs' there, which is not the server's.)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("invmon-pg-")] == []
