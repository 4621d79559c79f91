"""`invmon test`: fixture cases prove an invariant fires; a broken invariant fails them with
a readable key diff; an invariant with no firing case is called untested."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import invmon

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "deploy" / "demo" / "schema.sql"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    target = tmp_path / "invariants"
    target.mkdir()
    for name in ("duplicate_settled_refunds.sql", "duplicate_settled_refunds.test.yaml"):
        shutil.copy(ROOT / "invariants" / name, target / name)
    return target


def run(folder: Path, admin_dsn: str, *more: str):  # type: ignore[no-untyped-def]
    return invmon(
        "test", "--invariants", str(folder), "--schema", str(SCHEMA), "--dsn", admin_dsn, *more
    )


def test_the_shipped_fixtures_all_pass_strictly(admin_dsn: str) -> None:
    done = invmon(
        "test",
        "--invariants",
        str(ROOT / "invariants"),
        "--schema",
        str(SCHEMA),
        "--dsn",
        admin_dsn,
        "--strict",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("8 of 8 cases passed; 0 invariant(s) failing, 0 untested")


def test_expected_keys_that_differ_fail_with_a_readable_diff(folder: Path, admin_dsn: str) -> None:
    fixture = folder / "duplicate_settled_refunds.test.yaml"
    fixture.write_text(fixture.read_text().replace("keys: [[10]]", "keys: [[11]]"))
    done = run(folder, admin_dsn)
    assert done.returncode == 1
    assert (
        "  ❌ a dispute paid back twice fires, once: missing keys [11]; unexpected keys [10]"
        in (done.stdout.splitlines())
    )


def test_deleting_the_where_clause_makes_the_fixture_fail(folder: Path, admin_dsn: str) -> None:
    query = folder / "duplicate_settled_refunds.sql"
    query.write_text(query.read_text().replace("WHERE r.status = 'settled'\n", ""))
    done = run(folder, admin_dsn)
    assert done.returncode == 1
    assert (
        "  ❌ a retry after a failed attempt is fine: expected 0 offending rows, got 1: [10]"
        in done.stdout.splitlines()
    )


def test_an_invariant_without_a_firing_case_is_untested(folder: Path, admin_dsn: str) -> None:
    (folder / "duplicate_settled_refunds.test.yaml").unlink()
    lenient = run(folder, admin_dsn)
    assert lenient.returncode == 0
    assert (
        "  warning: untested: no case in duplicate_settled_refunds.test.yaml shows it "
        "firing; an invariant that never returns a row is a check that cannot fail"
        in (lenient.stdout.splitlines())
    )
    strict = run(folder, admin_dsn, "--strict")
    assert strict.returncode == 2
    assert "  error: untested: " in strict.stdout


def test_a_malformed_fixture_is_reported_at_its_line(folder: Path, admin_dsn: str) -> None:
    (folder / "duplicate_settled_refunds.test.yaml").write_text(
        "cases:\n  - name: fine\n    rows: {}\n    expect: {count: 0}\n"
        "  - name: bad\n    rows: {}\n"
    )
    done = run(folder, admin_dsn)
    assert done.returncode == 1
    assert (
        f"{folder}/duplicate_settled_refunds.test.yaml:5: 'bad': `expect` needs `keys` or "
        "`count`" in done.stdout.splitlines()
    )
