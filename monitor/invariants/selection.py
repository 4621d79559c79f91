"""Which invariants a command works on: `--select` (repeatable; the union) for lint, test,
explain and check, in one syntax. Pure.

- `payments/duplicate_refunds`: a name;
- `payments/`: every invariant under a folder (also `invariants/payments/`, a path);
- `payments/*_refunds`: a glob over names;
- `tag:money`: a tag from the header's `tags:`;
- `invariants/payments/duplicate_refunds.sql`: a file, as a path from here.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

from monitor.invariants.loader import Invariant


class NothingSelected(Exception):
    """A selector matched no invariant; the message lists what there is."""


def selector_name(selector: str, folder: Path) -> str:
    """A path given from here (`invariants/payments/x.sql`) as a name (`payments/x`)."""
    text = selector.removesuffix(".sql")
    try:
        resolved = Path(text).resolve()
        inside = resolved.relative_to(folder.resolve())
    except ValueError:
        return text
    name = inside.as_posix()
    return "" if name == "." else name + ("/" if selector.endswith("/") else "")


def matches(invariant: Invariant, selector: str, folder: Path) -> bool:
    return name_matches(invariant.name, invariant.header.tags, selector, folder)


def named_by(name: str, pattern: str) -> bool:
    """Whether `pattern` names `name`: exactly, or as a glob (`payments/*`). The name itself
    is tried first: a name holding `[` (`x[1]/d`) read as a glob matched nothing, so it
    could not be selected or muted by its own name."""
    if name == pattern:
        return True
    return any(ch in pattern for ch in "*?[") and fnmatch.fnmatchcase(name, pattern)


def name_matches(name: str, tags: Collection[str], selector: str, folder: Path) -> bool:
    """Whether an invariant of this name and these tags is selected (a file that does not
    load has a name but no tags)."""
    if selector.startswith("tag:"):
        return selector[4:] in tags
    wanted = selector_name(selector, folder)
    if wanted == "" or wanted.endswith("/"):
        return name.startswith(wanted)
    if (folder / wanted).is_dir():
        return name.startswith(wanted + "/")
    return named_by(name, wanted)


def select(
    invariants: Sequence[Invariant], selectors: Iterable[str], folder: Path
) -> list[Invariant]:
    """The invariants any selector matches, in their order; all when there is none."""
    chosen = list(selectors)
    if not chosen:
        return list(invariants)
    for selector in chosen:
        if not any(matches(i, selector, folder) for i in invariants):
            names = ", ".join(sorted(i.name for i in invariants)[:20]) or "none"
            tags = ", ".join(sorted({t for i in invariants for t in i.header.tags})) or "none"
            raise NothingSelected(
                f"--select {selector!r} matches no invariant; names: {names}; tags: {tags}"
            )
    return [i for i in invariants if any(matches(i, s, folder) for s in chosen)]
