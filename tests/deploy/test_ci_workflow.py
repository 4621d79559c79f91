"""The PR workflow people copy is valid for GitHub, installs invmon from a source that
exists and is not the PR itself, and updates one comment per PR."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "deploy" / "ci" / "invariants-pr.yml"


def steps() -> list[dict[str, object]]:
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    return [step for job in jobs.values() for step in job["steps"]]


def test_the_workflow_is_valid_against_githubs_schema() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
            str(WORKFLOW),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_invmon_is_installed_from_a_pinned_source_never_from_the_pr() -> None:
    runs = [str(s.get("run", "")) for s in steps()]
    installs = [r for r in runs if "pip install" in r]
    assert installs == ['pip install "${INVMON_SOURCE:-./invmon-base}"'] * 2
    base = [
        with_
        for s in steps()
        if isinstance(with_ := s.get("with"), dict) and with_.get("path") == "invmon-base"
    ]
    assert len(base) == 2
    assert all("base.sha" in str(with_["ref"]) for with_ in base)


def test_the_default_install_source_installs(tmp_path: Path) -> None:
    """What the workflow's default installs (this repository at a commit) is installable."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--quiet",
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_preview_edits_its_comment_instead_of_posting_again() -> None:
    preview = [str(s.get("run", "")) for s in steps() if "gh pr comment" in str(s.get("run", ""))]
    assert len(preview) == 1 and "--edit-last" in preview[0]
