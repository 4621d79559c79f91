"""The one clock and the one timestamp format.

Every decision that depends on time takes `now` as a `datetime` (UTC, aware); only the
shell reads the clock. Timestamps cross module boundaries as `datetime` and become text in
one place, `stamp`, the format the state store writes (ISO 8601, microseconds, `Z`): it
sorts as text, so SQLite and PostgreSQL compare stored times the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_stamp(text: str) -> datetime:
    return datetime.fromisoformat(text)


def maybe_stamp(moment: datetime | None) -> str | None:
    return None if moment is None else stamp(moment)


def maybe_parse(text: str | None) -> datetime | None:
    return None if text is None else parse_stamp(text)


def shown(moment: datetime, seconds: bool = False) -> str:
    """A time as people read it in messages and tables: `2026-11-30 12:07 UTC`."""
    return moment.astimezone(UTC).strftime(
        "%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC"
    )
