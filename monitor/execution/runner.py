"""Runs invariants against the monitored database, safely and concurrently.

Each run is a READ ONLY transaction with the invariant's statement_timeout, a lock_timeout
and application_name `invmon:<name>`, on a bounded connection pool shared by all runs. Any
failure becomes an `error` result carrying the database's own message; it never becomes
`ok` or a count of zero, and it never stops the other invariants.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from types import TracebackType
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg_pool import ConnectionPool, PoolTimeout

from monitor.clock import Clock, utc_now
from monitor.config import DatabaseConfig
from monitor.durations import format_duration, precise_duration, reconnect_attempt
from monitor.execution.deadlines import (
    Cut,
    Deadlines,
    never_paused,
    own_questions,
    past_timeout,
)
from monitor.execution.execute import (
    CLIENT_ENCODING,
    LOCK_SHARE,
    LiveFence,
    Refused,
    Unrunnable,
    execute,
    lock_bound,
    read_only_settings,
    register_loaders,
)
from monitor.execution.offending import DEFAULT_ROW_LIMITS, Evaluation, RowLimits
from monitor.execution.query import BY_ESTIMATES, NEVER_KEYS_FIRST
from monitor.execution.redaction import NO_REDACTION, Masker, Redaction
from monitor.execution.replica import ReplicaStatus, read_replica_status
from monitor.execution.results import RunResult
from monitor.execution.rows import keyed_by
from monitor.execution.temp_files import TEMP_FILE_LIMIT_HINT
from monitor.fence.allowances import TRUST_NOTHING, Allowances
from monitor.fence.role_check import RoleFacts, read_role
from monitor.invariants.header import DEFAULT_TARGET
from monitor.invariants.loader import Invariant
from monitor.problems import Problem
from monitor.sources.binding import NOTHING_BOUND, Bound, unlisted
from monitor.sources.listing import Lister, ListingError, list_source, listed_and_bound
from monitor.text import counted

log = logging.getLogger("invmon.runner")

# A hot standby cancels a query whose snapshot conflicts with WAL replay; that says nothing
# about the invariant, so the run is tried again a bounded number of times.
_RETRYABLE = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)


def describe_error(exc: BaseException) -> str:
    """The database's message, without the driver's decoration; never includes a DSN."""
    if isinstance(exc, psycopg.Error) and exc.diag.message_primary:
        message = exc.diag.message_primary
        if exc.diag.message_detail:
            message += f" ({exc.diag.message_detail})"
        return message
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def explained(
    exc: psycopg.Error,
    invariant: Invariant,
    target: str = DEFAULT_TARGET,
    lock_timeout: timedelta | None = None,
) -> str:
    """The database's message, and where the fix is: for a limit invmon set, which setting
    it was and its value; for a missing relation, the target it was looked for on."""
    message = describe_error(exc)
    if exc.sqlstate == pg_errors.LockNotAvailable.sqlstate and lock_timeout is not None:
        return f"{message}: {lock_timeout_hint(lock_timeout, target, invariant.timeout)}"
    if exc.sqlstate == pg_errors.ConfigurationLimitExceeded.sqlstate and (
        "temp_file_limit" in message
    ):
        return f"{message}: {TEMP_FILE_LIMIT_HINT}"
    if exc.sqlstate == pg_errors.QueryCanceled.sqlstate and message == _STATEMENT_TIMEOUT:
        return f"{message}: {timeout_hint(invariant, target)}"
    if exc.sqlstate == pg_errors.UndefinedTable.sqlstate and _MISSING_RELATION.match(message):
        return f"{message}: {missing_relation_hint(target)}"
    return message


# 57014 is also a cancel on request (a daemon stopping): only this one is the timeout's.
_STATEMENT_TIMEOUT = "canceling statement due to statement timeout"
# 42P01 is also "missing FROM-clause entry", a mistake in the query itself: no hint.
_MISSING_RELATION = re.compile(r'relation ".+" does not exist\Z')


def timeout_hint(invariant: Invariant, target: str) -> str:
    """Which setting the run's statement_timeout came from (begin_read_only sets it to the
    invariant's timeout, `SET LOCAL`, whatever the role's own is) and how to raise it. A
    target's statement_timeout is the ceiling lint holds every file's timeout to."""
    value = format_duration(invariant.timeout)
    ceiling = f"up to targets.{target}.statement_timeout when that is set"
    if invariant.header.timeout is not None:
        return (
            f"the query ran past its timeout, {value} (`timeout:` in its header); raise it "
            f"there, {ceiling}"
        )
    return (
        f"the query ran past its timeout, {value} (defaults.timeout in the config: its header "
        f"has no `timeout:`); raise it with `timeout:` in the header or defaults.timeout, "
        f"{ceiling}"
    )


def lock_timeout_hint(lock_timeout: timedelta, target: str, timeout: timedelta) -> str:
    """Why a run waited on a lock past its bound, and which setting the bound is (the
    configured one, or a share of the run's `timeout` when that is shorter: lock_bound)."""
    setting = _setting("lock_timeout", target)
    # format_duration keeps whole seconds, and a lock timeout is often under one.
    bound = lock_bound(timeout, lock_timeout)
    shown = f"{precise_duration(lock_timeout)} ({setting})"
    if bound < lock_timeout:
        shown = (
            f"{precise_duration(bound)} ({LOCK_SHARE:.0%} of the query's timeout, "
            f"{precise_duration(timeout)}; {setting}, {precise_duration(lock_timeout)}, is "
            "longer)"
        )
    return (
        f"another session held a lock the query needs for longer than the lock timeout, "
        f"{shown}: a migration, or a transaction left open on the table (in a test, often "
        "the test's own, not yet committed)"
    )


def _setting(name: str, target: str) -> str:
    """Where a target's database setting comes from: its own, else the `database:` one."""
    if target == DEFAULT_TARGET:
        return f"database.{name}"
    return f"targets.{target}.{name}, else database.{name}"


def missing_relation_hint(target: str) -> str:
    return (
        f"not in the database of target {target!r}; check the invariant's `target:` and that "
        "target's dsn; `invmon lint --schema FILE` checks its names against the schema offline"
    )


def _configure(conn: psycopg.Connection) -> None:
    # BEGIN READ ONLY for every transaction on this connection: the second fence after lint.
    conn.read_only = True
    conn.autocommit = False
    register_loaders(conn)


def _reset(conn: psycopg.Connection) -> None:
    # Nothing one invariant did to its session (a search_path, a lock, a temp table) may
    # reach the next invariant that borrows this connection.
    conn.autocommit = True
    conn.execute("DISCARD ALL")
    conn.autocommit = False


class Runner:
    """Owns the connection pool; use as a context manager."""

    def __init__(
        self,
        dsn: str,
        concurrency: int = 4,
        database: DatabaseConfig | None = None,
        sleep: Callable[[float], None] = time.sleep,
        track_keys: int = 0,
        allow: Allowances = TRUST_NOTHING,
        limits: RowLimits = DEFAULT_ROW_LIMITS,
        redaction: Redaction = NO_REDACTION,
        target: str = DEFAULT_TARGET,
        lister: Lister = list_source,
        clock: Clock = utc_now,
        resumed: Callable[[float], float] = never_paused,
        monotonic: Callable[[], float] = time.monotonic,
        overrun_margin: timedelta = timedelta(seconds=10),
    ) -> None:
        self.dsn = dsn
        self.clock = clock  # stamps a run's start: the daemon's clock, faked in tests
        # When a hold begun at a `monotonic` instant started to count: after the process's
        # latest pause since (the daemon's Liveness.resumed), else that instant.
        self._resumed = resumed
        self._monotonic = monotonic
        self.lister = lister  # how an invariant's `source:` relations are listed
        self.concurrency = concurrency
        self.database = database or DatabaseConfig()
        self._sleep = sleep
        # How many offending keys to bring back for incident tracking, beyond the sample.
        self.track_keys = track_keys
        self.limits = limits
        self.redaction = redaction
        self.target = target
        self.fence = LiveFence(allow)
        # How far past its timeout a query may go before it is overdue: its connection is
        # then closed (Deadlines) and, in the daemon, its invariant quarantined.
        self.overrun_margin = overrun_margin
        # Every wait on this database is bounded on the client too (deadlines.py): the
        # server's own timeouts cannot fire in a server process that is stopped or hung.
        self.deadlines = Deadlines(target, monotonic, resumed)
        self._active: set[psycopg.Connection[Any]] = set()
        # Each invariant whose attempt holds a connection now, and since when (on
        # self._monotonic, which a suspended host does not move): how long the database has
        # been at it, which is what an overrun is judged by.
        self._holding: dict[str, float] = {}
        # run_all's first connection while no run has it (_borrowed); None outside a round.
        self._spare: psycopg.Connection[Any] | None = None
        # Set by interrupt(): no run starts a query on this runner any more.
        self._interrupted = False
        self._active_lock = threading.Lock()  # guards _active, _holding, _spare, _interrupted
        connect_timeout = max(1, int(self.database.connect_timeout.total_seconds()))
        # How every connection to the database is opened, the pool's and `_connect`'s.
        # No server-side prepared statements: DISCARD ALL would drop them under psycopg.
        self._connect_kwargs: dict[str, Any] = {
            "connect_timeout": connect_timeout,
            "application_name": "invmon",
            "prepare_threshold": None,
            "client_encoding": CLIENT_ENCODING,
        }
        self._pool = ConnectionPool(
            dsn,
            min_size=0,
            max_size=concurrency,
            open=False,
            timeout=self.database.connect_timeout.total_seconds(),
            reconnect_timeout=reconnect_attempt(self.database.connect_timeout),
            configure=_configure,
            reset=self._reset,
            # Each connection is checked as it is handed out (one empty statement): one the
            # server ended while idle in the pool (a restart, a failover, an idle timeout)
            # is replaced, where it failed the next run and the replica gate's read.
            check=self._check,
            kwargs=self._connect_kwargs,
            name="invmon",
        )

    def __enter__(self) -> Runner:
        self.open()
        return self

    def open(self) -> None:
        self._pool.open(wait=False)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._pool.close(timeout=5)
        self.deadlines.close()

    def _own(
        self, conn: psycopg.Connection[Any], what: str
    ) -> contextlib.AbstractContextManager[None]:
        """A bound on one of invmon's own questions on `conn` (own_questions)."""
        bound, past = own_questions(self.database.connect_timeout, self.overrun_margin)
        return self.deadlines.bounded(conn, bound, what, past)

    def _past_timeout(
        self, conn: psycopg.Connection[Any], timeout: timedelta, what: str
    ) -> contextlib.AbstractContextManager[None]:
        """A bound on a statement the server stops at `timeout` (past_timeout)."""
        bound, past = past_timeout(timeout, self.overrun_margin)
        return self.deadlines.bounded(conn, bound, what, past)

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        # Half the wait for a connection: the pool's wait for one includes this check, so a
        # new connection can still be had within it when this one's server process hangs.
        half = self.database.connect_timeout / 2
        past = (
            f"half the wait for a connection, {precise_duration(half)} (database.connect_timeout)"
        )
        try:
            with self.deadlines.bounded(conn, half, "a pooled connection's check", past):
                ConnectionPool.check_connection(conn)
        except Cut:
            # What silenced this one (a NAT or firewall dropping idle connections, a server
            # stopped) has most likely silenced the others idle beside it: each would cost
            # the next waits half their time. The pool replaces them all at once.
            self._pool.drain()
            raise

    def _reset(self, conn: psycopg.Connection[Any]) -> None:
        with self._own(conn, "a connection's reset"):
            _reset(conn)

    def replica_status(self) -> ReplicaStatus:
        """Recovery state and lag of the monitored server, read like a run: read-only."""
        with (
            self._pool.connection() as conn,
            self._own(conn, "the read of the replica status"),
            conn.transaction(),
        ):
            return read_replica_status(conn)

    def role_facts(self) -> RoleFacts:
        """What the role it connects as can do (role_check.py), read like a run: read-only."""
        with (
            self._pool.connection() as conn,
            self._own(conn, "the read of the role"),
            conn.transaction(),
        ):
            return read_role(conn)

    def interrupted(self) -> bool:
        """Whether interrupt was called: no run is to start, nor to read again."""
        with self._active_lock:
            return self._interrupted

    def interrupt(self) -> int:
        """No run starts on this runner from now on, and each run in flight has its query
        cancelled on the server, where it would have gone on until its statement timeout.
        How many were in flight. A cancel that reaches a run between two of its statements
        is lost (the server ignores it there), so interrupt_all asks again."""
        with self._active_lock:
            self._interrupted = True
        return self.cancel_all(timeout=1.0)

    def cancel_all(self, timeout: float = 5.0) -> int:
        """Ask the server to cancel every query in flight, `timeout` seconds at most for
        each; how many were. A cancel that does not reach the server (it stopped answering)
        is left at that: Deadlines ends the wait (interrupt_all cuts it at once)."""
        with self._active_lock:
            active = list(self._active)
        for conn in active:
            with contextlib.suppress(psycopg.Error):  # CancellationTimeout, a closed one
                conn.cancel_safe(timeout=timeout)
        return len(active)

    def _connect(self) -> psycopg.Connection[Any]:
        """A connection of its own, opened and set up as the pool's are (read-only, named
        invmon, the same loaders); the caller closes it."""
        try:
            conn = psycopg.connect(self.dsn, **self._connect_kwargs)
        except psycopg.OperationalError as exc:
            if "timeout expired" not in str(exc):
                raise
            # libpq says only "connection timeout expired": which bound, and where it is set.
            waited = self._connect_kwargs["connect_timeout"]
            setting = _setting("connect_timeout", self.target)
            raise psycopg.OperationalError(f"no answer within {waited}s ({setting})") from exc
        try:
            _configure(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def probe(self) -> str | None:
        """None when the database accepts a connection, else the reason it does not."""
        try:
            # A statement, not the login alone: behind a pooler (PgBouncer) a login is
            # accepted while the server behind it is down.
            with self._connect() as conn, self._own(conn, "SELECT 1 on a new connection"):
                conn.execute("SELECT 1")
        except psycopg.Error as exc:
            return describe_error(exc)
        return None

    def run_all(
        self,
        invariants: Sequence[Invariant],
        screen: Callable[[psycopg.Connection[Any]], str | None] | None = None,
    ) -> list[RunResult]:
        """Evaluate every invariant once, at most `concurrency` at a time, in input order.
        `screen` is asked first, on the round's first connection: a reason it gives fails
        every run with it (check's reading of the role)."""
        if not invariants:
            return []
        try:
            # Opened directly (not from the pool) so a refused port is said at once, not
            # after the pool's whole connect timeout; then kept for the screen and the
            # catalog's questions, which a throwaway probe would have left to another.
            first = self._connect()
        except psycopg.Error as exc:
            return self._all_failed(invariants, f"cannot connect: {describe_error(exc)}")
        wanted = min(len(invariants), self.concurrency)
        try:
            with contextlib.closing(first):
                refusal = None
                if screen is not None:
                    try:
                        with self._own(first, "the read of the role"):
                            refusal = screen(first)
                    except Cut as exc:
                        refusal = str(exc)
                if refusal is not None:
                    return self._all_failed(invariants, refusal)
                # `first` is one of the `concurrency` connections: the pool's workers open
                # the others while it learns the catalog, and then it runs invariants too,
                # one at a time (_borrowed), so that every run starts on an open connection
                # and a round at concurrency 1 opens no other. The pool may not grow past
                # the rest while `first` lives (a run may find it lent, or being reset).
                self._pool.resize(wanted - 1, max(self.concurrency - 1, 1))
                self.learn(invariants, first)
                return self._run_lending(first, invariants)
        finally:
            self._pool.resize(0, self.concurrency)

    def _run_lending(
        self, first: psycopg.Connection[Any], invariants: Sequence[Invariant]
    ) -> list[RunResult]:
        """`invariants` run `concurrency` at a time, in input order, `first` lent to one
        run at a time (_borrowed)."""
        with self._active_lock:
            self._spare = first
        try:
            with ThreadPoolExecutor(self.concurrency, thread_name_prefix="invmon-run") as pool:
                return list(pool.map(self.run_one, invariants))
        finally:
            with self._active_lock:
                self._spare = None

    @contextlib.contextmanager
    def _borrowed(self) -> Iterator[psycopg.Connection[Any]]:
        """The round's first connection when it is free (run_all), else one of the pool's.
        It is given back as the pool takes one back: its transaction ended and its session
        reset; one that broke is closed and not lent again."""
        with self._active_lock:
            spare, self._spare = self._spare, None
        if spare is not None and (spare.broken or spare.closed):
            # Cut or lost while no run had it (the catalog's questions): its place goes to
            # the pool, and the run to a connection that works.
            spare.close()
            self._pool.resize(self._pool.min_size, self.concurrency)
            spare = None
        if spare is None:
            with self._pool.connection() as pooled:
                yield pooled
            return
        try:
            yield spare
        finally:
            try:
                with self._own(spare, "a connection's reset"):
                    if spare.info.transaction_status != pq.TransactionStatus.IDLE:
                        spare.rollback()
                    _reset(spare)
            except psycopg.Error:
                spare.close()  # run_all's closing() is then a no-op
                self._pool.resize(self._pool.min_size, self.concurrency)  # its place
            else:
                with self._active_lock:
                    self._spare = spare

    def _all_failed(self, invariants: Sequence[Invariant], reason: str) -> list[RunResult]:
        now = self.clock()
        return [
            RunResult.failed(i.name, reason, started_at=now, target=self.target) for i in invariants
        ]

    def learn(
        self, invariants: Sequence[Invariant], conn: psycopg.Connection[Any] | None = None
    ) -> None:
        """Ask the catalog about the names all of `invariants` use, together (LiveFence.learn),
        bounded by the shortest of their timeouts, on `conn` (one of the pool's when None).
        Only a head start: when it fails, each run asks for itself and meets the same
        failure there, where it is reported."""
        if not invariants:
            return
        texts = [unlisted(i.header.source, i.sql)[0] for i in invariants]
        timeout = min(i.timeout for i in invariants)
        settings = read_only_settings(timeout, self.database.lock_timeout, "invmon:fence")
        try:
            with (
                self._connection(conn) as on,
                self._in_flight(on),
                self._past_timeout(on, timeout, "the catalog's questions"),
                on.transaction(),
            ):
                on.execute(settings.as_bytes(on))
                self.fence.learn(on, texts)
        except (psycopg.Error, PoolTimeout, Unrunnable):
            return  # the runs ask, and say what went wrong

    @contextlib.contextmanager
    def _connection(
        self, conn: psycopg.Connection[Any] | None
    ) -> Iterator[psycopg.Connection[Any]]:
        """`conn` itself, or one of the pool's for the block's time."""
        if conn is not None:
            yield conn
            return
        with self._pool.connection() as pooled:
            yield pooled

    def _list_sources(self, invariant: Invariant) -> tuple[Bound, float | None]:
        """Its sources listed and bound (before a connection is taken: a listing may take
        a while), and the milliseconds listing took; (nothing, None) without sources."""
        sources = invariant.header.source
        if not sources:
            return NOTHING_BOUND, None
        clock = time.monotonic()
        bound, _ = listed_and_bound(sources, self.lister)
        return bound, (time.monotonic() - clock) * 1000

    def run_one(self, invariant: Invariant) -> RunResult:
        started = self.clock()
        with self._active_lock:
            interrupted = self._interrupted
        if interrupted:  # before its sources are listed too, which no cancel reaches
            return RunResult.failed(
                invariant.name, "not run: interrupted", started_at=started, target=self.target
            )
        clock = time.monotonic()
        listing_clock = time.monotonic()
        try:
            bound, listing_ms = self._list_sources(invariant)
        except ListingError as exc:
            # Keys are data of the store's: masked like a value of a row.
            return RunResult.failed(
                invariant.name,
                self._masker(invariant).text(str(exc)),
                started_at=started,
                duration_ms=(time.monotonic() - clock) * 1000,
                listing_ms=(time.monotonic() - listing_clock) * 1000,
                target=self.target,
            )
        attempts = 0
        held: list[float] = []  # each attempt's time on its connection
        while True:
            attempts += 1
            try:
                evaluation = self._evaluate(invariant, bound, held)
            except Refused as exc:
                error = f"refused by the read-only fence: {exc}"
            except Unrunnable as exc:
                error = str(exc)
            except _RETRYABLE as exc:
                if attempts <= self.database.recovery_conflict_retries:
                    backoff = self.database.retry_backoff.total_seconds() * 2 ** (attempts - 1)
                    self._sleep(backoff)
                    continue
                error = f"{describe_error(exc)} (gave up after {counted(attempts, 'attempt')})"
            except PoolTimeout:
                reason = self.probe() or "all connections busy"
                error = f"no database connection within the connect timeout: {reason}"
            except psycopg.Error as exc:
                # The database's message can quote a value of a row ("invalid input: …").
                error = self._masker(invariant).text(
                    explained(exc, invariant, self.target, self.database.lock_timeout)
                )
            except Exception as exc:
                # A fault on invmon's side (a value no loader reads, a bug): this run's error,
                # never an escape that ends `check` with a traceback, or leaves a daemon's
                # run unrecorded and its invariant silent. Its message may quote a row's
                # value, so it is masked, and the log gets the frames, not the message.
                error = self._masker(invariant).text(
                    f"invmon could not evaluate it: {type(exc).__name__}: {exc}"
                )
                log.error(
                    "evaluating %s failed inside invmon: %s\n%s",
                    invariant.name,
                    error,
                    "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
                    extra={"fields": {"invariant": invariant.name}},
                )
            else:
                return RunResult.counted(
                    invariant.name,
                    evaluation.count,
                    evaluation.columns,
                    evaluation.rows,
                    started_at=started,
                    duration_ms=(time.monotonic() - clock) * 1000,
                    attempts=attempts,
                    keys=evaluation.keys if self.track_keys else {},
                    # Dropped (track_keys 0), the keys are complete only when none offend.
                    keys_complete=evaluation.keys_complete
                    and (bool(self.track_keys) or not evaluation.count),
                    keyed_by=keyed_by(invariant.key, evaluation.columns),
                    cut_values=evaluation.cut_values,
                    cell_bytes=evaluation.cell_bytes,
                    rows_withheld=evaluation.rows_withheld,
                    target=self.target,
                    listing_ms=listing_ms,
                    held_ms=max(held, default=None),
                )
            return RunResult.failed(
                invariant.name,
                error,
                started_at=started,
                duration_ms=(time.monotonic() - clock) * 1000,
                attempts=attempts,
                target=self.target,
                listing_ms=listing_ms,
                held_ms=max(held, default=None),
            )

    @contextlib.contextmanager
    def _in_flight(
        self,
        conn: psycopg.Connection[Any],
        name: str | None = None,
        held: list[float] | None = None,
    ) -> Iterator[None]:
        """`conn` is cancelled by cancel_all while inside; with `name`, that invariant's
        attempt holds it (held_for), and `held` gets how long, in ms."""
        began = self._monotonic()
        with self._active_lock:
            if self._interrupted:  # checked where cancel_all would find it: none slips by
                raise Unrunnable("not run: interrupted")
            self._active.add(conn)
            if name is not None:
                self._holding[name] = began
        try:
            yield
        finally:
            with self._active_lock:
                self._active.discard(conn)
                if name is not None:
                    self._holding.pop(name, None)
            if held is not None:
                ended = self._monotonic()
                # At least 0: the supervisor stamps a pause's end at its first look after,
                # which can come after this thread resumed.
                held.append(max(0.0, ended - self._resumed(began)) * 1000)

    def held_for(self, name: str) -> timedelta | None:
        """How long `name`'s attempt in flight has held its connection, counted from the
        process's latest pause since, if any; None when it holds none: not started, waiting
        for the replica gate or a connection, or done."""
        with self._active_lock:
            began = self._holding.get(name)
        if began is None:
            return None
        start = self._resumed(began)
        return timedelta(seconds=max(0.0, self._monotonic() - start))

    def _evaluate(
        self, invariant: Invariant, bound: Bound = NOTHING_BOUND, held: list[float] | None = None
    ) -> Evaluation:
        with (
            self._borrowed() as conn,
            self._in_flight(conn, invariant.name, held),
            self._past_timeout(conn, invariant.timeout, "the query"),
        ):
            return execute(
                conn,
                invariant,
                sample=invariant.sample,
                track=self.track_keys,
                limits=self.limits,
                masker=self._masker(invariant),
                lock_timeout=self.database.lock_timeout,
                live_fence=self.fence,
                bound=bound,
                temp_file_limit=self.database.temp_file_limit,
                keys_first=BY_ESTIMATES if self.database.keys_first else NEVER_KEYS_FIRST,
                stopping=self.interrupted,
            )

    def _masker(self, invariant: Invariant) -> Masker:
        return self.redaction.masker(invariant.header.redact, invariant.header.show)

    def vet(self, invariants: Sequence[Invariant]) -> dict[str, list[Problem]]:
        """The fence's word on each invariant against this database, before it is scheduled:
        {name: problems} for those refused. Empty when the database cannot be reached (each
        run is judged again anyway)."""
        refused: dict[str, list[Problem]] = {}
        if not invariants or self.probe() is not None:  # a refused port fails at once
            return {}
        try:
            self.learn(invariants)
            # Bounded as learn is: the catalog's answers can wait on a lock (pg_get_viewdef
            # on a view a migration holds), and vet runs where a reload or a start waits.
            shortest = min(i.timeout for i in invariants)
            settings = read_only_settings(shortest, self.database.lock_timeout, "invmon:fence")
            with (
                self._pool.connection() as conn,
                self._past_timeout(conn, shortest, "the fence's questions"),
                conn.transaction(),
            ):
                conn.execute(settings.as_bytes(conn))
                for inv in invariants:
                    # With sources, the text judged is the one sent: their CTEs before it.
                    text, _, user_line = unlisted(inv.header.source, inv.sql)
                    try:
                        self.fence.refuse_unless_allowed(conn, text, inv, user_line)
                    except Refused as exc:
                        refused[inv.name] = exc.problems
        except (psycopg.Error, PoolTimeout):
            return {}
        return refused


def interrupt_all(runners: Sequence[Runner], within: float, cut: bool = True) -> int:
    """Every runner interrupted (Runner.interrupt), asked again every 50 ms while a run is
    still in flight, `within` seconds at most: a run whose cancel came between two of its
    statements (a reviewer's Ctrl-C, early in `check`) sent the next and ran on to its
    statement timeout. How many runs were in flight at first."""
    deadline = time.monotonic() + within
    first = left = sum(r.interrupt() for r in runners)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)  # a run sends its next statement within a round trip
        left = sum(r.interrupt() for r in runners)
    if left and cut:
        # Cancels the server did not take (a server that stopped answering): the waits are
        # cut, so no thread is left waiting on it for its statement timeout. (The daemon's
        # stop leaves them, and says it stopped with runs still in flight: exit 1.)
        for runner in runners:
            runner.deadlines.cut_all(
                f"an interrupt whose cancel the server did not take in {within:g}s"
            )
    return first
