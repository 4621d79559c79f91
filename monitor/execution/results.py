"""The outcome of evaluating one invariant once."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from monitor.invariants.header import DEFAULT_TARGET

Status = Literal["ok", "violated", "error", "stale"]


@dataclass(frozen=True)
class RunResult:
    invariant: str
    status: Status
    count: int | None  # None when the invariant could not be evaluated: never a fake zero
    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)  # JSON-safe sample rows
    error: str | None = None
    started_at: datetime | None = None
    duration_ms: float = 0.0
    attempts: int = 1
    # Offending keys (see rows.offending_key) -> the whole row for sample rows, else None;
    # for up to `track_keys` rows. Filled only when the runner tracks keys (the daemon).
    keys: dict[str, Any] = field(default_factory=dict)
    keys_complete: bool = True  # False when more rows offend than were brought back
    # What its keys are made of (rows.keyed_by): the `key:` columns, or the whole row's.
    keyed_by: str | None = None
    cut_values: int = 0  # values in `rows` the database cut to `cell_bytes`
    cell_bytes: int = 0
    rows_withheld: int = 0  # sample rows left out to keep the run within its byte budget
    replica_lag: float | None = None
    target: str = DEFAULT_TARGET  # the monitored database it ran on
    # Not run because its target did not answer: the target's one incident says so, so this
    # run counts towards no invariant's own "cannot evaluate".
    unreachable: bool = False
    # Milliseconds spent listing the invariant's sources (monitor/sources/) before the
    # query; None without sources. Part of duration_ms, reported apart.
    listing_ms: float | None = None
    # The longest one attempt held its database connection (ms): the database's own time,
    # which quarantine judges; not the replica gate's, a wait for a connection or the
    # store's. None when no attempt got a connection.
    held_ms: float | None = None

    @property
    def truncated(self) -> bool:
        return self.count is not None and self.count > len(self.rows)

    @classmethod
    def failed(cls, invariant: str, error: str, **kwargs: Any) -> RunResult:
        return cls(invariant=invariant, status="error", count=None, error=error, **kwargs)

    @classmethod
    def counted(
        cls, invariant: str, count: int, columns: list[str], rows: list[dict[str, Any]], **kw: Any
    ) -> RunResult:
        return cls(
            invariant=invariant,
            status="violated" if count > 0 else "ok",
            count=count,
            columns=columns,
            rows=rows,
            **kw,
        )

    @classmethod
    def of_rows(
        cls, invariant: str, rows: list[dict[str, Any]], started_at: datetime, key: str
    ) -> RunResult:
        """Rows invmon read about itself as a run, keyed by one column so rows that come and
        go are said in Slack like any invariant's."""
        keys = {str(row[key]): row for row in rows}
        columns = list(rows[0]) if rows else []
        return cls.counted(invariant, len(rows), columns, rows, started_at=started_at, keys=keys)


def exit_code(results: list[RunResult], load_failed: bool = False) -> int:
    """0 all hold, 1 some violated and none errored, 2 something could not be evaluated."""
    if load_failed or any(r.status in ("error", "stale") for r in results):
        return 2
    if any(r.status == "violated" for r in results):
        return 1
    return 0
