"""A new repository of invariants works from its first commit, a new invariant starts from
the schema, and every message that could have a hint has one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import PRIVILEGED_YAML, cli, invmon, sql

from monitor.authoring.fixtures import load_fixture

ROOT = Path(__file__).resolve().parents[2]


def test_init_makes_a_repository_whose_checks_pass_as_written(
    tmp_path: Path, database: str
) -> None:
    made = cli("init", str(tmp_path))
    assert made.returncode == 0
    # An editable install knows no commit to install from: the workflow would stop at once.
    assert made.stdout.rstrip().endswith(
        "The PR workflow installs invmon from the repository variable INVMON_SOURCE, which "
        "this install cannot fill in: set it to a release, e.g. "
        "'invariant-monitor @ git+https://github.com/your-org/invmon@vX.Y.Z'."
    )
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        ".github/CODEOWNERS",
        ".github/pull_request_template.md",
        ".github/workflows/invariants.yml",
        ".gitignore",
        "db/schema.sql",
        "deploy/ci/check-invariants.sh",
        "deploy/readonly-role.sql",
        "deploy/verify-readonly-role.sql",
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
    assert again.stdout.count("kept ") == 9  # nothing is overwritten, no example comes back
    for name in ("readonly-role.sql", "verify-readonly-role.sql"):  # as shipped, byte for byte
        assert (tmp_path / "deploy" / name).read_bytes() == (ROOT / "deploy" / name).read_bytes()


def test_the_new_repository_passes_its_own_check_script_and_ignores_the_state_store(
    tmp_path: Path, database: str
) -> None:
    """The CI script as the workflow runs it (no SCHEMA: invmon.yaml names the schema), and
    the state file a daemon leaves beside the config, which git must not offer to commit."""
    cli("init", str(tmp_path))
    script = tmp_path / "deploy" / "ci" / "check-invariants.sh"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVMON")}
    env.pop("SCHEMA", None)
    env.pop("INVARIANTS", None)
    checked = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**env, "INVMON": f"{sys.executable} -m monitor.cli", "INVMON_TEST_DSN": database},
        timeout=300,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[-1] == "invariants check passed"
    assert "2 of 2 cases passed; 0 invariants failing, 0 untested" in checked.stdout
    assert "SCHEMA" not in (tmp_path / ".github" / "workflows" / "invariants.yml").read_text()

    sql(database, "CREATE TABLE orders (id bigint PRIMARY KEY, status text, total numeric)")
    with (tmp_path / "invmon.yaml").open("a") as config:
        config.write(PRIVILEGED_YAML)  # the suite's role is a superuser
    ran = invmon("run", "--once", cwd=tmp_path, env={"INVMON_REPLICA_DSN": database})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (tmp_path / "invmon-state.db").is_file()
    git = ["git", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    untracked = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert [line for line in untracked.stdout.splitlines() if "invmon-state" in line] == []
    state = [
        "invmon-state.db",
        "invmon-state.db-wal",
        "invmon-state.db-shm",
        "invmon-state.db.lock",
    ]
    ignored = subprocess.run(
        [*git, "check-ignore", *state], capture_output=True, text=True, check=False
    )
    assert ignored.stdout.splitlines() == state


def test_new_writes_an_invariant_and_its_cases_from_the_schema(tmp_path: Path) -> None:
    cli("init", str(tmp_path))
    made = cli("new", "payments/late_orders", "--table", "orders", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    sql = (tmp_path / "invariants" / "payments" / "late_orders.sql").read_text()
    assert "FROM orders AS t" in sql and "-- key: [id]" in sql
    linted = cli("lint", cwd=tmp_path)
    assert linted.returncode == 0  # valid SQL to iterate on; each TODO line is a warning
    where = "invariants/payments/late_orders.sql"  # as the config names the folder
    said = "warning: still says TODO: finish it before it is merged"
    assert linted.stdout.splitlines() == [f"{where}:1: {said}", f"{where}:9: {said}"]
    unknown = cli("new", "x", "--table", "nope", cwd=tmp_path)
    assert unknown.stderr.strip() == "invmon: --table 'nope' is not in the schema; tables: orders"
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    for outside in ("../escape", "/tmp/invmon-new-escape", "a//b", "payments/../../x", "./x"):
        refused = cli("new", outside, cwd=tmp_path)
        assert (refused.returncode, refused.stderr.strip()) == (
            2,
            f"invmon: {outside!r} is not an invariant name: it is a path inside the invariants "
            "folder, without `..`, a leading `/` or empty parts (e.g. payments/duplicate_refunds)",
        )
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert not (tmp_path.parent / "escape.sql").exists()


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


def test_the_wheel_carries_the_role_scripts_init_writes() -> None:
    """From a plain `pip install`, init reads them from the package pyproject maps deploy/
    to: exactly these two files of it (deploy/'s Python helpers stay out of the wheel)."""
    import tomllib

    from monitor.authoring.scaffold import ROLE_SCRIPTS

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"]["monitor.role_scripts"] == "deploy"
    assert setuptools["package-data"]["monitor.role_scripts"] == list(ROLE_SCRIPTS)
    assert sorted(p.name for p in (ROOT / "deploy").glob("*.py")) == []  # no module shipped
    assert all((ROOT / "deploy" / name).is_file() for name in ROLE_SCRIPTS)
