"""Finds invariant files, reads their headers and validates their SQL.

Loading never stops at the first broken file: every file gets either an Invariant or the
problems that keep it from being one, so one bad PR cannot silence the other checks.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from monitor.durations import (
    IntervalSchedule,
    Schedule,
    format_duration,
    parse_schedule,
    statement_timeout,
)
from monitor.fence.allowances import OFFLINE, FencePolicy
from monitor.fence.sqltree import NUL_MESSAGE
from monitor.fence.tree import Analysis
from monitor.invariants.header import (
    DEFAULT_TARGET,
    HeaderError,
    InvariantHeader,
    Severity,
    SplitFile,
    line_of_key,
    parse_header,
    split_file,
    stray_header_keys,
)
from monitor.invariants.validate import check_sql, columns_of
from monitor.problems import Problem


class Defaults(BaseModel):
    """What a header leaves unset: the config file's `defaults:` section."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # When an invariant whose header has no `schedule:` runs: `every 15m`, or five-field cron (UTC).
    schedule: str = "every 15m"
    # The statement timeout of an invariant whose header has no `timeout:`.
    timeout: timedelta = timedelta(seconds=30)
    # Offending rows fetched whole and attached, for a header with no `sample:`.
    sample: int = Field(default=20, ge=0, le=1000)
    # The severity of an invariant whose header has no `severity:`.
    severity: Severity = "warning"

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return statement_timeout(value)

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str) -> str:
        parse_schedule(value)
        return value


@dataclass(frozen=True)
class Invariant:
    name: str
    path: Path
    sql: str  # exactly the statement PostgreSQL's parser found, without `;` or what follows
    sql_first_line: int  # the file's line where `sql` starts
    header: InvariantHeader
    severity: Severity
    schedule: Schedule
    timeout: timedelta
    sample: int
    target: str = DEFAULT_TARGET  # the monitored database it runs on (config `targets:`)

    @property
    def description(self) -> str:
        return self.header.description

    @property
    def key(self) -> tuple[str, ...]:
        return tuple(self.header.key)

    @property
    def longest_run(self) -> timedelta:
        """The longest one run may take: its sources listed one after another, each within
        its own timeout, then the query within `timeout`. What the watchdog waits before
        it calls a run stuck."""
        listing = sum((s.timeout_delta for s in self.header.source.values()), timedelta(0))
        return listing + self.timeout


@dataclass
class LoadResult:
    invariants: list[Invariant] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.level == "error"]

    def failed_paths(self) -> set[Path]:
        return {p.path for p in self.errors}


# Shorter schedules are allowed (down to a second) but said to be unusual.
WARN_INTERVAL = timedelta(minutes=1)
MAX_FILE_BYTES = 256 * 1024  # an invariant is one query; a bigger file is not one
MAX_FILES = 10_000  # a folder of invariants, not a disk


@dataclass(frozen=True)
class Loading:
    """How files are read: what headers leave unset, how the fence judges offline, the
    size a file may have, and the targets it may run on, each with its timeout ceiling
    (config `defaults:`, `fence:`, `limits.file_bytes` and `targets:`)."""

    defaults: Defaults = field(default_factory=Defaults)
    policy: FencePolicy = OFFLINE
    max_file_bytes: int = MAX_FILE_BYTES
    targets: Mapping[str, timedelta | None] = field(default_factory=lambda: {DEFAULT_TARGET: None})


def _misspelt(missing: list[str], columns: list[str]) -> str:
    """When a key and an output column differ by a typo, either may be the one to fix."""
    pairs = [
        (m, close[0])
        for m in missing
        if (close := difflib.get_close_matches(m, columns, n=1, cutoff=0.7))
    ]
    return "".join(f"; is the query's {c!r} a misspelling of {m!r}?" for m, c in pairs)


def _header_line(split: SplitFile) -> int:
    return split.header_lines[0][0] if split.header_lines else 1


