"""boto3 is the `s3` extra: without it, an invariant with an S3 source is that invariant's
error, naming the source, the place and the fix, and everything else runs as before.

Tested for real without uninstalling anything: invmon runs in a process whose imports of
boto3 and botocore fail as they do where the extra is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from helpers import CHECK
from sources_kit import ROOT, live_invariant

# A finder ahead of every other: boto3 and botocore are not there, exactly as Python says
# when a package is not installed; then the real command line, with this process's argv.
WITHOUT_BOTO3 = """\
import sys

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("boto3", "botocore"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from monitor.cli.commands import main
main(sys.argv[1:], prog_name="invmon")
"""

MISSING = (
    "source receipt_objects: listing s3://receipts-prod/receipts/ needs the s3 extra (boto3), "
    "which is not installed: pip install 'invariant-monitor[s3]'"
)


def without_boto3(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("INVMON_")}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_BOTO3, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean,
        timeout=180,
    )


def a_folder_with_an_s3_source(tmp_path: Path) -> Path:
    """The live receipts invariant, its source an S3 bucket, beside one that lists nothing."""
    folder = tmp_path / "invariants"
    live_invariant(folder, s3='"s3://receipts-prod/receipts/"', timeout="30s")
    (folder / "plain.sql").write_text(
        "-- description: Nothing is wrong.\nSELECT 1 AS a WHERE false\n"
    )
    return folder


def test_the_blocker_blocks() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_BOTO3.split("from monitor")[0] + "import boto3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == "ModuleNotFoundError: No module named 'boto3'"


def test_an_s3_source_without_the_extra_is_its_invariants_error_and_the_rest_runs(
    schema_database: str, tmp_path: Path
) -> None:
    folder = a_folder_with_an_s3_source(tmp_path)
    done = without_boto3(
        *CHECK, "--dsn", schema_database, "--invariants", str(folder), "--format", "json"
    )
    assert "Traceback" not in done.stderr
    results = {r["invariant"]: r for r in json.loads(done.stdout)["results"]}
    assert {name: r["status"] for name, r in results.items()} == {
        "orphaned_receipts_live": "error",
        "plain": "ok",
    }
    assert results["orphaned_receipts_live"]["error"] == MISSING
    assert done.returncode == 2  # an error, as any other listing's
    text = without_boto3(*CHECK, "--dsn", schema_database, "--invariants", str(folder))
    assert "Traceback" not in text.stderr
    assert f"    {MISSING}" in text.stdout.splitlines()


def test_the_place_said_includes_the_endpoint(schema_database: str, tmp_path: Path) -> None:
    folder = tmp_path / "invariants"
    live_invariant(folder, s3='"s3://receipts/x/"', endpoint="http://127.0.0.1:9")
    done = without_boto3(
        *CHECK, "--dsn", schema_database, "--invariants", str(folder), "--format", "json"
    )
    [result] = json.loads(done.stdout)["results"]
    assert result["error"] == (
        "source receipt_objects: listing s3://receipts/x/ at http://127.0.0.1:9 needs the s3 "
        "extra (boto3), which is not installed: pip install 'invariant-monitor[s3]'"
    )


def test_lint_and_the_demo_need_no_boto3(admin_dsn: str, tmp_path: Path) -> None:
    folder = a_folder_with_an_s3_source(tmp_path)
    linted = without_boto3("lint", "--invariants", str(folder))
    assert (linted.returncode, "Traceback" in linted.stderr) == (0, False), linted.stderr
    demo = without_boto3("demo", "--dsn", admin_dsn, cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "0 held, 5 violated, 1 could not be evaluated" in demo.stdout
    # Its live form lists a folder: no S3, so no extra.
    assert "payments/orphaned_receipts_live  payments  ❌ violated  5" in demo.stdout


def test_boto3_is_the_s3_extra_and_the_dev_extra_has_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert not [d for d in project["dependencies"] if d.startswith(("boto3", "botocore"))]
    extras = project["optional-dependencies"]
    assert extras["s3"] == ["boto3>=1.34,<2"]
    assert "invariant-monitor[s3]" in extras["dev"]


def test_no_module_of_invmon_imports_boto3_when_it_is_imported() -> None:
    """Every module imports without the extra: boto3 is imported inside the lister only."""
    code = WITHOUT_BOTO3.split("from monitor")[0] + (
        "import importlib, pkgutil, monitor, alerts\n"
        "for package in (monitor, alerts):\n"
        "    for module in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        if module.name != 'monitor.cli.__main__':\n"
        "            importlib.import_module(module.name)\n"
        "print('imported', len(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported ")
