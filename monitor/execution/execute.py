"""The one path by which an invariant's query reaches a database.

`execute` is used by the daemon's runner, `invmon check`, `invmon test` and the tests of
the shipped invariants, so a row means the same thing everywhere. On the connection it is
given it:

1. opens a transaction and makes it READ ONLY with the invariant's statement timeout, a lock
   timeout and `application_name = invmon:<name>`, all `SET LOCAL` (the monitoring role
   needs no EXECUTE on `set_config`, which deploy/readonly-role.sql revokes), and as a
   superuser a `temp_file_limit` (a role has its own, which it cannot change);
2. judges the invariant's own text (with its sources' CTEs, as `standalone` writes it: the
   text the daemon's vetting and `explain` judge too) against this database's own catalog
   (fence.py), and refuses it with the file's line when the catalog says it could change
   anything. The wrapper query.py puts around it is not judged: it embeds that text
   verbatim, as a subquery the parser reads exactly as it read the text alone (one complete
   statement: its strings, comments and parentheses close within it), and every name of its
   own is schema-qualified in pg_catalog, where only a superuser can create anything, so no
   object of the database can change what it does or make the fence refuse it;
3. asks for the result's columns and for the plan of the text alone (whose JIT decides the
   bounded form's, query.jit_settings), then runs the bounded form of the query
   (query.py) and keeps what comes back within the run's byte budgets (offending.py).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import errors, pq, sql
from psycopg.adapt import Dumper, Loader
from psycopg.types.datetime import (
    DateLoader,
    TimeLoader,
    TimestampLoader,
    TimestamptzLoader,
    TimetzLoader,
)
from psycopg.types.json import JsonLoader

from monitor.durations import IDLE_MARGIN, format_duration
from monitor.execution.offending import DEFAULT_ROW_LIMITS, Evaluation, Gathering, Load, RowLimits
from monitor.execution.query import (
    BY_ESTIMATES,
    MAX_COLUMNS,
    Column,
    KeysFirst,
    bounded_query,
    describing_query,
    jit_settings,
    keys_first_applies,
    keys_first_query,
    plan_cost,
    planning_query,
)
from monitor.execution.redaction import Masker
from monitor.execution.rows import exact_json, unique_column_names
from monitor.execution.temp_files import DEFAULT_TEMP_FILE_LIMIT, temp_file_kb
from monitor.fence.allowances import TRUST_NOTHING, Allowances
from monitor.fence.catalog import Name
from monitor.fence.catalog_memory import Asked, CatalogMemory, Recording
from monitor.fence.fence import verdict
from monitor.fence.known import MAX_VIEW_DEPTH
from monitor.fence.live_catalog import LiveCatalog
from monitor.fence.sqltree import analyze
from monitor.fence.tree import Analysis
from monitor.invariants.loader import Invariant
from monitor.problems import Problem, SqlProblem
from monitor.sources.binding import (
    NOTHING_BOUND,
    ArrayParam,
    Bound,
    bound_text,
    emptied,
    standalone,
)
from monitor.text import shorten

log = logging.getLogger("invmon.execute")

# Rounds of LiveFence.learn: each view nesting asks one more, and an answer can lead to one
# more question (an xml cast found through a function's signature).
LEARNING_ROUNDS = MAX_VIEW_DEPTH + 2


def may_set_temp_file_limit(conn: psycopg.Connection[Any]) -> bool:
    """Only a superuser may set temp_file_limit. The server reports is_superuser when the
    session starts (and after SET ROLE), so asking costs no round trip. (PostgreSQL 15 can
    GRANT SET on it to a role; such a role is bounded by what its DBA set, like any other.)"""
    return conn.info.parameter_status("is_superuser") == "on"


class Unrunnable(Exception):
    """The invariant cannot be run as written; the message says why, in one sentence."""


class Refused(Exception):
    """The fence refused the query against this database; each problem names its line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


class _TextWhenOutOfRange:
    """Values PostgreSQL holds and Python cannot ('infinity', year 10000+, the time
    '24:00:00', an interval past 999,999,999 days) are kept as the text PostgreSQL sent, so
    a violation with such a row is still counted, not an error."""

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


