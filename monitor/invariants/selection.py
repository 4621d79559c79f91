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
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path

from monitor.invariants.loader import Invariant, LoadResult
from monitor.problems import Problem


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
    if _is_dir(folder / wanted):
        return name.startswith(wanted + "/")
    return named_by(name, wanted)


def select(
    invariants: Sequence[Invariant], selectors: Iterable[str], folder: Path
) -> list[Invariant]:
    """The invariants any selector matches, in their order; all when there is none."""
    return select_loaded(LoadResult(list(invariants), []), list(selectors), folder).invariants


def select_loaded(
    loaded: LoadResult,
    selectors: Sequence[str],
    folder: Path,
    owner: Callable[[Path], Path] = lambda path: path,
) -> LoadResult:
    """The invariants any selector matches, and the problems of every file one may name,
    loaded or not; all when there is no selector. Each selector must match a file, or
    NothingSelected. `owner`: the invariant file a problem's path belongs to (lint's maps a
    fixture to its invariant).

    A file that did not load is chosen by the tags of its header when it was read
    (Problem.tags); when it was not, a `tag:` selector keeps its problems, since it may
    carry the tag. Dropping them made a `tag:money` run pass with a violated invariant left
    out, its header's typo unsaid. A problem of the folder itself, or of a folder that
    holds what a selector names, is kept too."""
    if not selectors:
        return loaded
    # By path, not by name: `x.SQL` beside a loaded `x.sql` has the same name, not its tags.
    tags = {i.path: i.header.tags for i in loaded.invariants}

    def names_problem(problem: Problem, selector: str) -> bool:
        path = owner(problem.path)
        name = problem_name(path, folder)
        if name is None:
            return True  # the folder, or a path outside it: it may hold anything
        known = tags.get(path, problem.tags)  # a loaded file's, or a failed file's header's
        if known is not None:
            return name_matches(name, known, selector, folder)
        if selector.startswith("tag:"):
            return True  # a header never read may hold any tag
        wanted = selector_name(selector, folder).rstrip("/")
        # By its name; or a folder that could not be read, named or holding what is named.
        return (
            name_matches(name, (), selector, folder)
            or wanted == name
            or (wanted.startswith(name + "/"))
        )

    for selector in selectors:
        if not any(matches(i, selector, folder) for i in loaded.invariants) and not any(
            names_problem(p, selector) for p in loaded.errors
        ):
            names = {i.name for i in loaded.invariants}
            names |= {n for p in loaded.problems if (n := problem_name(owner(p.path), folder))}
            shown = ", ".join(sorted(names)[:20]) or "none"
            known_tags = ", ".join(sorted({t for ts in tags.values() for t in ts})) or "none"
            raise NothingSelected(
                f"--select {selector!r} matches no invariant; names: {shown}; tags: {known_tags}"
            )
    return LoadResult(
        [i for i in loaded.invariants if any(matches(i, s, folder) for s in selectors)],
        [p for p in loaded.problems if any(names_problem(p, s) for s in selectors)],
    )


def problem_name(path: Path, folder: Path) -> str | None:
    """The invariant name of a problem's file in `folder` (its path less `.sql`, in any
    case), or a folder's path as it is (`payments/v1.2`); None for the folder itself or a
    path outside it."""
    try:
        inside = path.relative_to(folder).as_posix()
    except ValueError:
        return None
    if inside.lower().endswith(".sql"):
        inside = inside[: -len(".sql")]
    return None if inside in ("", ".") else inside


def _is_dir(path: Path) -> bool:
    """Whether `path` is a folder; False when it cannot be told (a parent that cannot be
    read raised PermissionError, a traceback for `--select payments/v1.2/x`)."""
    try:
        return path.is_dir()
    except OSError:
        return False
