"""The text and parameters invmon adds so that a query can read its sources. Pure.

Each source becomes one CTE over typed arrays passed as parameters, prepended to the text
invmon sends (which wraps the invariant's SQL verbatim, see query.py):

    WITH "receipt_objects"("key", "size", "last_modified") AS (SELECT * FROM
    unnest($1::text[], $2::bigint[], $3::timestamptz[]))
    SELECT … FROM (<the invariant, as written>) AS q …

(the WITH list is one line: the invariant's own lines move down by exactly one). Nothing
is written: no temporary table (none may be made in the READ ONLY transaction, nor on a hot
standby), and no COPY. The values travel as parameters, never as SQL text, so an object key
is data whatever it holds. The invariant may start with its own WITH: it sits in a subquery
of ours, where our CTE is visible. A CTE is resolved before any table, so the source wins
over a table of that name.

A listing may hold millions of objects, so it is never held as Python objects: a lister
appends each object to `Objects`, which writes it at once into one buffer per column in
PostgreSQL's binary array format (a length and the bytes of each value: about 60 bytes an
object for a 30-byte key, against some 400 as a list of rows, their parameter lists and
the text psycopg made of those). Each buffer is sent as it is (`ArrayParam`, the shell's
dumper passes it through), so what crosses the wire is never built a second time.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from monitor.fence.sqltree import quote_identifier
from monitor.sources.header import COLUMN_TYPES, SourceSpec


@dataclass(frozen=True, slots=True)
class ObjectRow:
    """One listed object, as `Objects` gives it back (and as fixtures and tests write)."""

    key: str
    size: int | None
    last_modified: datetime | None
    etag: str | None = None

    def value(self, column: str) -> Any:
        return getattr(self, column)


# PostgreSQL's type OIDs: each column's element type and its array type.
ELEMENT_OIDS = {"text": 25, "bigint": 20, "timestamptz": 1184}
ARRAY_OIDS = {"text": 1009, "bigint": 1016, "timestamptz": 1185}
# The binary array header: dimensions, has-nulls flag, element type, then (length, lower
# bound) of its one dimension. An empty array has no dimension.
_HEADER = struct.Struct("!iiiii")
_EMPTY = struct.Struct("!iii")
_LENGTH = struct.Struct("!i")
_INT8 = struct.Struct("!iq")  # the value's length (8) and the value
_NULL = _LENGTH.pack(-1)
_POSTGRES_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # timestamptz: microseconds since
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class ArrayParam:
    """One column of a listing as a parameter: PostgreSQL's binary form of a one-dimension
    array of `type` (text, bigint, timestamptz), sent as it is."""

    type: str
    data: bytes | bytearray

    @property
    def oid(self) -> int:
        return ARRAY_OIDS[self.type]

    @classmethod
    def empty(cls, type_: str) -> ArrayParam:
        return cls(type_, _EMPTY.pack(0, 0, ELEMENT_OIDS[type_]))

    def values(self) -> list[Any]:
        """The values it holds, read back (for tests and fixtures; a run never needs it)."""
        return list(_elements(self))


def _elements(param: ArrayParam) -> Iterator[Any]:
    data = memoryview(param.data)
    dimensions = _EMPTY.unpack_from(data)[0]
    if dimensions == 0:
        return
    count = _HEADER.unpack_from(data)[3]
    at = _HEADER.size
    for _ in range(count):
        (size,) = _LENGTH.unpack_from(data, at)
        at += _LENGTH.size
        if size < 0:
            yield None
            continue
        value = bytes(data[at : at + size])
        at += size
        if param.type == "text":
            yield value.decode("utf-8")
        else:
            (number,) = struct.unpack("!q", value)
            yield number if param.type == "bigint" else _POSTGRES_EPOCH + number * _MICROSECOND


class Objects:
    """A listing's objects, packed as they arrive: the columns a source asked for, each one
    growing buffer in PostgreSQL's binary array format. Nothing else of an object is kept."""

    __slots__ = ("_buffers", "_nulls", "columns", "count")

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = tuple(columns)
        # Room for the header, written when the arrays are taken (the count is known then).
        self._buffers = [bytearray(_HEADER.size) for _ in self.columns]
        self._nulls = [False for _ in self.columns]
        self.count = 0

    def add(
        self, key: str, size: int | None, last_modified: datetime | None, etag: str | None
    ) -> None:
        """One object (a key the lister checked is UTF-8 without NUL; a time with no zone is
        UTC, as S3 says it)."""
        for i, column in enumerate(self.columns):
            buffer = self._buffers[i]
            if column == "key":
                encoded = key.encode("utf-8")
                buffer += _LENGTH.pack(len(encoded))
                buffer += encoded
            elif column == "size":
                if size is None:
                    buffer += _NULL
                    self._nulls[i] = True
                else:
                    buffer += _INT8.pack(8, size)
            elif column == "last_modified":
                if last_modified is None:
                    buffer += _NULL
                    self._nulls[i] = True
                else:
                    buffer += _INT8.pack(8, _microseconds(last_modified))
            elif etag is None:
                buffer += _NULL
                self._nulls[i] = True
            else:
                encoded = etag.encode("utf-8")
                buffer += _LENGTH.pack(len(encoded))
                buffer += encoded
        self.count += 1

    def __len__(self) -> int:
        return self.count

    def arrays(self) -> list[ArrayParam]:
        """One parameter per column, in order: the buffers themselves, not copies."""
        params = []
        for i, column in enumerate(self.columns):
            type_ = COLUMN_TYPES[column]
            if not self.count:
                params.append(ArrayParam.empty(type_))
                continue
            buffer = self._buffers[i]
            buffer[: _HEADER.size] = _HEADER.pack(
                1, int(self._nulls[i]), ELEMENT_OIDS[type_], self.count, 1
            )
            params.append(ArrayParam(type_, buffer))
        return params

    def __iter__(self) -> Iterator[ObjectRow]:
        """The objects read back, in listing order (tests; `explain` only counts them)."""
        found = {c: _elements(p) for c, p in zip(self.columns, self.arrays(), strict=True)}
        for _ in range(self.count):
            values = {c: next(it) for c, it in found.items()}
            yield ObjectRow(
                values.get("key", ""),
                values.get("size"),
                values.get("last_modified"),
                values.get("etag"),
            )

    @classmethod
    def of(cls, columns: Sequence[str], rows: Iterable[ObjectRow]) -> Objects:
        packed = cls(columns)
        for row in rows:
            packed.add(row.key, row.size, row.last_modified, row.etag)
        return packed


