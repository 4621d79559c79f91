"""The manual's "Adding an invariant" (docs/writing-invariants.md), followed as a new user
would: a new file and its fixture pass the PR checks; dropping its WHERE clause makes them fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "ci" / "check-invariants.sh"
SCHEMA = ROOT / "deploy" / "demo" / "schema.sql"

NEW_INVARIANT = """\
-- description: Every refund belongs to a dispute of the same amount or more; a refund larger
--   than its dispute paid out money nobody asked for.
-- severity: critical
-- owner: "@payments-oncall"
-- runbook: https://wiki.example.com/runbooks/oversized-refunds
-- key: [refund_id]
-- max_cost: 100000
SELECT r.refund_id, r.dispute_id, r.amount_eur, d.amount_eur AS disputed_eur
FROM refunds AS r
JOIN disputes AS d ON d.dispute_id = r.dispute_id
WHERE r.amount_eur > d.amount_eur
"""

NEW_FIXTURE = """\
cases:
  - name: a refund larger than its dispute fires
    rows:
      accounts: [{account_id: 1, email: a@example.com}]
      disputes: [{dispute_id: 10, account_id: 1, reason: x, amount_eur: 20.00}]
      refunds:
        - {refund_id: 1, dispute_id: 10, amount_eur: 25.00, status: pending}
        - {refund_id: 2, dispute_id: 10, amount_eur: 20.00, status: pending}
    expect:
      keys: [[1]]
  - name: refunds within their dispute hold
    rows:
      accounts: [{account_id: 1, email: a@example.com}]
      disputes: [{dispute_id: 10, account_id: 1, reason: x, amount_eur: 20.00}]
      refunds: [{refund_id: 2, dispute_id: 10, amount_eur: 20.00, status: pending}]
    expect:
      count: 0
"""


def run_checks(folder: Path, admin_dsn: str, explain_dsn: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "INVARIANTS": str(folder),
        "SCHEMA": str(SCHEMA),
        "INVMON_TEST_DSN": admin_dsn,
        "INVMON_EXPLAIN_DSN": explain_dsn,
        "INVMON": f"{sys.executable} -m monitor.cli",
    }
    return subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=300
    )


def test_a_new_invariant_with_a_fixture_passes_the_pr_checks_and_fails_when_broken(
    schema_database: str, admin_dsn: str, tmp_path: Path
) -> None:
    folder = tmp_path / "invariants"
    shutil.copytree(ROOT / "invariants", folder)
    (folder / "oversized_refunds.sql").write_text(NEW_INVARIANT)
    (folder / "oversized_refunds.test.yaml").write_text(NEW_FIXTURE)

    done = run_checks(folder, admin_dsn, schema_database)
    assert done.returncode == 0, done.stdout + done.stderr
    cases = done.stdout.count("  ✅ ")
    assert f"{cases} of {cases} cases passed; 0 invariants failing, 0 untested" in done.stdout
    assert "  ✅ a refund larger than its dispute fires" in done.stdout.splitlines()
    assert "✅ oversized_refunds: cost " in done.stdout

    broken = NEW_INVARIANT.replace("WHERE r.amount_eur > d.amount_eur\n", "")
    (folder / "oversized_refunds.sql").write_text(broken)
    failed = run_checks(folder, admin_dsn, schema_database)
    assert failed.returncode == 1
    assert "  ❌ a refund larger than its dispute fires: unexpected keys [2]" in failed.stdout
    assert failed.stderr.splitlines()[-1] == "invariants check FAILED at: fixture cases (exit 1)"

    typo = NEW_INVARIANT.replace("WHERE r.amount_eur >", "WHERE r.amount >")
    (folder / "oversized_refunds.sql").write_text(typo)
    linted = run_checks(folder, admin_dsn, schema_database)
    assert linted.returncode == 2
    assert linted.stderr.splitlines()[-1].startswith("invariants check FAILED at: lint (exit 2)")
    assert (
        f"{folder}/oversized_refunds.sql:11: unknown column r.amount: table refunds has no "
        "column 'amount'; did you mean 'amount_eur'?"
    ) in linted.stdout
