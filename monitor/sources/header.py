"""The `source:` header key: named relations an invariant reads from outside the database.

    -- source: {receipt_objects: {s3: "s3://receipts-prod/receipts/",
    --           columns: [key, size, last_modified], min_age: 10m, max_objects: 100000}}

Each entry is one relation the query uses like a table. Unknown keys are refused like any
other header key, because a misspelt `max_objets:` must never fall back to the default.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Literal
from urllib.parse import urlsplit

from pglast.keywords import RESERVED_KEYWORDS
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from monitor.durations import format_duration, parse_duration
from monitor.text import shorten

SourceColumn = Literal["key", "size", "last_modified", "etag"]
# The SQL type each column is bound as; key and etag are text, never parsed.
COLUMN_TYPES: dict[str, str] = {
    "key": "text",
    "size": "bigint",
    "last_modified": "timestamptz",
    "etag": "text",
}
DEFAULT_COLUMNS: tuple[SourceColumn, ...] = ("key", "size", "last_modified")
MAX_SOURCES = 8  # a query joining more listings than this is not one invariant
# Every listed object becomes a row sent as a parameter: bounded like a result.
MAX_OBJECTS_CEILING = 5_000_000
DEFAULT_MAX_OBJECTS = 100_000
MAX_LISTING_TIMEOUT = timedelta(hours=1)
# Without `timeout:`, a listing may take as long as listing `max_objects` at this rate, a
# page of 1,000 a second: slower than S3 or a local store answer (100,000 objects from
# moto's server on the same machine: 14 to 50 s, the slower on a busy one), so the default
# bounds a store that hangs without failing one that is merely slow. At least
# MIN_DEFAULT_TIMEOUT, at most MAX_LISTING_TIMEOUT.
LISTING_RATE = 1000  # objects per second
MIN_DEFAULT_TIMEOUT = timedelta(seconds=30)
MAX_MIN_AGE = timedelta(days=30)  # a grace longer than this would hide what it should judge
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_S3_URL = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])(?:/(?P<prefix>.*))?$")


class SourceSpec(BaseModel):
    """One listed relation: where from, which columns, and its bounds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    s3: str | None = None  # s3://bucket/prefix/ (any S3-compatible store with `endpoint`)
    folder: str | None = None  # a local folder, listed recursively
    columns: tuple[SourceColumn, ...] = DEFAULT_COLUMNS
    min_age: str | int | None = None  # objects newer than this are ignored (grace)
    # strict: `max_objects: true` was read as 1.
    max_objects: int = Field(default=DEFAULT_MAX_OBJECTS, ge=1, le=MAX_OBJECTS_CEILING, strict=True)
    # The whole listing, every page included; None: max_objects at LISTING_RATE.
    timeout: str | int | None = None
    endpoint: str | None = None  # http(s) URL of an S3-compatible service
    region: str | None = None
    page_size: int = Field(default=1000, ge=1, le=1000)  # S3 returns at most 1000 a page

    @field_validator("s3")
    @classmethod
    def _s3_url(cls, value: str | None) -> str | None:
        if value is not None and not _S3_URL.match(value):
            raise ValueError(f"must be s3://bucket/prefix, got {shorten(value, 80)}")
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"must be an http(s) URL, got {shorten(value, 80)}")
        if parts.username or parts.password:
            # A credential in the file would be printed wherever the endpoint is.
            raise ValueError("must not carry credentials; they come from the standard chain")
        return value

    @field_validator("columns", mode="before")
    @classmethod
    def _columns_listed(cls, value: Any) -> Any:
        if isinstance(value, list) and len(set(map(str, value))) != len(value):
            raise ValueError("a column is listed twice")
        if isinstance(value, list) and not value:
            raise ValueError("name at least one of key, size, last_modified, etag")
        return tuple(value) if isinstance(value, list) else value

    @field_validator("min_age", "timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any, info: ValidationInfo) -> Any:
        if value in (0, "0", "0s"):
            if info.field_name == "timeout":
                raise ValueError("a listing takes more than 0s")
            return None  # no grace
        if value is not None:
            delta = parse_duration(value)
            # Each its own ceiling: a timeout of 31d was told "longer than 30 days", when
            # a listing may take 1h at most.
            if info.field_name == "timeout" and delta > MAX_LISTING_TIMEOUT:
                raise ValueError(f"{shorten(value, 20)} is longer than a listing may take (1h)")
            if delta > MAX_MIN_AGE:
                raise ValueError(f"{shorten(value, 20)} is longer than 30 days")
        return value

    @model_validator(mode="after")
    def _one_place(self) -> SourceSpec:
        if (self.s3 is None) == (self.folder is None):
            raise ValueError("give exactly one of `s3: s3://bucket/prefix` or `folder: /path`")
        if self.folder is not None and (self.endpoint or self.region):
            raise ValueError("`endpoint` and `region` are for `s3:` sources")
        if not timedelta(0) < self.timeout_delta <= MAX_LISTING_TIMEOUT:
            raise ValueError("timeout: a listing takes more than 0s and at most 1h")
        return self

    @property
    def default_timeout(self) -> timedelta:
        """What the listing may take without `timeout:`: max_objects at LISTING_RATE."""
        seconds = -(-self.max_objects // LISTING_RATE)
        return min(max(timedelta(seconds=seconds), MIN_DEFAULT_TIMEOUT), MAX_LISTING_TIMEOUT)

    @property
    def timeout_delta(self) -> timedelta:
        return self.default_timeout if self.timeout is None else parse_duration(self.timeout)

    @property
    def timeout_said(self) -> str:
        """The timeout as a message says it: as written, or the default and where it came
        from."""
        if self.timeout is not None:
            return str(self.timeout)
        return (
            f"{format_duration(self.timeout_delta)}, the default for max_objects "
            f"{self.max_objects:,} at {LISTING_RATE:,} objects a second"
        )

    @property
    def min_age_delta(self) -> timedelta:
        return timedelta(0) if self.min_age is None else parse_duration(self.min_age)

    @property
    def bucket_and_prefix(self) -> tuple[str, str]:
        match = _S3_URL.match(self.s3 or "")
        assert match is not None  # validated above
        return match["bucket"], match["prefix"] or ""

    @property
    def where(self) -> str:
        """Where it lists, as said in messages (never a credential: none is in the header)."""
        place = self.s3 if self.s3 is not None else f"folder {self.folder}"
        return f"{place} at {self.endpoint}" if self.endpoint else str(place)


def check_source_names(value: Any) -> Any:
    """The `source:` mapping's keys are relation names the query uses unquoted."""
    if not isinstance(value, dict):
        raise ValueError(
            "maps a relation name to where it is listed from, e.g. "
            "{receipt_objects: {s3: 's3://bucket/prefix/'}}"
        )
    if len(value) > MAX_SOURCES:
        raise ValueError(f"at most {MAX_SOURCES} sources")
    for name in value:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(
                f"{shorten(name, 40)} is not a lower-case SQL name (letters, digits, _)"
            )
        if name in RESERVED_KEYWORDS:
            # The CTE would quote it, but the query could only name it quoted: FROM order
            # is a syntax error.
            raise ValueError(f"{name} is a reserved word in PostgreSQL; choose another name")
    return value