class _Time(_TextWhenOutOfRange, TimeLoader):
    pass


class _Timetz(_TextWhenOutOfRange, TimetzLoader):
    pass


class _AsWritten(Loader):
    """A value as PostgreSQL writes it, where Python's type would say something else. An
    interval ('1 mon', '30 days', '1 year'): timedelta has no months, so '1 mon' and
    '30 days' read as one value (and one key), and '1 year' as 365 days, which PostgreSQL
    never says. A range ('[1,5)', '["2026-01-01","2026-02-01")', 'empty'): psycopg's
    Range prints itself otherwise ('[1, 5)')."""

    format = pq.Format.TEXT

    def load(self, data: Any) -> Any:
        return bytes(data).decode()


# The built-in range and multirange types; an extension's own ranges come as text already.
_RANGES = (
    "int4range",
    "int8range",
    "numrange",
    "daterange",
    "tsrange",
    "tstzrange",
    "int4multirange",
    "int8multirange",
    "nummultirange",
    "datemultirange",
    "tsmultirange",
    "tstzmultirange",
)


class _Json(Loader):
    """json and jsonb: their structure where Python shows it exactly, else their text
    (rows.exact_json)."""

    format = pq.Format.TEXT

    def load(self, data: Any) -> Any:
        return exact_json(bytes(data).decode())


def register_loaders(conn: psycopg.Connection[Any]) -> None:
    """How values are read back; every connection that runs invariants gets these."""
    conn.adapters.register_loader("date", _Date)
    conn.adapters.register_loader("timestamp", _Timestamp)
    conn.adapters.register_loader("timestamptz", _Timestamptz)
    conn.adapters.register_loader("time", _Time)
    conn.adapters.register_loader("timetz", _Timetz)
    conn.adapters.register_loader("interval", _AsWritten)
    for name in _RANGES:  # multiranges are PostgreSQL 14's: unused before, and harmless
        conn.adapters.register_loader(name, _AsWritten)
    conn.adapters.register_loader("json", _Json)
    conn.adapters.register_loader("jsonb", _Json)


class _ArrayParamDumper(Dumper):
    """A source's column (sources/binding.py) is already PostgreSQL's binary array: sent as
    it is, typed, never copied or converted on the way."""

    format = pq.Format.BINARY

    def dump(self, obj: ArrayParam) -> bytes | bytearray:
        return obj.data

    def get_key(self, obj: ArrayParam, format: Any) -> Any:
        return (self.cls, obj.type)

    def upgrade(self, obj: ArrayParam, format: Any) -> Dumper:
        dumper = _ArrayParamDumper(self.cls)
        dumper.oid = obj.oid
        return dumper


def listing_cursor(conn: psycopg.Connection[Any]) -> psycopg.RawCursor[Any]:
    """A cursor for a text with sources' parameters (`$n` placeholders) that sends them."""
    cur = psycopg.RawCursor(conn)
    cur.adapters.register_dumper(ArrayParam, _ArrayParamDumper)
    return cur


def _ms(delta: timedelta) -> str:
    return f"{max(1, int(delta.total_seconds() * 1000))}ms"


# The share of a statement's timeout a lock wait may take at most (lock_bound).
LOCK_SHARE = 0.9


def lock_bound(timeout: timedelta, lock_timeout: timedelta) -> timedelta:
    """The lock timeout a run is given: `database.lock_timeout`, but never more than
    LOCK_SHARE of its statement timeout. A lock timeout no shorter than the timeout never
    fires (the statement timeout does first), and a run blocked by a lock for all its time
    was then said to have run past its timeout, with advice to raise it. Pure."""
    return min(lock_timeout, timeout * LOCK_SHARE)


