"""The front page's filters and search, and an invariant page's chart window, read from a
hostile query string. Pure.

Bounded before anything else looks at it: the whole query string, the number of fields,
each value's length. A value that is not one of a filter's choices (a status or severity
nobody has) selects nothing rather than failing, so an old bookmark still opens; a window
the page does not offer falls back to the default one, and the page says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol
from urllib.parse import parse_qs

if TYPE_CHECKING:
    from collections.abc import Sequence

MAX_QUERY = 2048  # bytes of the query string
MAX_FIELDS = 20
MAX_VALUE = 200  # characters of one filter value or the search text

STATUSES = ("violated", "error", "stale", "pending", "ok")
SEVERITIES = ("critical", "warning", "info")
# The chart windows of an invariant's page, shortest first (Window() is the first).
WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}


class QueryTooLong(ValueError):
    """The query string is longer than any the page makes."""


class Filterable(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def tags(self) -> Sequence[str]: ...
    @property
    def status(self) -> _HasKey: ...


class _HasKey(Protocol):
    @property
    def key(self) -> str: ...


@dataclass(frozen=True)
class Filters:
    status: str | None = None
    severity: str | None = None
    owner: str | None = None
    tag: str | None = None
    target: str | None = None
    q: str = ""

    @property
    def active(self) -> bool:
        return self != Filters()

    def matches(self, row: Filterable) -> bool:
        if self.status and row.status.key != self.status:
            return False
        if self.severity and row.severity != self.severity:
            return False
        if self.owner and row.owner != self.owner:
            return False
        if self.tag and self.tag not in row.tags:
            return False
        if self.target and row.target != self.target:
            return False
        if self.q:
            haystack = " ".join(
                (row.name, row.description, row.owner, row.target, *row.tags)
            ).casefold()
            return all(word in haystack for word in self.q.casefold().split())
        return True


@dataclass(frozen=True)
class Window:
    """How far back an invariant's chart goes."""

    name: str = "24h"  # one of WINDOWS
    unknown: bool = False  # the query asked for a window not offered: this is the default

    @property
    def span(self) -> timedelta:
        return WINDOWS[self.name]


def _fields(query: str) -> dict[str, list[str]]:
    if len(query.encode()) > MAX_QUERY:
        raise QueryTooLong(f"the query string is longer than {MAX_QUERY} bytes")
    try:
        return parse_qs(query, keep_blank_values=False, max_num_fields=MAX_FIELDS)
    except ValueError:
        raise QueryTooLong(f"the query string has more than {MAX_FIELDS} fields") from None


def parse_window(query: str) -> Window:
    """The chart window from a raw QUERY_STRING (`window=7d`); QueryTooLong past MAX_QUERY."""
    asked = _fields(query).get("window")
    if not asked:
        return Window()
    if asked[0] in WINDOWS:
        return Window(asked[0])
    return Window(unknown=True)


def parse_filters(query: str) -> Filters:
    """Filters from a raw QUERY_STRING; QueryTooLong past MAX_QUERY."""
    fields = _fields(query)

    def one(name: str) -> str | None:
        values = fields.get(name)
        if not values:
            return None
        # Control characters are never part of a name, owner, tag or search.
        value = "".join(ch for ch in values[0] if ch.isprintable()).strip()
        return value[:MAX_VALUE] or None

    status = one("status")
    severity = one("severity")
    return Filters(
        status=status if status in STATUSES else None,
        severity=severity if severity in SEVERITIES else None,
        owner=one("owner"),
        tag=one("tag"),
        target=one("target"),
        q=one("q") or "",
    )
