"""A problem found in a user's file, reported as `path:line: message`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, order=True)
class Problem:
    path: Path
    line: int
    message: str
    level: str = "error"  # "error" stops the invariant from running; "warning" does not

    def __str__(self) -> str:
        prefix = "" if self.level == "error" else f"{self.level}: "
        return f"{self.path}:{self.line}: {prefix}{self.message}"


class ProblemsFound(Exception):
    """Raised where a caller needs a single exception for a list of problems."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))