def read_only_settings(
    timeout: timedelta, lock_timeout: timedelta, application_name: str
) -> sql.Composed:
    """READ ONLY and the limits of what follows in the transaction, all `SET LOCAL` (the
    monitoring role needs no EXECUTE on `set_config`, which deploy/readonly-role.sql
    revokes): a statement timeout, a lock timeout (lock_bound), and an idle limit
    IDLE_MARGIN past it."""
    # standard_conforming_strings on: the server must read backslashes in '…' as the fence's
    # parser did (off, 'x\\'' would end the string elsewhere and hide a call after it).
    # DateStyle ISO: the only output psycopg reads a date or time from ('Postgres, DMY', set
    # on a database, failed every run with a timestamp in it). Only the output part: the
    # day/month order the database set for reading literals in the query stays.
    return sql.SQL(
        "SET TRANSACTION READ ONLY; SET LOCAL standard_conforming_strings = on; "
        "SET LOCAL DateStyle = 'ISO'; "
        "SET LOCAL statement_timeout = {}; "
        "SET LOCAL lock_timeout = {}; SET LOCAL idle_in_transaction_session_timeout = {}; "
        "SET LOCAL application_name = {}"
    ).format(
        sql.Literal(_ms(timeout)),
        sql.Literal(_ms(lock_bound(timeout, lock_timeout))),
        sql.Literal(_ms(timeout + IDLE_MARGIN)),
        sql.Literal(application_name[:63]),
    )


def begin_read_only(
    conn: psycopg.Connection[Any],
    invariant: Invariant,
    lock_timeout: timedelta,
    temp_file_limit: str | None = DEFAULT_TEMP_FILE_LIMIT,
    timeout: timedelta | None = None,
) -> None:
    """Inside a transaction just begun: READ ONLY, and the invariant's limits, in one trip.
    `temp_file_limit` bounds a superuser's run (None: the session's own setting stays); a
    limit the session already has that is lower is kept. `timeout`: what is left of the
    invariant's, for a run's second transaction."""
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
    settings = read_only_settings(
        invariant.timeout if timeout is None else timeout,
        lock_timeout,
        f"invmon:{invariant.name}",
    )
    if temp_file_limit is not None and may_set_temp_file_limit(conn):
        # A superuser has no temp_file_limit unless someone set one: `generate_series(1,
        # 1e12)` wrote 300 MB of temporary files in 3 s. pg_settings holds it in kB (-1:
        # none); set_config(…, true) is SET LOCAL with a condition.
        settings += sql.SQL(
            "; SELECT pg_catalog.set_config('temp_file_limit', {}, true)"
            " FROM pg_catalog.pg_settings"
            " WHERE name OPERATOR(pg_catalog.=) 'temp_file_limit'"
            " AND (setting::pg_catalog.int8 OPERATOR(pg_catalog.<) 0"
            " OR setting::pg_catalog.int8 OPERATOR(pg_catalog.>) {})"
        ).format(sql.Literal(temp_file_limit), sql.Literal(temp_file_kb(temp_file_limit)))
    conn.execute(settings.as_bytes(conn))


# What a keys-first choice is made for: the invariant's text, its key's positions, and the
# rows it reads whole and in all (query.keys_first_query; each changes the estimates).
Reading = tuple[str, tuple[int, ...], int, int]


