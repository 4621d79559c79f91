"""Which invmon this is, in one place: `version` and `commit`. `invmon --version`, the
daemon's start-up log lines and /metrics' `invmon_build_info` read these two names, and
nothing else says a version.

`version` is setuptools-scm's, worked out from git when invmon was built or installed
(pyproject.toml's [tool.setuptools_scm]) and written then into monitor/_version.py: a
wheel's is its build's, and an editable install's (`pip install -e`) is fixed at install
time, while commits go on being made. So `commit`, the short hash of the commit that runs,
is asked of git itself when this package is a git checkout's; otherwise (a wheel, the
image) it is the `g<hash>` in the local part a version past a release tag carries; a build
of a release tag itself, or of sources without git metadata, says "unknown".
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

__all__ = ["commit", "commit_of", "version"]

try:
    from monitor._version import __version__ as version
except ImportError:  # a source tree never built nor installed: nothing has written it
    version = "unknown"

GIT_TIMEOUT = 2.0  # seconds for `git rev-parse`; a git that does not answer is no answer
_HASH = re.compile(r"[0-9a-f]{4,40}")
# The local part setuptools-scm writes: +g<hash>, +g<hash>.d<date> (uncommitted changes),
# or, before the first release tag, +<fallback's local part>.g<hash>.
_LOCAL_HASH = re.compile(r"\+(?:[0-9a-z]+\.)*g([0-9a-f]{4,40})(?:\.|$)")


def commit_of(version: str, root: Path) -> str:
    """The short hash of the commit `root` holds when it is a git checkout (HEAD now);
    else the one in `version`'s local part; else "unknown"."""
    if (root / ".git").exists():
        head = _git_head(root)
        if head is not None:
            return head
    local = _LOCAL_HASH.search(version)
    return local.group(1) if local else "unknown"


def _git_head(root: Path) -> str | None:
    """HEAD's short hash, if git says `root` is the top of a work tree (not a folder inside
    another repository that git would find above it)."""
    try:
        answer = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--show-toplevel", "--short", "HEAD"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):  # no git, or it hung
        return None
    lines = answer.stdout.splitlines()
    if answer.returncode != 0 or len(lines) != 2 or not _HASH.fullmatch(lines[1]):
        return None
    top, head = lines
    return head if Path(top).resolve() == root.resolve() else None


# The folder above the package: the checkout's root in a checkout (an editable install runs
# from there), site-packages in an installed wheel.
commit = commit_of(version, Path(__file__).resolve().parent.parent)
