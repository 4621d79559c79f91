"""The invariants a daemon runs, and what a (re)load changes. `diff` is pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from monitor.invariants.header import InvariantHeader
from monitor.invariants.loader import Invariant
from monitor.problems import Problem


@dataclass
class Reload:
    """What a (re)load changed, for logs and tests."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    invalid: dict[str, list[Problem]] = field(default_factory=dict)
    kept_previous: list[str] = field(default_factory=list)


def diff(
    previous: Mapping[str, Invariant],
    valid: Mapping[str, Invariant],
    invalid: Mapping[str, list[Problem]],
) -> tuple[dict[str, Invariant], Reload]:
    """The invariants to run from now on, and the change. A file that fails validation
    keeps its earlier version running, if it had one; a removed file stops."""
    change = Reload(invalid=dict(invalid))
    running: dict[str, Invariant] = {}
    for name, inv in valid.items():
        old = previous.get(name)
        if old is None:
            change.added.append(name)
        elif old != inv:
            change.updated.append(name)
        running[name] = inv
    for name, old in previous.items():
        if name in invalid:
            change.kept_previous.append(name)
            running.setdefault(name, old)
        elif name not in valid:
            change.removed.append(name)
    return running, change


class Definitions:
    """The invariants running now. Replaced whole on each reload, so a reader (alerting,
    the HTTP listener) always sees one consistent set without a lock."""

    def __init__(self) -> None:
        self.current: dict[str, Invariant] = {}

    def describe(self, name: str) -> InvariantHeader | None:
        found = self.current.get(name)
        return found.header if found else None
