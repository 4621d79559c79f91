"""`invmon test`: run each invariant's fixture cases in a throwaway database.

One scratch database per run (on INVMON_TEST_DSN's server, else a private pgserver) with the
schema applied once. Each case inserts its rows, runs the invariant in a READ ONLY
transaction with its timeout (as the daemon does), then every table is truncated, so cases
are independent and a query that would fail on the replica fails here too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from monitor.authoring.fillers import Needed, NoFiller, filler
from monitor.authoring.fixtures import (
    Case,
    CaseResult,
    Fixture,
    SqlExpression,
    compare,
    fixture_path,
    load_fixture,
    not_unique,
)
from monitor.authoring.pgtemp import load_schema_dump, scratch_database, temporary_server
from monitor.execution.execute import (
    CLIENT_ENCODING,
    LiveFence,
    Refused,
    Unrunnable,
    execute,
    register_loaders,
)
from monitor.execution.offending import RowLimits
from monitor.execution.rows import offending_key
from monitor.execution.runner import describe_error
from monitor.fence.allowances import TRUST_NOTHING, Allowances
from monitor.invariants.loader import Invariant
from monitor.sources.binding import NOTHING_BOUND, Bound, ObjectRow, bind
from monitor.sources.listing import settled
from monitor.text import cut

KEY_LIMIT = 10_000  # rows a case may produce; fixtures are small by nature
# Every row of a case comes back whole: a case's rows are bounded by its file's size.
FIXTURE_LIMITS = RowLimits(sample_bytes=256 << 20, keys_bytes=256 << 20)
LOCK_TIMEOUT = timedelta(seconds=5)


@dataclass
class InvariantReport:
    invariant: Invariant
    fixture: Fixture | None
    results: list[CaseResult] = field(default_factory=list)

    @property
    def untested(self) -> bool:
        """No case in which it fires: a check nobody has seen fail."""
        return self.fixture is None or not any(r.case.fires for r in self.results)

    @property
    def failed(self) -> bool:
        return any(not r.passed for r in self.results) or bool(
            self.fixture and self.fixture.problems
        )


@contextlib.contextmanager
def test_server(admin_dsn: str | None) -> Iterator[str]:
    dsn = admin_dsn or os.environ.get("INVMON_TEST_DSN")
    if dsn:
        yield dsn
        return
    with temporary_server() as started:
        yield started


_NEEDED = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), bt.typcategory, format_type(bt.oid, NULL),
       (SELECT e.enumlabel FROM pg_enum e WHERE e.enumtypid = bt.oid
        ORDER BY e.enumsortorder LIMIT 1),
       (SELECT k.confrelid::regclass::text FROM pg_constraint k
        WHERE k.conrelid = c.oid AND k.contype = 'f' AND a.attnum = ANY (k.conkey) LIMIT 1)
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
WHERE c.oid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped AND a.attnotnull
  AND NOT a.atthasdef AND a.attidentity = '' AND a.attgenerated = ''
ORDER BY a.attnum
"""