class LiveFence:
    """The fence against the database a connection is on. Cheap to ask again: each text is
    parsed once (its reading is kept, without the tree), each verdict is remembered for a
    while, and so is what the catalog said about each name, since a catalog changes far
    less often than an invariant runs."""

    # Readings kept, most recently used first out last: one text per invariant (its own,
    # with its sources' CTEs), with room for a large folder.
    MAX_READINGS = 8192

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
        self._readings: OrderedDict[str, Analysis] = OrderedDict()
        self.catalog = CatalogMemory(self._remember, clock)
        # Whether to read each text's keys first (query.keys_first_query), and until when
        # (the clock's): what the planner's estimates said, kept so that its two plans are
        # not asked for at every run; or no, after its keys did not find the sample's rows
        # again exactly once (a NULL or shared key), or failed to.
        self._keys_first: dict[Reading, tuple[float, bool]] = {}
        self._lock = threading.Lock()  # guards _verdicts, _readings and _keys_first

    def _reading(self, text: str) -> Analysis:
        with self._lock:
            known = self._readings.get(text)
            if known is not None:
                self._readings.move_to_end(text)
                return known
        reading = analyze(text).without_tree()
        with self._lock:
            self._readings[text] = reading
            while len(self._readings) > self.MAX_READINGS:
                self._readings.popitem(last=False)
        return reading

    def keys_first_choice(self, reading: Reading) -> bool | None:
        """Whether `reading` is made keys first, while that is known; None: ask the planner."""
        now = self._clock()
        with self._lock:
            known = self._keys_first.get(reading)
        return None if known is None or now >= known[0] else known[1]

    def remember_keys_first(self, reading: Reading, choice: bool, kept_for: timedelta) -> None:
        """Keep `choice` for `kept_for`; a yes never replaces a no still kept (a run that
        failed to read keys first, while another of the same reading asked the planner)."""
        now = self._clock()
        with self._lock:
            known = self._keys_first.get(reading)
            if choice and known is not None and not known[1] and now < known[0]:
                return
            if len(self._keys_first) >= self.MAX_READINGS:
                self._keys_first = {r: k for r, k in self._keys_first.items() if now < k[0]}
            if len(self._keys_first) >= self.MAX_READINGS:
                self._keys_first.clear()  # at worst, the planner is asked once more each
            self._keys_first[reading] = (now + kept_for.total_seconds(), choice)

    def problems(self, conn: psycopg.Connection[Any], text: str) -> list[SqlProblem]:
        now = self._clock()
        with self._lock:
            known = self._verdicts.get(text)
        if known is not None and now - known[0] < self._remember:
            return known[1]
        found = verdict(self._reading(text), self.catalog.over(LiveCatalog(conn)), self.allow)
        with self._lock:
            if len(self._verdicts) >= self.MAX_READINGS:  # keep only the live ones
                self._verdicts = {
                    t: v for t, v in self._verdicts.items() if now - v[0] < self._remember
                }
            self._verdicts[text] = (now, found)
        return found

    def learn(self, conn: psycopg.Connection[Any], texts: Iterable[str]) -> None:
        """Ask this database's catalog about every name the verdicts on `texts` will ask
        about, all texts together: one question per kind of name per round, where each run
        would ask its own on its own connection, cold. A round judges the texts against the
        memory alone and notes what it lacks; the next asks the answers' own names (a
        view's text), so verdicts given afterwards ask nothing. Only answers are kept:
        every verdict is still given in full when its text runs."""
        now = self._clock()
        # What a verdict asks the catalog depends only on the names a text refers to, and
        # of what kind: one text per set of them is judged (1,000 generated invariants over
        # four query shapes are four texts to judge, not 1,000).
        by_names: dict[frozenset[tuple[str, Name]], Analysis] = {}
        for text in texts:
            with self._lock:
                known = self._verdicts.get(text)
            if known is None or now - known[0] >= self._remember:
                reading = self._reading(text)
                names = frozenset((r.kind, r.name) for r in reading.references)
                by_names.setdefault(names, reading)
        pending = list(by_names.values())
        for _ in range(LEARNING_ROUNDS):
            asked, still = Asked(), []
            for reading in pending:
                if lacking := self._lacking(reading):
                    asked.add(lacking)
                    still.append(reading)
            if not still:
                return
            self.catalog.learn(asked, LiveCatalog(conn))
            pending = still

    def still_to_ask(self, text: str) -> Asked:
        """What the verdict on `text` would ask the database now: the names it needs that
        the memory does not hold (nothing, after `learn` of a batch holding `text`)."""
        return self._lacking(self._reading(text))

    def _lacking(self, reading: Analysis) -> Asked:
        recording = Recording()
        verdict(reading, self.catalog.over(recording, keep=False), self.allow)
        return recording.asked

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