def _microseconds(moment: datetime) -> int:
    """Since PostgreSQL's epoch, exact in every year datetime holds (integer arithmetic)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _POSTGRES_EPOCH) // _MICROSECOND


@dataclass(frozen=True)
class Bound:
    """The text to put before the statement invmon sends, its parameters in order, and
    how many lines it adds (the fence's problems map back to the file's lines)."""

    prefix: str
    params: list[ArrayParam]
    lines: int


NOTHING_BOUND = Bound("", [], 0)


def bind(
    sources: Mapping[str, SourceSpec], rows: Mapping[str, Objects | Iterable[ObjectRow]]
) -> Bound:
    """The CTEs for `sources` (in header order) holding `rows` of each (packed as a lister
    packs them, or rows to pack: fixtures, tests)."""
    if not sources:
        return NOTHING_BOUND
    ctes: list[str] = []
    params: list[ArrayParam] = []
    for name, spec in sources.items():
        given = rows[name]
        packed = given if isinstance(given, Objects) else Objects.of(spec.columns, given)
        if packed.columns != spec.columns:
            raise ValueError(f"source {name}: listed {packed.columns}, bound {spec.columns}")
        arrays = []
        for param in packed.arrays():
            params.append(param)
            # The parameter says its type too; the cast keeps the text readable alone.
            arrays.append(f"${len(params)}::{param.type}[]")
        names = ", ".join(quote_identifier(c) for c in spec.columns)
        ctes.append(
            f"{quote_identifier(name)}({names}) AS (SELECT * FROM unnest({', '.join(arrays)}))"
        )
    return Bound(f"WITH {', '.join(ctes)}\n", params, 1)


def emptied(bound: Bound) -> list[ArrayParam]:
    """The same parameters with no rows: for a statement that needs only the result's
    columns (the describing query), so a listing crosses the wire once."""
    return [ArrayParam.empty(param.type) for param in bound.params]


def bound_text(bound: Bound, statement: str) -> str:
    """`statement` (one of query.py's, starting with SELECT) reading the sources."""
    return bound.prefix + statement


def standalone(bound: Bound, sql: str) -> tuple[str, list[ArrayParam], int]:
    """The invariant's SQL on its own (not wrapped in invmon's counting query) reading
    `bound`'s listings, for what judges or plans a query without running it (the daemon's
    vetting, `invmon explain`): the text, its parameters and the line of the text where the
    invariant's SQL starts. Without sources, the SQL as it is."""
    if not bound.prefix:
        return sql, [], 1
    return bound_text(bound, f"SELECT * FROM (\n{sql}\n) AS q"), bound.params, 2 + bound.lines


def unlisted(sources: Mapping[str, SourceSpec], sql: str) -> tuple[str, list[ArrayParam], int]:
    """`standalone` with every source an empty listing: the text's shape, for the fence."""
    return standalone(bind(sources, {name: [] for name in sources}), sql)
