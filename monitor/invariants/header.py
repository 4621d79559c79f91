"""The header of an invariant file: its leading `-- key: value` comment lines, read as YAML.

    -- description: Every dispute has at most one settled refund.
    -- severity: critical
    -- key: [dispute_id]
    SELECT ...

Unknown keys are errors, because a misspelt `severty:` that silently falls back to the
default is exactly the kind of quiet failure this tool exists to catch.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from monitor import yamlsafe
from monitor.durations import Schedule, parse_duration, parse_schedule, statement_timeout
from monitor.links import link_problem
from monitor.sources.header import SourceSpec, check_source_names
from monitor.text import shorten
from monitor.yamlsafe import YamlProblem

Severity = Literal["critical", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("critical", "warning", "info")

MAX_HEADER_BYTES = 16 * 1024  # a header is a few lines; anything bigger is not one
_COMMENT = re.compile(r"^\s*--\s?(.*)$")


class InvariantHeader(BaseModel):
    """What a file says about itself. Unset fields fall back to the config's defaults."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    description: str = Field(min_length=1)
    severity: Severity | None = None
    owner: str | None = None
    runbook: str | None = None
    schedule: str | None = None
    timeout: str | int | float | None = None
    key: list[str] = Field(default_factory=list)
    sample: int | None = Field(default=None, ge=0, le=1000)
    tags: list[str] = Field(default_factory=list)
    for_runs: int = Field(default=1, ge=1, alias="for")
    channel: str | None = None
    target: str | None = None  # the database it runs on (config `targets:`)
    max_cost: float | None = Field(default=None, gt=0)  # planner cost budget (invmon explain)
    redact: list[str] = Field(default_factory=list)  # columns masked besides config's patterns
    show: list[str] = Field(default_factory=list)  # columns let through although they match
    # Relations listed at run time (an object-store prefix, a folder): monitor/sources/.
    source: dict[str, SourceSpec] = Field(default_factory=dict)

    @field_validator("source", mode="before")
    @classmethod
    def _source_names(cls, value: Any) -> Any:
        return check_source_names(value)

    @field_validator("description")
    @classmethod
    def _description_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must say what must hold and why")
        return " ".join(value.split())

    @field_validator("runbook")
    @classmethod
    def _runbook_is_url(cls, value: str | None) -> str | None:
        problem = None if value is None else link_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("schedule")
    @classmethod
    def _schedule_parses(cls, value: str | None) -> str | None:
        if value is not None:
            parse_schedule(value)
        return value

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout_parses(cls, value: Any) -> Any:
        if value is not None:
            statement_timeout(value)
        return value

    @field_validator("key", "tags", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @property
    def timeout_delta(self) -> timedelta | None:
        return None if self.timeout is None else parse_duration(self.timeout)

    @property
    def parsed_schedule(self) -> Schedule | None:
        return None if self.schedule is None else parse_schedule(self.schedule)


DEFAULT_TARGET = "default"  # the target of the single `dsn:` form, and of a file naming none


@dataclass(frozen=True)
class SplitFile:
    """A file cut into its header text and its SQL, keeping line numbers."""

    header_lines: list[tuple[int, str]]  # (1-based line number, text after "--")
    sql: str
    sql_first_line: int


class HeaderError(Exception):
    """One or more problems with a header, each at its line."""

    def __init__(self, line: int, message: str, *more: tuple[int, str]) -> None:
        self.problems = [(line, message), *more]
        super().__init__(message)


def split_file(text: str) -> SplitFile:
    lines = text.splitlines()
    header: list[tuple[int, str]] = []
    index = 0
    while index < len(lines) and not lines[index].strip():
        index += 1
    while index < len(lines):
        match = _COMMENT.match(lines[index])
        if not match:
            break
        header.append((index + 1, match.group(1)))
        index += 1
    sql = "\n".join(lines[index:])
    return SplitFile(header, sql, index + 1)


def parse_header(split: SplitFile) -> InvariantHeader:
    """Read the header; raise HeaderError naming the line of the offending key."""
    first = split.header_lines[0][0] if split.header_lines else 1
    if not split.header_lines:
        raise HeaderError(
            1, "no header; start the file with '-- description: <what must hold and why>'"
        )
    text = "\n".join(body for _, body in split.header_lines)
    try:
        data = yamlsafe.load(text, MAX_HEADER_BYTES)
    except YamlProblem as exc:
        indented = _indented_key(split, exc.line)
        if indented is not None:
            raise HeaderError(*indented) from None
        line = split.header_lines[min(exc.line, len(split.header_lines)) - 1][0]
        raise HeaderError(line, f"header {exc.message}") from None
    if not isinstance(data, dict):
        raise HeaderError(first, "header must be '-- key: value' lines, starting with description")
    try:
        return InvariantHeader.model_validate(data)
    except ValidationError as exc:
        problems = [_describe(split, error, first) for error in exc.errors()]
        # A misspelt key also shows up as "required key missing"; the typo is the news.
        unknown = {message for _, message in problems if message.startswith("unknown")}
        if unknown:
            problems = [p for p in problems if "is required" not in p[1]]
        raise HeaderError(*problems[0], *problems[1:]) from None


# What an incident of a file that does not load still takes from it (reloading.py).
READABLE_KEYS = ("description", "severity", "owner", "runbook", "channel", "target")


def readable_header(text: str) -> dict[str, Any]:
    """What the header of a file that does not load still says: each of READABLE_KEYS whose
    value is valid on its own (a bad runbook does not hide a good severity). Empty when the
    header cannot be read at all."""
    split = split_file(text)
    try:
        data = yamlsafe.load("\n".join(body for _, body in split.header_lines), MAX_HEADER_BYTES)
    except YamlProblem:
        return {}
    if not isinstance(data, dict):
        return {}
    said: dict[str, Any] = {}
    for key in READABLE_KEYS:
        if key in data:
            try:
                alone = InvariantHeader.model_validate({"description": "-", key: data[key]})
            except ValidationError:
                continue
            said[key] = getattr(alone, key)
    return said


def _describe(split: SplitFile, error: Any, first: int) -> tuple[int, str]:
    field = str(error["loc"][0]) if error["loc"] else "header"
    line = line_of_key(split, field) or first
    if error["type"] == "extra_forbidden" and field == "source" and len(error["loc"]) == 3:
        # A misspelt key inside one source: say which source, and the keys it takes.
        name, key = str(error["loc"][1]), str(error["loc"][2])
        known = sorted(SourceSpec.model_fields)
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return line, (
            f"unknown key {shorten(key, 40)} in source {shorten(name, 40)}; {hint}"
            f"a source takes {', '.join(known)}"
        )
    if field == "source" and len(error["loc"]) > 1:
        where = ".".join(str(part) for part in error["loc"][1:])
        reason = str(error["msg"]).removeprefix("Value error, ")
        return line, f"header key 'source' at {shorten(where, 60)}: {reason}"
    if error["type"] == "extra_forbidden":
        known = sorted(_header_keys())
        close = difflib.get_close_matches(field, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        shown = shorten(field, 40)
        return line, f"unknown header key {shown}; {hint}known keys are {', '.join(known)}"
    if error["type"] == "missing":
        return line, f"header key {field!r} is required"
    reason = str(error["msg"]).removeprefix("Value error, ")
    if ", got " in reason or "(got " in reason:  # the reason quotes what it was given
        return line, f"header key {field!r}: {reason}"
    return line, f"header key {field!r}: {reason} (got {shorten(error.get('input'), 60)})"


_INDENTED_KEY = re.compile(r"(\s+)([A-Za-z_]+)\s*:(?:\s|$)")


def _indented_key(split: SplitFile, failed_at: int) -> tuple[int, str] | None:
    """A header key written indented on the line YAML failed on: YAML read it as more of
    the plain value above (`--   severity: critical`), and its own advice, to quote a
    value holding ": ", would be wrong. Only that line: an indented key elsewhere is in its
    place (a source's `timeout:`, a line of a `|` description), or YAML would have failed
    there. None when that line is no indented header key."""
    if not 0 < failed_at <= len(split.header_lines):
        return None
    line, body = split.header_lines[failed_at - 1]
    match = _INDENTED_KEY.match(body)
    if match is None or match.group(2) not in _header_keys():
        return None
    key = match.group(2)
    return line, (
        f"header key {key!r} is indented, so YAML reads it as more of the value above; "
        f"start it right after the dashes, as the others: `-- {key}: …`"
    )


def _header_keys() -> set[str]:
    return {f.alias or name for name, f in InvariantHeader.model_fields.items()}


_KEY_COMMENT = re.compile(r"^\s*--\s*([a-z_]+)\s*:(\s|$)")


def stray_header_keys(split: SplitFile) -> list[tuple[int, str]]:
    """Comments in the SQL that read as header keys (`-- severity: critical`), each at its
    line: the header ends at the first line that is not a `--` comment, so a key after a
    blank line, or after the query, was read as a plain comment and its default used."""
    known = _header_keys()
    ended = split.sql_first_line
    found = []
    for number, line in enumerate(split.sql.splitlines(), start=ended):
        match = _KEY_COMMENT.match(line)
        if match and match.group(1) in known:
            found.append(
                (
                    number,
                    f"'{match.group(1)}:' reads as a header key, but the header ended at line "
                    f"{ended} (the first line that is not a `--` comment): it is not used. "
                    "Join it to the header (no blank line between), or reword the comment",
                )
            )
    return found


def line_of_key(split: SplitFile, key: str) -> int | None:
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*:")
    for number, body in split.header_lines:
        if pattern.match(body):
            return number
    return None