def bind_target(
    declared: str | None, name: str, targets: Mapping[str, timedelta | None]
) -> str | None:
    """The header's `target:` (`declared`), else the first folder of the name when a target
    has that name (`payments/x` runs on `payments`), else `default`; None when none exists.
    A file that does not load is bound by the same rule, from what its header still says."""
    if declared is not None:
        return declared if declared in targets else None
    folder = name.split("/", 1)[0] if "/" in name else None
    if folder in targets:
        return folder
    return DEFAULT_TARGET if DEFAULT_TARGET in targets else None


def discover(directory: Path) -> tuple[list[Path], list[Problem]]:
    """The invariant files under `directory`, and a problem for each thing that looks like
    one but cannot be read: nothing is skipped without a word."""
    found: list[Path] = []
    problems: list[Problem] = []

    def unreadable(error: OSError) -> None:
        where = Path(error.filename or directory)
        problems.append(Problem(where, 0, f"cannot read this folder ({error.strerror})"))

    for root, folders, files in os.walk(directory, onerror=unreadable):
        folders.sort()
        for name in folders:
            if Path(root, name).is_symlink():
                # os.walk does not go into it, and it went unsaid: a reviewer's linked
                # folder held a broken file, and lint passed. Not followed, since a link can
                # loop, or reach anywhere on the disk (a walk of `/` for .sql files).
                problems.append(
                    Problem(
                        Path(root, name),
                        0,
                        "a link to a folder, which is not read (a link can loop, or reach "
                        "anywhere on the disk): move its files here, or link each file",
                    )
                )
        for name in sorted(files):
            path = Path(root, name)
            if not name.lower().endswith(".sql"):
                continue
            if not name.endswith(".sql"):
                problems.append(
                    Problem(path, 0, "invariant files end in .sql (lower case); rename it")
                )
            elif path.is_symlink() and not path.exists():
                problems.append(Problem(path, 0, "a link to a file that does not exist"))
            elif not path.is_file():
                problems.append(Problem(path, 0, "not a regular file"))
            else:
                found.append(path)
            if len(found) + len(problems) > MAX_FILES:
                problems.append(
                    Problem(directory, 0, f"more than {MAX_FILES:,} files; the rest are not read")
                )
                return found, problems
    return found, problems


RESERVED_PREFIX = "invmon-self/"  # invmon's own checks (self_checks.py)
OWN_CHECKS_SEVERITY = "critical"  # theirs, wherever they are shown: invmon cannot watch


def name_for(path: Path, directory: Path) -> str:
    return path.relative_to(directory).with_suffix("").as_posix()