def send_one_statement(
    cur: psycopg.Cursor[Any], text: str, params: list[ArrayParam] | None = None
) -> None:
    """Send `text` as exactly one statement. Without parameters psycopg would use the simple
    query protocol, where the server runs every statement a text holds; in a pipeline it
    uses the extended protocol, where a second statement is an error. So even a text the
    fence's parser read differently from the server's cannot smuggle a second statement.
    (`Cursor.stream`, used for the rows, always uses the extended protocol.) With `params`
    (a source's listing, see sources/binding.py) `cur` is a `listing_cursor`: `$n`
    placeholders, so a `%` in the invariant's text is never read as one."""
    with cur.connection.pipeline():
        cur.execute(text.encode(), params, prepare=False)


# For every connection that runs invariants: the encoding the fence assumes.
CLIENT_ENCODING = "utf8"

# Per result type: does its cast to text run a function (so the text differs from what the
# server would send, e.g. bool -> 'true' where the server sends 't')?
_TYPES = (
    "SELECT t.oid::int8, EXISTS (SELECT FROM pg_catalog.pg_cast c WHERE c.castsource = t.oid"
    " AND c.casttarget = 'pg_catalog.text'::pg_catalog.regtype AND c.castmethod = 'f'),"
    " t.typcategory = 'A' FROM pg_catalog.pg_type t WHERE t.oid = ANY(%s::oid[])"
)


def _columns(
    described: psycopg.Cursor[Any], cur: psycopg.Cursor[Any], memory: CatalogMemory
) -> list[Column]:
    """The invariant's result columns, as the row description just received on `described`
    says (the base type of a domain), each with how its text is taken (asked of the catalog
    on `cur` once per type while `memory` remembers)."""
    description = described.description or []
    if len(description) > MAX_COLUMNS:
        raise Unrunnable(
            f"the query returns {len(description):,} columns; invmon reads at most {MAX_COLUMNS:,}"
        )
    names = unique_column_names([c.name for c in description])
    oids = [c.type_code for c in description]

    def ask(types: list[Name]) -> dict[Name, tuple[bool, bool]]:
        rows = cur.execute(_TYPES, [[int(t[0]) for t in types]]).fetchall()
        return {(str(oid),): (bool(via), bool(array)) for oid, via, array in rows}

    # (through format(), an array) by type; a type the catalog does not know goes through
    # format(), the text the server would send.
    kinds = memory.recall("column_type", [(str(oid),) for oid in oids], ask)
    return [
        Column(name, oid, *kinds.get((str(oid),), (True, False)))
        for name, oid in zip(names, oids, strict=True)
    ]


_UNKNOWN_TYPE = 0  # psycopg's fallback: the text as str, as for any type it does not know


def _loads(conn: psycopg.Connection[Any], columns: list[Column]) -> list[Load]:
    """For each column, the text loader psycopg would use for its type on this connection
    (including register_loaders' own), so a value reads as a plain fetch would read it."""
    loads: list[Load] = []
    for column in columns:
        loader = conn.adapters.get_loader(column.oid, pq.Format.TEXT)
        if loader is None:
            loader = conn.adapters.get_loader(_UNKNOWN_TYPE, pq.Format.TEXT)
        assert loader is not None  # psycopg always has a text loader for unknown types
        load = loader(column.oid, conn).load
        loads.append(_bounds_kept(load) if column.array else load)
    return loads


# The dimensions PostgreSQL writes before an array whose lower bounds are not all 1.
_BOUNDS = re.compile(rb"(?:\[-?\d+:-?\d+\])+=")


def _bounds_kept(load: Load) -> Load:
    """An array with lower bounds other than 1 as PostgreSQL writes it ('[0:1]={1,2}'):
    psycopg's list drops the bounds, and [1, 2] said the elements sat at 1 and 2."""

    def loaded(data: bytes) -> Any:
        if data[:1] == b"[" and _BOUNDS.match(bytes(data)):
            return bytes(data).decode()
        return load(data)

    return loaded


