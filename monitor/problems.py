"""Problems found in a user's file: `SqlProblem` at a line of a query, `Problem` at a line
of a file, reported as `path:line: message`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from monitor.text import printable


@dataclass(frozen=True)
class SqlProblem:
    line: int  # 1-based, relative to the SQL text given
    message: str
    level: str = "error"  # a "warning" does not stop the invariant from running
    # "unknown": a name the offline catalog does not know, which a database may (the
    # commands that run against one leave it to that database's own catalog).
    rule: str = ""


@dataclass(frozen=True, order=True)
class Problem:
    path: Path
    line: int
    message: str
    level: str = "error"  # "error" stops the invariant from running; "warning" does not
    # The tags of the file's header, when it was read: a file that did not load is still
    # chosen, or not, by a `--select tag:…` (invariants/selection.py); None when unread.
    tags: tuple[str, ...] | None = field(default=None, compare=False)

    def __str__(self) -> str:
        # A path or a message may hold anything a file name can (a newline): one line each.
        prefix = "" if self.level == "error" else f"{self.level}: "
        return printable(f"{self.path}:{self.line}: {prefix}{self.message}")
