"""A config file's relative paths are read from its folder, as docker compose and systemd
read theirs: the daemon and every command find the same invariants, schema, state file and
secret files from whatever working directory they start in. A path not found says what was
looked for and where."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import PRIVILEGED_YAML, cli, invmon, items_table

from monitor.config.loading import load_config


def project(root: Path) -> Path:
    """/srv/shop-like folder: a config with relative paths only, and what they name."""
    (root / "invariants").mkdir(parents=True)
    (root / "invariants" / "bad_rows.sql").write_text(
        "-- description: nothing is bad\n-- key: [id]\nSELECT id FROM items WHERE bad\n"
    )
    (root / "secrets").mkdir()
    (root / "secrets" / "signing").write_text("s3cret-signing-value\n")
    config = root / "invmon.yaml"
    config.write_text(
        PRIVILEGED_YAML
        + "invariants: invariants\n"
        + "schema: schema.sql\n"
        + "state:\n  path: state/invmon-state.db\n"
        + "slack:\n  signing_secret: ${file:secrets/signing}\n"
        + "targets:\n  default:\n    dsn: ${INVMON_DSN:-}\n"
        + "  jobs:\n    dsn: ${INVMON_DSN:-}\n    schema: jobs.sql\n"
    )
    (root / "state").mkdir()
    return config


def test_relative_paths_are_read_from_the_config_files_folder(tmp_path: Path) -> None:
    config = load_config(project(tmp_path / "srv" / "shop"))
    root = tmp_path / "srv" / "shop"
    assert config.invariants == root / "invariants"
    assert config.schema_path == root / "schema.sql"
    assert config.state.path == root / "state" / "invmon-state.db"
    assert config.targets["jobs"].schema_path == root / "jobs.sql"
    assert config.targets["default"].schema_path is None
    assert config.slack.signing_secret == "s3cret-signing-value"
    assert config.file == root / "invmon.yaml"


def test_run_and_status_with_config_from_elsewhere_share_one_store(
    database: str, tmp_path: Path
) -> None:
    items_table(database, rows=3, bad=(2,))
    config = project(tmp_path / "srv" / "shop")
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    once = invmon(
        "run", "--once", "--config", str(config), cwd=elsewhere, env={"INVMON_DSN": database}
    )
    assert once.returncode == 1, once.stderr  # violated: it ran
    assert (tmp_path / "srv" / "shop" / "state" / "invmon-state.db").is_file()
    status = cli("status", "--format", "json", "--config", str(config), cwd=elsewhere)
    assert status.returncode == 0, status.stderr
    runs = json.loads(status.stdout)["last_runs"]
    assert [(r["invariant"], r["status"], r["count"]) for r in runs] == [
        ("bad_rows", "violated", 1)
    ]
    assert list(elsewhere.iterdir()) == []  # nothing written where it was started


def test_a_missing_folder_says_what_was_looked_for_and_from_where(tmp_path: Path) -> None:
    config = tmp_path / "shop" / "invmon.yaml"
    config.parent.mkdir()
    config.write_text("invariants: checks\n")
    done = cli("lint", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"invmon: invariants folder '{tmp_path / 'shop' / 'checks'}' not found (looked for "
        f"'{tmp_path / 'shop' / 'checks'}', relative paths of '{config}' are read from its "
        "folder); pass --invariants DIR"
    )