def _key_positions(columns: list[Column], invariant: Invariant, given: list[str]) -> list[int]:
    """Where each key column is; `given`: the names as the query gave them (before
    unique_column_names), so that a key naming two columns is refused, not half read."""
    names = [c.name for c in columns]
    missing = [k for k in invariant.key if k not in names]
    if missing:
        raise Unrunnable(
            f"key column{'s' * (len(missing) > 1)} {', '.join(map(repr, missing))} not among "
            f"the query's columns: {shorten(names, 200)}"
        )
    twice = [k for k in invariant.key if given.count(k) > 1]
    if twice:
        raise Unrunnable(
            f"key column {twice[0]!r} names {given.count(twice[0])} of the query's columns; "
            "give them distinct names (AS …)"
        )
    return [names.index(k) for k in invariant.key]


def execute(
    conn: psycopg.Connection[Any],
    invariant: Invariant,
    *,
    sample: int,
    track: int = 0,
    limits: RowLimits = DEFAULT_ROW_LIMITS,
    masker: Masker | None = None,
    lock_timeout: timedelta,
    live_fence: LiveFence,
    bound: Bound = NOTHING_BOUND,
    temp_file_limit: str | None = DEFAULT_TEMP_FILE_LIMIT,
    keys_first: KeysFirst = BY_ESTIMATES,
    stopping: Callable[[], bool] = lambda: False,
) -> Evaluation:
    """Evaluate one invariant on `conn` (loaders registered, no transaction open): the exact
    count, at most `sample` whole rows, and the keys of at most `track` rows (of `sample`
    rows when the invariant has no key), all within `limits`, masked by `masker`. `bound`
    holds its sources' listings: their CTEs go before both texts sent, and the fence judges
    the invariant's text with those CTEs before anything is sent. `keys_first` says when
    the keys are read first (query.keys_first_query); `stopping`, whether a cancel that
    ended that reading was a stop's (the runner's interrupt), which no second reading
    follows."""
    started = time.monotonic()

    def left() -> timedelta:
        return invariant.timeout - timedelta(seconds=time.monotonic() - started)

    judged, _, user_line = standalone(bound, invariant.sql)
    params = bound.params or None
    settings: str | None = None
    try:
        with (
            conn.transaction(),
            conn.cursor() as cur,
            listing_cursor(conn) if params else conn.cursor() as sending,
        ):
            begin_read_only(conn, invariant, lock_timeout, temp_file_limit)
            live_fence.refuse_unless_allowed(conn, judged, invariant, user_line)
            described = bound_text(bound, describing_query(invariant.sql))
            # Its types are all the describing query returns: the listing is sent once, below.
            send_one_statement(sending, described, emptied(bound) if params else None)
            columns = _columns(sending, cur, live_fence.catalog)
            given = [c.name for c in sending.description or []]  # as the query names them
            plan = None
            if not params:
                # Compiled (JIT) as the text alone decides (query.jit_settings). With
                # sources it would be planned without its listing (sent once, below), which
                # says nothing of its cost: the server's own settings stay.
                # A plan is data of ours, read as psycopg reads json (the connection's
                # loader keeps a value's text where Python would show it otherwise:
                # rows.exact_json).
                cur.adapters.register_loader("json", JsonLoader)
                send_one_statement(cur, planning_query(invariant.sql))
                planned = cur.fetchone()
                plan = planned[0] if planned else None
                settings = jit_settings(plan)
                if settings is not None:
                    cur.execute(settings.encode())
            key = _key_positions(columns, invariant, given)
            cell = limits.cell(len(columns))
            fetch = max(sample, track) if key else sample
            reading = _Reading(
                conn,
                columns,
                key,
                sample,
                fetch,
                cell,
                limits,
                masker,
                bounded_query(invariant.sql, columns, key, full=sample, fetch=fetch, cell=cell),
            )
            if (
                plan is not None
                and not bound.prefix
                and keys_first_applies(columns, key)
                and keys_first.worth_asking(plan_cost(plan))
            ):
                which: Reading = (invariant.sql, tuple(key), sample, fetch)
                choice = live_fence.keys_first_choice(which)
                if choice is None:
                    # Priced with every lookup of the sample's rows made in full (query.py).
                    priced = keys_first_query(
                        invariant.sql,
                        columns,
                        key,
                        full=sample,
                        fetch=sample,
                        cell=cell,
                        priced=True,
                    )
                    choice = _keys_first_chosen(cur, keys_first, invariant, priced, reading.bounded)
                    live_fence.remember_keys_first(which, choice, ESTIMATES_KEPT)
                if choice:
                    first = keys_first_query(
                        invariant.sql, columns, key, full=sample, fetch=fetch, cell=cell
                    )
                    found = reading.gathering()
                    cap = max(
                        min(invariant.timeout * KEYS_FIRST_SHARE, left()),
                        timedelta(milliseconds=1),
                    )
                    if _keys_first_reading(
                        cur, sending, which, first, found, sample, cap, lock_timeout
                    ):
                        log.debug("%s: read its keys first", invariant.name)
                        return found.result()
                    _read_whole(live_fence, which, invariant, MISMATCH, READ_WHOLE_AFTER_MISMATCH)
                    _limits(cur, left(), lock_timeout)
            return reading.whole(sending, bound, params)
    except _KeysFirstFailed as failed:
        why = failed.why()
        canceled = isinstance(failed.error, errors.QueryCanceled)
        if why is None or (canceled and (stopping() or left() <= timedelta(0))):
            raise failed.error from None  # a stop's cancel, or no time left to read again
        _read_whole(live_fence, failed.which, invariant, why, READ_WHOLE_AFTER_FAILURE)
    # The first reading failed, and its transaction with it: read whole in one of its own
    # (not under a savepoint: on a standby, a recovery conflict inside one ends the whole
    # connection, where it cancels only the statement outside), in what is left.
    with conn.transaction(), conn.cursor() as cur, conn.cursor() as sending:
        begin_read_only(
            conn, invariant, lock_timeout, temp_file_limit, max(left(), timedelta(milliseconds=1))
        )
        if settings is not None:
            cur.execute(settings.encode())
        return reading.whole(sending, bound, params)


