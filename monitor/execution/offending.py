"""What one evaluation brought back, within its bounds. Pure: rows in, an Evaluation out.

The database already cut every long value and sent only keys past the sample (query.py);
here each value is loaded as its type's loader would (or shown as cut), personal data is
masked (redaction.py), and the rows are kept within byte budgets, so a run holds a bounded
amount whatever the invariant returns:

- `sample_bytes`: whole rows kept per run (shown in alerts, stored, attached as CSV); rows
  of the sample past it are withheld, and the output says how many;
- `keys_bytes`: offending keys tracked per run (new and resolved rows of an incident); past
  it the run's keys are incomplete, so no key is claimed gone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.execution.query import Column
from monitor.execution.redaction import NO_REDACTION, CutValue, Masker
from monitor.execution.rows import JsonValue, json_safe, offending_key

MIN_CELL = 64  # never cut shorter: the text of any fixed-size type fits


@dataclass(frozen=True)
class RowLimits:
    """Bounds on what one run brings back and keeps (config `limits:`)."""

    cell_bytes: int = 4096  # a longer value is cut on the database's side
    row_bytes: int = 64 << 10  # with many long columns, each is cut shorter to fit
    sample_bytes: int = 1 << 20  # whole rows kept per run
    keys_bytes: int = 4 << 20  # offending keys tracked per run

    def cell(self, columns: int) -> int:
        """The cut for each value of a result with this many columns."""
        return max(MIN_CELL, min(self.cell_bytes, self.row_bytes // max(columns, 1)))


DEFAULT_ROW_LIMITS = RowLimits()


@dataclass(frozen=True)
class Evaluation:
    count: int  # every offending row, counted by the database
    columns: list[str]
    rows: list[dict[str, JsonValue]]  # whole rows, JSON-safe, in key order
    # offending key -> its whole row when it is in `rows`, else None (key columns only)
    keys: dict[str, dict[str, JsonValue] | None] = field(default_factory=dict)
    keys_complete: bool = True  # every offending row's key is in `keys`
    cut_values: int = 0  # values in `rows` cut to `cell_bytes`
    cell_bytes: int = 0  # where values were cut
    rows_withheld: int = 0  # rows of the sample left out to keep within sample_bytes


_BYTEA = 17


def cut_value(oid: int, line: str, cell: int) -> CutValue:
    """A value the database cut: the start of it, and what it was. The size and md5 are of
    the value's text form, as the server would send it. Shown (and masked) by the Masker,
    which sees the start as the database sent it, not as a text already cut. The start is
    at most `cell` bytes: the server's left() counts characters, and 4,096 emoji are 16 KiB
    (a value shown whole under a label saying it was cut, and four times the budget)."""
    size, digest, prefix = line.split(" ", 2)  # the prefix may itself hold spaces
    prefix = prefix.encode("utf-8")[:cell].decode("utf-8", errors="ignore")
    if oid == _BYTEA and prefix.startswith("\\x"):
        # bytea is shown as base64 everywhere (rows.json_safe); its text form is \x + hex
        hexdigits = prefix[2:]
        blob = bytes.fromhex(hexdigits[: len(hexdigits) // 2 * 2])
        return CutValue(int(size), digest, "", blob)
    return CutValue(int(size), digest, prefix)


def _loaded(value: Any) -> Any:
    """A loaded value JSON-safe, except bytes: the Masker reads what a bytea holds before it
    becomes base64 (redaction.plain)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, list | tuple):
        return [_loaded(v) for v in value]
    return json_safe(value)


Load = Callable[[bytes], Any]  # a column type's text loader (the shell picks it by type)


class Gathering:
    """Takes the rows of bounded_query one at a time; `result()` is the Evaluation."""

    def __init__(
        self,
        columns: Sequence[Column],
        loads: Sequence[Load],
        key: Sequence[int],
        *,
        full: int,
        cell: int,
        limits: RowLimits,
        masker: Masker | None = None,
    ) -> None:
        self._columns = list(columns)
        self._masker = masker or NO_REDACTION.masker()
        self._loads = list(loads)
        self._names = [c.name for c in columns]
        self._key = list(key)
        self._key_names = [self._names[i] for i in key]
        self._full = full
        self._cell = cell
        self._limits = limits
        self._count = 0
        self._rows: list[dict[str, JsonValue]] = []
        self._keys: dict[str, dict[str, JsonValue] | None] = {}
        self._tracked = 0
        self._row_bytes = 0
        self._key_bytes = 0
        self._cut = 0
        self._withheld = 0

    def _value(self, position: int, cell: str | None) -> tuple[Any, bool]:
        """(the value for the Masker, whether the database cut it): JSON-safe, except bytes
        and a CutValue, which the Masker makes JSON-safe."""
        if cell is None:
            return None, False
        if cell.startswith("c"):
            return cut_value(self._columns[position].oid, cell[1:], self._cell), True
        return _loaded(self._loads[position](cell[1:].encode())), False

    def add(self, raw: Sequence[Any]) -> None:
        cells: list[str | None] = list(raw[0] or [])
        self._count = int(raw[1])
        whole = int(raw[2]) <= self._full
        kept: dict[str, JsonValue] | None = None
        if whole:
            row: dict[str, Any] = {}
            cut_here = 0
            for position, (name, cell) in enumerate(zip(self._names, cells, strict=True)):
                row[name], was_cut = self._value(position, cell)
                cut_here += was_cut
            row = self._masker.row(row)
            size = len(json.dumps(row, ensure_ascii=False))
            if self._row_bytes + size <= self._limits.sample_bytes:
                kept, self._row_bytes = row, self._row_bytes + size
                self._rows.append(row)
                self._cut += cut_here
            else:
                self._withheld += 1
        if self._key_names:
            key_row = self._masker.row(
                {self._names[i]: self._value(i, cells[i])[0] for i in self._key}
            )
            identity = offending_key(key_row, self._key_names)
        elif kept is not None:
            identity = offending_key(kept, ())  # without a key the row is its own identity
        else:
            return
        if self._key_bytes + len(identity) > self._limits.keys_bytes:
            return
        self._key_bytes += len(identity)
        self._keys[identity] = kept
        self._tracked += 1

    def result(self) -> Evaluation:
        return Evaluation(
            count=self._count,
            columns=self._names,
            rows=self._rows,
            keys=self._keys,
            keys_complete=self._tracked >= self._count,
            cut_values=self._cut,
            cell_bytes=self._cell,
            rows_withheld=self._withheld,
        )