class Tables:
    """What the scratch database says each table needs, asked once per table."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._needed: dict[str, list[Needed]] = {}
        self._rows: dict[str, int] = {}

    def needed(self, table: str) -> list[Needed]:
        if table not in self._needed:
            name = sql.Identifier(*table.split(".")).as_string(self._conn)
            self._needed[table] = [
                Needed(*found) for found in self._conn.execute(_NEEDED, (name,)).fetchall()
            ]
        return self._needed[table]

    def filled(self, table: str, row: dict[str, Any]) -> dict[str, Any]:
        """The row with a filler for each required column it does not name."""
        n = self._rows[table] = self._rows.get(table, 0) + 1
        missing = [need for need in self.needed(table) if need.column not in row]
        return {**{need.column: filler(need, n) for need in missing}, **row}


def _insert(conn: psycopg.Connection[Any], table: str, row: dict[str, Any]) -> None:
    columns = list(row)
    values: list[sql.Composable] = []
    params: list[Any] = []
    for column in columns:
        value = row[column]
        if isinstance(value, SqlExpression):
            values.append(sql.SQL(value.text))
        else:
            values.append(sql.Placeholder())
            params.append(Jsonb(value) if isinstance(value, dict) else value)
    statement = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        sql.Identifier(*table.split(".")),
        sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        sql.SQL(", ").join(values),
    )
    conn.execute(statement, params)


def _clear(conn: psycopg.Connection[Any]) -> None:
    """Empty every table the schema created, ready for the next case."""
    row = conn.execute(
        "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') FROM pg_tables"
        " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
    ).fetchone()
    if row and row[0]:
        conn.execute(f"TRUNCATE {row[0]} RESTART IDENTITY CASCADE".encode())


def _as_time(conn: psycopg.Connection[Any], value: Any) -> datetime | None:
    """A case's last_modified: a YAML time (naive is UTC), text or `!sql`, as the database
    reads it."""
    if value is None or (isinstance(value, datetime) and value.tzinfo is not None):
        return value
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC)
    if isinstance(value, SqlExpression):
        found = conn.execute(f"SELECT ({value.text})::timestamptz".encode()).fetchone()
    else:
        found = conn.execute("SELECT %s::text::timestamptz", [str(value)]).fetchone()
    return found[0] if found else None


def _case_sources(conn: psycopg.Connection[Any], invariant: Invariant, case: Case) -> Bound:
    """The case's inline listings bound as a run binds real ones: the same grace
    (`min_age` before now), the same CTEs."""
    sources = invariant.header.source
    if not sources:
        return NOTHING_BOUND
    listed: dict[str, list[ObjectRow]] = {}
    now = datetime.now(UTC)
    for name, spec in sources.items():
        rows = []
        # Names and fields were checked when the fixture was read (fixtures.py).
        for given in case.sources.get(name, []):
            size = given.get("size")
            rows.append(
                ObjectRow(
                    given["key"],
                    None if size is None else int(size),
                    _as_time(conn, given.get("last_modified")),
                    None if given.get("etag") is None else str(given["etag"]),
                )
            )
        listed[name], _ = settled(rows, spec.min_age_delta, now)
    return bind(sources, listed)


class _RowRefused(Exception):
    """A case's row the database would not take: said at the case's line in its file."""


def _as_written(value: Any) -> str:
    """A filler as a fixture would write it: numbers bare, the rest quoted (a time as its
    ISO form), cut short."""
    if isinstance(value, bool | int | float):
        return str(value).lower() if isinstance(value, bool) else str(value)
    if isinstance(value, datetime | date):
        text = value.isoformat()
    elif isinstance(value, bytes):
        text = value.decode(errors="replace")
    else:
        text = str(value)
    return cut(f"'{text}'", 40)


def _refused(exc: psycopg.Error, table: str, filled: dict[str, Any]) -> str:
    """The database's reason, said in the fixture's terms for a foreign key, and naming the
    values invmon filled in (`filled`: the columns the case left out) when a CHECK refused
    the row: the check may be refusing a value the case never wrote."""
    detail = exc.diag.message_detail or ""
    found = re.match(r'Key \((.+)\)=\((.+)\) is not present in table "(.+)"', detail)
    if exc.sqlstate == "23503" and found:
        column, value, target = found.groups()
        return (
            f"{table}.{column} = {value} refers to a {target} row the case does not list; "
            f"add it under `rows:` as {target}"
        )
    if exc.sqlstate == "23514" and filled:
        given = ", ".join(f"{column} = {_as_written(v)}" for column, v in filled.items())
        return (
            f"{describe_error(exc)}; the case does not give {', '.join(filled)}, which invmon "
            f"filled in ({given}): if the check is on one of them, give it a value the check "
            "accepts"
        )
    return describe_error(exc)


def run_case(
    conn: psycopg.Connection[Any],
    invariant: Invariant,
    case: Case,
    live_fence: LiveFence,
    tables: Tables | None = None,
) -> CaseResult:
    """Insert the case's rows, then evaluate the invariant exactly as the daemon does (the
    same executor: READ ONLY, its timeout, the fence against this database). Columns the
    case does not name get fillers (fillers.py)."""
    tables = tables or Tables(conn)
    try:
        with conn.transaction():
            for table, rows in case.rows.items():
                for row in rows:
                    where = f"{fixture_path(invariant.path)}:{case.line}"
                    full = row  # until the fillers are known
                    try:
                        full = tables.filled(table, row)
                        _insert(conn, table, full)
                    except NoFiller as exc:
                        raise _RowRefused(f"{where}: a row of {table}: {exc}") from None
                    except psycopg.Error as exc:
                        filled = {c: v for c, v in full.items() if c not in row}
                        reason = _refused(exc, table, filled)
                        raise _RowRefused(f"{where}: a row of {table}: {reason}") from None
        bound = _case_sources(conn, invariant, case)
        evaluation = execute(
            conn,
            invariant,
            sample=KEY_LIMIT,
            limits=FIXTURE_LIMITS,
            lock_timeout=LOCK_TIMEOUT,
            live_fence=live_fence,
            bound=bound,
        )
    except _RowRefused as exc:
        return CaseResult(case, False, error=str(exc))
    except Refused as exc:
        return CaseResult(case, False, error=f"refused by the read-only fence: {exc}")
    except Unrunnable as exc:
        return CaseResult(case, False, error=str(exc))
    except psycopg.Error as exc:
        return CaseResult(case, False, error=describe_error(exc))
    finally:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        _clear(conn)
    keys = [offending_key(row, invariant.key) for row in evaluation.rows]
    result = compare(case, keys, evaluation.count, evaluation.rows, evaluation.columns)
    repeated = sorted(k for k, n in Counter(keys).items() if n > 1) if invariant.key else []
    found_twice = [
        not_unique(case.name, invariant.key, k).replace("is expected", "was returned")
        for k in repeated
    ]
    return dataclasses.replace(result, warnings=found_twice)


def run_fixtures(
    invariants: Sequence[Invariant],
    schema_sql: str | None,
    admin_dsn: str | None = None,
    allow: Allowances = TRUST_NOTHING,
    schema_where: str = "schema",
    warn: Callable[[str], None] = lambda _: None,
) -> list[InvariantReport]:
    """Each invariant's cases in a scratch database made from the schema file (which may
    be `pg_dump` output: see schema_dump.py); raises SchemaLoadError naming its line."""
    reports = []
    fixtures = {
        inv.name: load_fixture(fixture_path(inv.path), inv.key, inv.header.source)
        if fixture_path(inv.path).exists()
        else None
        for inv in invariants
    }
    with test_server(admin_dsn) as server, scratch_database(server, "invmon_fixtures") as dsn:
        if schema_sql:
            for warning in load_schema_dump(dsn, schema_sql, schema_where):
                warn(warning)
        live_fence = LiveFence(allow)
        with psycopg.connect(dsn, autocommit=True, client_encoding=CLIENT_ENCODING) as conn:
            register_loaders(conn)
            tables = Tables(conn)
            for inv in invariants:
                fixture = fixtures[inv.name]
                report = InvariantReport(inv, fixture)
                for case in fixture.cases if fixture else []:
                    started = time.monotonic()
                    result = run_case(conn, inv, case, live_fence, tables)
                    took = time.monotonic() - started
                    report.results.append(dataclasses.replace(result, seconds=took))
                reports.append(report)
    return reports