@dataclass(frozen=True)
class _Reading:
    """What a run has learnt of its invariant before reading its rows: enough to read them
    whole, in this transaction or the next."""

    conn: psycopg.Connection[Any]
    columns: list[Column]
    key: list[int]
    full: int
    fetch: int
    cell: int
    limits: RowLimits
    masker: Masker | None
    bounded: str

    def gathering(self) -> Gathering:
        return Gathering(
            self.columns,
            _loads(self.conn, self.columns),
            self.key,
            full=self.full,
            cell=self.cell,
            limits=self.limits,
            masker=self.masker,
        )

    def whole(
        self, sending: psycopg.Cursor[Any], bound: Bound, params: list[ArrayParam] | None
    ) -> Evaluation:
        found = self.gathering()
        # One row in memory at a time (single-row mode), whatever `fetch` is.
        for raw in sending.stream(bound_text(bound, self.bounded).encode(), params):
            found.add(raw)
        return found.result()


# How long what the planner's estimates said of reading a text's keys first is kept: its
# two plans cost a text planned three times (a join of many tables can take longer to plan
# than to run), and estimates move with the data, slowly.
ESTIMATES_KEPT = timedelta(hours=1)


def _keys_first_chosen(
    cur: psycopg.Cursor[Any], policy: KeysFirst, invariant: Invariant, first: str, bounded: str
) -> bool:
    """What `policy` says of reading the keys first, by the planner's estimates of `first`
    (keys_first_query, priced) and of `bounded`."""
    costs = []
    for query in (first, bounded):
        send_one_statement(cur, f"EXPLAIN (FORMAT JSON) {query}")
        explained = cur.fetchone()
        costs.append(plan_cost(explained[0] if explained else None))
    chosen = policy.chosen(*costs)
    log.debug(
        "%s: the planner estimates reading keys first at %s, reading whole at %s: %s",
        invariant.name,
        *(f"{c:,.0f}" if c is not None else "unknown" for c in costs),
        "keys first" if chosen else "whole",
    )
    return chosen


