"""The benchmarks' own parts that can be wrong without being slow: the data set holds exactly
what its rules say, and the results page renders. (No timing here: figures live in bench/.)"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

# bench/ is put on sys.path above, at run time; mypy does not search it (no mypy_path).
import data  # type: ignore[import-not-found]  # noqa: E402
import report  # type: ignore[import-not-found]  # noqa: E402


def test_the_bench_data_holds_exactly_the_violations_its_rules_plant(admin_dsn: str) -> None:
    shape = data.Shape(scale=0.01, every=100)
    name = f"invmon_bench_test_{uuid.uuid4().hex[:8]}"
    try:
        target = data.ensure(admin_dsn, name, shape, log=False)
        assert data.expected(shape) == {
            "balance_ledger_drift": 10,  # accounts 100..1000 step 100
            "duplicate_settled_refunds": 20,  # disputes paid twice: 1..2000, every 100th
            "expired_lease_jobs": 20,
            "orphaned_receipts": 90,  # 30 shared, 30 missing, 30 unreferenced
        }
        assert data.check(target, shape) == data.expected(shape)
        assert data.ensure(admin_dsn, name, shape, log=False) == target  # reused, not rebuilt
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def test_the_results_page_renders_every_target_from_the_committed_results() -> None:
    results = json.loads((BENCH / "results.json").read_text())
    page = report.render(results)
    assert [line.split(" | ")[0] for line in page.splitlines() if "|" in line and "≤" in line][
        :3
    ] == [
        "| `invmon check` ≤ 1.10× psql at concurrency 1",
        "| `invmon check` ≤ 0.85× psql at concurrency 4",
        "| `invmon check` peak RSS ≤ 64 MiB",
    ]
    assert page == (BENCH / "README.md").read_text()  # the committed page is the rendering


def test_the_fleet_latency_and_page_sections_each_give_their_goals_a_verdict() -> None:
    results = json.loads((BENCH / "results.json").read_text())
    targets = [row[0] for row in report.verdicts(results)]
    for goal in (
        "store work linear in due slots, not in the fleet's size squared",
        "p99 claim < 100 ms",
        "a day of runs < 1 GB",
        "violation → Slack: p99 < 2 s of invmon's own time past the schedule and the lag",
        "`/` at 1,000 invariants × 30 days < 300 ms",
        "/healthz p99 < 50 ms while 8 clients fetch pages",
    ):
        assert goal in targets
    # A section measured again is shown beside the run before's figures, each dated by
    # the invmon it measured; an older results file without previous_at still renders.
    results["previous"] = {"page": results["page"]}
    results["previous_at"] = {"page": "before"}
    assert "Before (invmon at before) → now: `/` " in report.render(results)
    del results["previous_at"]
    results["previous"]["commit"] = "older"
    assert "Before (invmon at older) → now: `/` " in report.render(results)