def read_text(path: Path, max_bytes: int) -> tuple[str | None, Problem | None]:
    """A file's text (a UTF-8 byte order mark dropped), or the problem that stops it;
    never more than `max_bytes` is read."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as exc:
        return None, Problem(path, 1, f"cannot read the file ({exc.strerror})")
    if len(raw) > max_bytes:
        return None, Problem(
            path,
            1,
            f"the file is larger than {max_bytes:,} bytes (limits.file_bytes); an invariant "
            "is one query",
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        return None, Problem(path, line, "not UTF-8 text")
    nul = text.find("\0")
    if nul >= 0:
        # PostgreSQL's parser (and so lint's) reads a C string, which ends at the first NUL:
        # lint would judge only what comes before it, while the driver refuses the whole.
        return None, Problem(path, text.count("\n", 0, nul) + 1, NUL_MESSAGE)
    return text, None


DEFAULT_LOADING = Loading()


Loaded = tuple[Invariant | None, list[Problem]]


class LoadMemo:
    """What each file loaded to, by its text: a daemon re-reads the whole folder on every
    reload, and parses only the files whose text (or the loading settings) changed."""

    def __init__(self) -> None:
        self._by_path: dict[Path, tuple[str, str, Loading, Loaded]] = {}

    def recall(self, path: Path, text: str, name: str, loading: Loading) -> Loaded | None:
        known = self._by_path.get(path)
        if known is not None and known[:3] == (text, name, loading):
            return known[3]
        return None

    def keep(self, path: Path, text: str, name: str, loading: Loading, loaded: Loaded) -> None:
        self._by_path[path] = (text, name, loading, loaded)

    def forget_others(self, paths: set[Path]) -> None:
        """Only the files of the latest load are worth remembering."""
        for path in set(self._by_path) - paths:
            del self._by_path[path]


def load_file(
    path: Path, name: str, loading: Loading = DEFAULT_LOADING, memo: LoadMemo | None = None
) -> Loaded:
    """The invariant (None when an error stops it) and every problem found, warnings too."""
    text, unreadable = read_text(path, loading.max_file_bytes)
    if text is None:
        assert unreadable is not None
        return None, [unreadable]
    if memo is None:
        return _parse_file(path, name, text, loading)
    loaded = memo.recall(path, text, name, loading)
    if loaded is None:
        loaded = _parse_file(path, name, text, loading)
        memo.keep(path, text, name, loading, loaded)
    return loaded


def _parse_file(path: Path, name: str, text: str, loading: Loading) -> Loaded:
    """One file read: its header and query judged, each rule below adding its problems; an
    Invariant only when no rule found an error."""
    defaults, policy = loading.defaults, loading.policy
    split = split_file(text)
    problems: list[Problem] = _reserved_name(path, name)
    header: InvariantHeader | None = None
    try:
        header = parse_header(split)
    except HeaderError as exc:
        problems.extend(Problem(path, line, message) for line, message in exc.problems)
    if header is not None:
        problems += _schedule_warning(path, split, header)
    problems += [Problem(path, line, message) for line, message in stray_header_keys(split)]
    offset = split.sql_first_line - 1
    analysis, sql_problems = check_sql(split.sql, policy)
    problems.extend(Problem(path, p.line + offset, p.message, p.level) for p in sql_problems)
    if header is None:
        return None, problems
    if not any(p.level == "error" for p in sql_problems):
        problems += _key_problems(path, split, header, analysis)
    target = bind_target(header.target, name, loading.targets)
    timeout = header.timeout_delta or defaults.timeout
    if target is None:
        problems.append(_unknown_target(path, split, header, loading))
    else:
        problems += _timeout_problems(path, split, timeout, target, loading)
    if target is None or any(p.level == "error" for p in problems):
        # Its header was read: a selection by tag can tell whether this file is chosen.
        return None, [replace(p, tags=tuple(header.tags)) for p in problems]
    return Invariant(
        name=name,
        path=path,
        sql=analysis.text,
        sql_first_line=offset + analysis.text_first_line,
        header=header,
        severity=header.severity or defaults.severity,
        schedule=header.parsed_schedule or parse_schedule(defaults.schedule),
        timeout=timeout,
        sample=defaults.sample if header.sample is None else header.sample,
        target=target,
    ), problems


def _reserved_name(path: Path, name: str) -> list[Problem]:
    if not name.startswith(RESERVED_PREFIX):
        return []
    return [Problem(path, 1, f"names under {RESERVED_PREFIX} are invmon's own checks; rename it")]


def _schedule_warning(path: Path, split: SplitFile, header: InvariantHeader) -> list[Problem]:
    schedule = header.parsed_schedule
    if not (isinstance(schedule, IntervalSchedule) and schedule.every < WARN_INTERVAL):
        return []
    return [
        Problem(
            path,
            line_of_key(split, "schedule") or _header_line(split),
            f"runs {schedule} against the replica: each run is a query there and a row in "
            "the state store, and a replica lags by seconds anyway; under a minute is "
            "rarely worth it (e.g. every 1m)",
            "warning",
        )
    ]


def _key_problems(
    path: Path, split: SplitFile, header: InvariantHeader, analysis: Analysis
) -> list[Problem]:
    """`key:` names output columns of the query (when its columns can be read off it)."""
    if not header.key:
        return []
    columns = columns_of(analysis.statement)
    if columns is None:
        return []
    line = line_of_key(split, "key") or 1
    problems = [
        # What the run would refuse (execute._key_positions): half a key read.
        Problem(
            path,
            line,
            f"key column {k!r} names {columns.count(k)} of the query's output columns; "
            "give them distinct names (AS …)",
        )
        for k in dict.fromkeys(header.key)
        if columns.count(k) > 1
    ]
    missing = [k for k in header.key if k not in columns]
    if missing:
        problems.append(
            Problem(
                path,
                line,
                f"key column{'s' * (len(missing) > 1)} {', '.join(map(repr, missing))} "
                f"not among the query's output columns ({', '.join(columns)})"
                + _folded(missing, columns)
                + _misspelt([k for k in missing if k.lower() not in columns], columns),
            )
        )
    return problems


def _folded(missing: list[str], columns: list[str]) -> str:
    """The lower-casing hint, only for a key it explains: one with capitals that names a
    column once lower-cased."""
    found = [
        f"the query's {m.lower()!r} is {m!r} unquoted"
        for m in missing
        if m != m.lower() and m.lower() in columns
    ]
    if not found:
        return ""
    return f"; unquoted names are lower-cased by PostgreSQL ({', '.join(found)})"


def _unknown_target(
    path: Path, split: SplitFile, header: InvariantHeader, loading: Loading
) -> Problem:
    known = ", ".join(sorted(loading.targets)) or "none"
    what = (
        f"target {header.target!r} is not in the config"
        if header.target is not None
        else "no target: write `target:` or put the file under a target's folder"
    )
    return Problem(
        path, line_of_key(split, "target") or _header_line(split), f"{what}; targets: {known}"
    )


def _timeout_problems(
    path: Path, split: SplitFile, timeout: timedelta, target: str, loading: Loading
) -> list[Problem]:
    """A file's timeout may not exceed its target's statement_timeout ceiling."""
    ceiling = loading.targets.get(target)
    if ceiling is None or timeout <= ceiling:
        return []
    return [
        Problem(
            path,
            line_of_key(split, "timeout") or _header_line(split),
            f"timeout {format_duration(timeout)} is over target {target!r}'s "
            f"statement_timeout ceiling ({format_duration(ceiling)})",
        )
    ]


def load_directory(
    directory: Path, loading: Loading = DEFAULT_LOADING, memo: LoadMemo | None = None
) -> LoadResult:
    result = LoadResult()
    if not directory.is_dir():
        result.problems.append(
            Problem(directory, 0, "invariants folder not found; pass --invariants DIR")
        )
        return result
    paths, skipped = discover(directory)
    loaded = load_paths(paths, directory, loading, memo)
    loaded.problems[:0] = skipped
    return loaded


def load_paths(
    paths: Iterable[Path],
    directory: Path,
    loading: Loading = DEFAULT_LOADING,
    memo: LoadMemo | None = None,
) -> LoadResult:
    result = LoadResult()
    paths = list(paths)
    if memo is not None:
        memo.forget_others(set(paths))
    for path in paths:
        invariant, problems = load_file(path, name_for(path, directory), loading, memo)
        if invariant is not None:
            result.invariants.append(invariant)
        result.problems.extend(problems)
    _check_unique_names(result)
    return result


def _check_unique_names(result: LoadResult) -> None:
    # Names come from relative paths, so they collide only across case or via symlinks; a
    # collision would merge two invariants' history, so both are refused.
    by_name: dict[str, list[Invariant]] = {}
    for inv in result.invariants:
        by_name.setdefault(inv.name.lower(), []).append(inv)
    for same in by_name.values():
        if len(same) > 1:
            others = ", ".join(str(i.path) for i in same)
            for inv in same:
                said = f"duplicate invariant name {inv.name!r} ({others})"
                # Its header was read: a selection by tag can tell whether it is chosen.
                result.problems.append(Problem(inv.path, 1, said, tags=tuple(inv.header.tags)))
            result.invariants = [i for i in result.invariants if i not in same]
