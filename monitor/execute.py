"""The one path by which an invariant's query reaches a database.

`execute` is used by the daemon's runner, `invmon check`, `invmon test` and the tests of
the shipped invariants, so a row means the same thing everywhere. On the connection it is
given it:

1. opens a transaction and makes it READ ONLY with the invariant's statement timeout, a lock
   timeout and `application_name = invmon:<name>`, all `SET LOCAL` (the monitoring role
   needs no EXECUTE on `set_config`, which deploy/readonly-role.sql revokes);
2. judges the exact text it is about to send (the invariant wrapped by query.py) against
   this database's own catalog (fence.py), and refuses it with the file's line when the
   catalog says it could change anything;
3. runs it and reads the exact count and at most `limit` rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.datetime import DateLoader, TimestampLoader, TimestamptzLoader

from monitor.fence import TRUST_NOTHING, Allowances, fence
from monitor.loader import Invariant
from monitor.pgcatalog import LiveCatalog
from monitor.problems import Problem, SqlProblem
from monitor.query import USER_SQL_LINE, sampled_query
from monitor.rows import json_safe, unique_column_names

# A run that was cancelled leaves its transaction idle at most this long past its timeout.
IDLE_MARGIN = timedelta(seconds=30)


class Refused(Exception):
    """The fence refused the query against this database; each problem names its line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


@dataclass(frozen=True)
class Evaluation:
    count: int  # every offending row, counted by the database
    columns: list[str]
    rows: list[dict[str, Any]]  # JSON-safe, in key order, at most `limit` of them

    @property
    def complete(self) -> bool:
        """Every offending row was brought back."""
        return len(self.rows) >= self.count


class _TextWhenOutOfRange:
    """Dates psycopg cannot hold in Python ('infinity', year 10000+) are kept as the text
    PostgreSQL sent, so a violation with such a row is still counted, not an error."""

    def load(self, data: Any) -> Any:
        try:
            return super().load(data)  # type: ignore[misc]
        except psycopg.DataError:
            return bytes(data).decode()


class _Date(_TextWhenOutOfRange, DateLoader):
    pass


class _Timestamp(_TextWhenOutOfRange, TimestampLoader):
    pass


class _Timestamptz(_TextWhenOutOfRange, TimestamptzLoader):
    pass


def register_loaders(conn: psycopg.Connection[Any]) -> None:
    """How values are read back; every connection that runs invariants gets these."""
    conn.adapters.register_loader("date", _Date)
    conn.adapters.register_loader("timestamp", _Timestamp)
    conn.adapters.register_loader("timestamptz", _Timestamptz)


def _ms(delta: timedelta) -> str:
    return f"{max(1, int(delta.total_seconds() * 1000))}ms"


def begin_read_only(
    conn: psycopg.Connection[Any], invariant: Invariant, lock_timeout: timedelta
) -> None:
    """Inside a transaction just begun: READ ONLY, and the invariant's limits, in one trip."""
    # standard_conforming_strings on: the server must read backslashes in '…' as the fence's
    # parser did (off, 'x\\'' would end the string elsewhere and hide a call after it).
    if conn.info.encoding != "utf-8":
        # The text is sent as UTF-8; in another client encoding the server would read other
        # characters than the fence did (a multi-byte SJIS character can swallow a quote).
        raise Refused(
            [
                Problem(
                    invariant.path,
                    invariant.sql_first_line,
                    f"the connection's client_encoding is {conn.info.encoding}, not UTF8; "
                    "the query is not sent",
                )
            ]
        )
    settings = sql.SQL(
        "SET TRANSACTION READ ONLY; SET LOCAL standard_conforming_strings = on; "
        "SET LOCAL statement_timeout = {}; "
        "SET LOCAL lock_timeout = {}; SET LOCAL idle_in_transaction_session_timeout = {}; "
        "SET LOCAL application_name = {}"
    ).format(
        sql.Literal(_ms(invariant.timeout)),
        sql.Literal(_ms(lock_timeout)),
        sql.Literal(_ms(invariant.timeout + IDLE_MARGIN)),
        sql.Literal(f"invmon:{invariant.name}"[:63]),
    )
    conn.execute(settings.as_bytes(conn))


class LiveFence:
    """The fence against the database a connection is on, remembering each verdict for a
    while: a catalog changes far less often than an invariant runs."""

    def __init__(
        self,
        allow: Allowances = TRUST_NOTHING,
        remember: timedelta = timedelta(minutes=5),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.allow = allow
        self._remember = remember.total_seconds()
        self._clock = clock
        self._verdicts: dict[str, tuple[float, list[SqlProblem]]] = {}
        self._lock = threading.Lock()

    def problems(self, conn: psycopg.Connection[Any], text: str) -> list[SqlProblem]:
        now = self._clock()
        with self._lock:
            known = self._verdicts.get(text)
        if known is not None and now - known[0] < self._remember:
            return known[1]
        verdict = fence(text, LiveCatalog(conn), self.allow)
        with self._lock:
            self._verdicts[text] = (now, verdict)
        return verdict

    def refuse_unless_allowed(
        self, conn: psycopg.Connection[Any], text: str, invariant: Invariant, user_line: int = 1
    ) -> None:
        """Raise Refused when the fence says no; `user_line` is where the invariant's own
        SQL starts in `text`, so each problem names its line in the file."""
        errors = [p for p in self.problems(conn, text) if p.level == "error"]
        if errors:
            raise Refused(
                [
                    Problem(
                        invariant.path,
                        max(p.line - user_line, 0) + invariant.sql_first_line,
                        p.message,
                    )
                    for p in errors
                ]
            )


def send_one_statement(cur: psycopg.Cursor[Any], text: str) -> None:
    """Send `text` as exactly one statement. Without parameters psycopg would use the simple
    query protocol, where the server runs every statement a text holds; in a pipeline it
    uses the extended protocol, where a second statement is an error. So even a text the
    fence's parser read differently from the server's cannot smuggle a second statement."""
    with cur.connection.pipeline():
        cur.execute(text.encode(), prepare=False)


# For every connection that runs invariants: the encoding the fence assumes.
CLIENT_ENCODING = "utf8"


def execute(
    conn: psycopg.Connection[Any],
    invariant: Invariant,
    *,
    limit: int,
    lock_timeout: timedelta,
    live_fence: LiveFence,
) -> Evaluation:
    """Evaluate one invariant on `conn` (loaders registered, no transaction open), bringing
    back at most `limit` rows."""
    query = sampled_query(invariant.sql, invariant.key, limit)
    with conn.transaction(), conn.cursor() as cur:
        begin_read_only(conn, invariant, lock_timeout)
        live_fence.refuse_unless_allowed(conn, query, invariant, USER_SQL_LINE)
        send_one_statement(cur, query)
        fetched = cur.fetchall()  # at most `limit` rows: the LIMIT is in the query
        description = cur.description or []
    names = unique_column_names([c.name for c in description[:-1]])
    rows = [
        {name: json_safe(value) for name, value in zip(names, raw[:-1], strict=True)}
        for raw in fetched
    ]
    return Evaluation(int(fetched[0][-1]) if fetched else 0, names, rows)
