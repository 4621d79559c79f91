"""A new repository of invariants works from its first commit, a new invariant starts from
the schema, and every message that could have a hint has one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import cli

from monitor.authoring.fixtures import load_fixture


def test_init_makes_a_repository_whose_checks_pass_as_written(
    tmp_path: Path, database: str
) -> None:
    made = cli("init", str(tmp_path))
    assert made.returncode == 0
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        ".github/CODEOWNERS",
        ".github/pull_request_template.md",
        ".github/workflows/invariants.yml",
        "db/schema.sql",
        "deploy/ci/check-invariants.sh",
        "invariants/negative_totals.sql",
        "invariants/negative_totals.test.yaml",
        "invmon.yaml",
    ]
    assert cli("lint", cwd=tmp_path).returncode == 0
    tested = cli("test", "--strict", cwd=tmp_path, env={"INVMON_TEST_DSN": database})
    assert tested.returncode == 0, tested.stdout
    workflow = tmp_path / ".github" / "workflows" / "invariants.yml"
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
            str(workflow),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout
    assert "invmon-base" not in workflow.read_text()  # its own repo holds no invmon
    again = cli("init", str(tmp_path))
    assert again.stdout.count("kept ") == 6  # nothing is overwritten, no example comes back


def test_new_writes_an_invariant_and_its_cases_from_the_schema(tmp_path: Path) -> None:
    cli("init", str(tmp_path))
    made = cli("new", "payments/late_orders", "--table", "orders", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    sql = (tmp_path / "invariants" / "payments" / "late_orders.sql").read_text()
    assert "FROM orders AS t" in sql and "-- key: [id]" in sql
    assert cli("lint", cwd=tmp_path).returncode == 0
    unknown = cli("new", "x", "--table", "nope", cwd=tmp_path)
    assert unknown.stderr.strip() == "invmon: --table 'nope' is not in the schema; tables: orders"


def test_mistakes_in_headers_and_fixtures_come_with_a_hint(tmp_path: Path) -> None:
    (tmp_path / "a.sql").write_text(
        "-- description: Every order: exactly one payment\nSELECT 1 AS a WHERE false\n"
    )
    (tmp_path / "b.sql").write_text(
        "-- description: x\n-- owner: @payments\nSELECT 1 AS a WHERE false\n"
    )
    done = cli("lint", str(tmp_path))
    assert 'a value that contains ": " must be quoted' in done.stdout
    assert 'a value starting with @ must be quoted, e.g. owner: "@payments-oncall"' in done.stdout
    fixture = tmp_path / "c.test.yaml"
    fixture.write_text("cases:\n  - name: x\n    expect: {kyes: [1]}\n  - name: y\n    expct: {}\n")
    problems = [p.message for p in load_fixture(fixture, ("id",)).problems]
    assert problems == [
        "'x': unknown `expect` field(s) ['kyes']; did you mean 'kyes' -> 'keys'?",
        "'y': unknown field(s) ['expct']; did you mean 'expct' -> 'expect'?",
    ]
