"""`invmon --version`: the version and the commit as monitor.version says them, the commit
being this checkout's HEAD; and where the commit comes from in a checkout and outside one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

import monitor
from monitor import version as build
from monitor.version import commit_of

CHECKOUT = Path(monitor.__file__).resolve().parent.parent
AUTHOR = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **AUTHOR},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.strip()


def commit_to(repo: Path, name: str) -> str:
    (repo / name).write_text(f"{name}\n")
    git("add", name, cwd=repo)
    git("commit", "--quiet", "-m", name, cwd=repo)
    return git("rev-parse", "--short", "HEAD", cwd=repo)


def test_invmon_version_prints_the_version_and_the_checkouts_commit() -> None:
    assert (CHECKOUT / ".git").exists(), "the suite runs from a git checkout of invmon"
    head = git("rev-parse", "--short", "HEAD", cwd=CHECKOUT)
    executable = Path(sys.executable).with_name("invmon")  # the installed entry point
    ran = subprocess.run(
        [str(executable), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (ran.returncode, ran.stderr) == (0, "")
    assert ran.stdout == f"invmon, version {build.version} (commit {build.commit})\n"
    assert build.commit == head
    assert str(Version(build.version)) == build.version  # PEP 440, already normalised


def test_in_a_checkout_the_commit_is_heads_and_moves_with_each_commit(tmp_path: Path) -> None:
    repo = tmp_path / "checkout"
    repo.mkdir()
    git("init", "--quiet", cwd=repo)
    first = commit_to(repo, "one")
    # The version an editable install was made with names an older commit: HEAD wins.
    assert commit_of("0.2.1.dev3+g1a2b3c4d5", repo) == first
    second = commit_to(repo, "two")
    assert second != first
    assert commit_of("0.2.1.dev3+g1a2b3c4d5", repo) == second


@pytest.mark.parametrize(
    ("version", "commit"),
    [
        ("0.2.1.dev3+g1a2b3c4d5", "1a2b3c4d5"),
        ("0.2.1.dev3+g1a2b3c4d5.d20260101", "1a2b3c4d5"),  # built with uncommitted changes
        ("1.dev149+unknown.g6d7f80905.d20261202", "6d7f80905"),  # before the first tag
        ("0.2.0", "unknown"),  # a release tag's own build
        ("0+unknown", "unknown"),  # no git metadata: the fallback
        ("unknown", "unknown"),  # never built
    ],
)
def test_outside_a_checkout_the_commit_is_the_versions_local_part(
    tmp_path: Path, version: str, commit: str
) -> None:
    assert commit_of(version, tmp_path) == commit


def test_a_folder_inside_another_repository_is_not_its_checkout(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    outer.mkdir()
    git("init", "--quiet", cwd=outer)
    commit_to(outer, "one")
    inner = outer / "site-packages"
    (inner / ".git").mkdir(parents=True)  # not a repository: git would find outer's
    assert commit_of("0.2.1.dev3+g1a2b3c4d5", inner) == "1a2b3c4d5"