# What reading the keys first may take of a run's timeout: the rest is left for reading
# the invariant whole, should the keys not find their rows again.
KEYS_FIRST_SHARE = 0.5
# How long a text is read whole after its keys did not find the sample's rows again exactly
# once (a NULL or shared key: its data may change), and after reading them first failed
# (an error, or past its share of the timeout: its query and plan are what they are).
READ_WHOLE_AFTER_MISMATCH = timedelta(hours=1)
READ_WHOLE_AFTER_FAILURE = timedelta(days=1)
MISMATCH = (
    "a row of its sample was not found again by its key, or was found twice "
    "(a NULL or shared key, or a volatile function)"
)
# A cancel this close to the cap is the cap's: 57014 is also a stop's cancel, and the
# server's words for the two are in its own language (lc_messages).
CAP_REACHED = 0.9


def _limits(cur: psycopg.Cursor[Any], timeout: timedelta, lock_timeout: timedelta) -> None:
    """The statements that follow in the transaction take at most `timeout`, and wait for a
    lock at most lock_bound of it (a wait is then told as one)."""
    cur.execute(
        sql.SQL("SET LOCAL statement_timeout = {}; SET LOCAL lock_timeout = {}").format(
            sql.Literal(_ms(timeout)), sql.Literal(_ms(lock_bound(timeout, lock_timeout)))
        )
    )


class _KeysFirstFailed(Exception):
    """Reading `which` keys first raised `error` after `spent` of its `cap`."""

    def __init__(
        self, which: Reading, error: psycopg.Error, spent: timedelta, cap: timedelta
    ) -> None:
        super().__init__(str(error))
        self.which, self.error, self.spent, self.cap = which, error, spent, cap

    def why(self) -> str | None:
        """Why the run reads its text whole, or None when the error is the run's own (a
        stop's cancel)."""
        if isinstance(self.error, errors.QueryCanceled):
            if self.spent < self.cap * CAP_REACHED:
                return None
            return (
                f"reading its keys first took all of the {format_duration(self.cap)} it may "
                "take (half the run's timeout, or what was left of it)"
            )
        return f"reading its keys first failed ({self.error.sqlstate} {type(self.error).__name__})"


def _keys_first_reading(
    cur: psycopg.Cursor[Any],
    sending: psycopg.Cursor[Any],
    which: Reading,
    first: str,
    gathering: Gathering,
    full: int,
    cap: timedelta,
    lock_timeout: timedelta,
) -> bool:
    """Read keys_first_query `first` into `gathering` within `cap`: whether it gave back
    exactly the first reading's rows. Raises _KeysFirstFailed for what reading the text
    whole may not meet: past `cap`, or an error of the second reading's alone. PostgreSQL
    pushes the key's comparison into the text, where it can meet rows the text's own join
    would have dropped first (`r.v::int` on a row whose v is not a number)."""
    _limits(cur, cap, lock_timeout)
    began = time.monotonic()
    try:
        return _found_again(sending.stream(first.encode()), gathering, full)
    except (errors.QueryCanceled, psycopg.DataError) as exc:  # DataError: class 22
        spent = timedelta(seconds=time.monotonic() - began)
        raise _KeysFirstFailed(which, exc, spent, cap) from exc


def _read_whole(
    live_fence: LiveFence, which: Reading, invariant: Invariant, why: str, until: timedelta
) -> None:
    live_fence.remember_keys_first(which, False, until)
    log.info(
        "%s: read again whole: %s; read whole for the next %s",
        invariant.name,
        why,
        format_duration(until),
    )


def _found_again(rows: Iterable[Sequence[Any]], gathering: Gathering, full: int) -> bool:
    """Feed keys_first_query's rows to `gathering`; False when its second reading did not
    give back exactly the first's rows (a numbered row not found again, or found twice),
    and then the rest is read and dropped (a stream is read to its end)."""
    last, exact = 0, True
    for raw in rows:
        if not exact:
            continue
        number = int(raw[2])
        if number == last or (number <= full and raw[3] is not True):
            exact = False
            continue
        last = number
        gathering.add(raw)
    return exact
