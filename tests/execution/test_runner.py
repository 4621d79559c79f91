"""Running invariants against a real PostgreSQL: exact counts, bounded samples, and every
failure reported as `error` with the database's message, never as `ok` or zero."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from helpers import active_runs, invariant, sql, wait_for
from psycopg.conninfo import conninfo_to_dict

from monitor.config import DatabaseConfig
from monitor.execution.runner import Runner
from monitor.fence.allowances import Allowances
from monitor.invariants.header import InvariantHeader


def _trusting(*functions: str) -> Allowances:
    """User functions standing in for slow or failing queries: trusted by name, since the
    fence refuses code that is not PostgreSQL's own otherwise."""
    return Allowances(functions=frozenset(functions))


@pytest.fixture
def runner(database: str) -> Iterator[Runner]:
    with Runner(database, concurrency=2) as opened:
        yield opened


def test_the_exact_count_is_returned_with_only_a_sample_of_rows_ordered_by_key(
    database: str, runner: Runner
) -> None:
    sql(
        database,
        "CREATE TABLE t (id int, note text); "
        "INSERT INTO t SELECT g, 'n' || g FROM generate_series(1000, 1, -1) g",
    )
    result = runner.run_one(invariant("big", "SELECT id, note FROM t", key=("id",), sample=3))
    assert (result.status, result.count, result.truncated) == ("violated", 1000, True)
    assert result.columns == ["id", "note"]
    assert result.rows == [
        {"id": 1, "note": "n1"},
        {"id": 2, "note": "n2"},
        {"id": 3, "note": "n3"},
    ]


def test_a_query_returning_nothing_holds_with_count_zero(database: str, runner: Runner) -> None:
    sql(database, "CREATE TABLE t (id int)")
    result = runner.run_one(invariant("empty", "SELECT id FROM t"))
    assert (result.status, result.count, result.rows, result.error) == ("ok", 0, [], None)


def test_sample_zero_still_counts_every_row(database: str, runner: Runner) -> None:
    result = runner.run_one(invariant("s0", "SELECT g FROM generate_series(1, 7) g", sample=0))
    assert (result.status, result.count, result.rows) == ("violated", 7, [])


def test_a_million_offending_rows_are_counted_exactly(runner: Runner) -> None:
    result = runner.run_one(
        invariant("million", "SELECT g AS id FROM generate_series(1, 1000000) g", ("id",), 2)
    )
    assert (result.count, result.rows) == (1000000, [{"id": 1}, {"id": 2}])


def test_a_query_slower_than_its_timeout_is_an_error(runner: Runner) -> None:
    slow = "SELECT g FROM generate_series(1, 200000000) g WHERE g < 0"
    result = runner.run_one(invariant("slow", slow, timeout=0.2))
    assert (result.status, result.count) == ("error", None)
    assert result.error == (
        "canceling statement due to statement timeout: the query ran past its timeout, 200ms "
        "(defaults.timeout in the config: its header has no `timeout:`); raise it with "
        "`timeout:` in the header or defaults.timeout, up to targets.default.statement_timeout "
        "when that is set"
    )


def test_a_timeout_from_the_header_names_it_and_the_target_s_ceiling(database: str) -> None:
    slow = "SELECT g FROM generate_series(1, 200000000) g WHERE g < 0"
    timed = dataclasses.replace(
        invariant("slow", slow, timeout=0.3),
        header=InvariantHeader(description="slow holds", timeout="300ms"),
    )
    with Runner(database, target="payments") as runner:
        result = runner.run_one(timed)
    assert result.error == (
        "canceling statement due to statement timeout: the query ran past its timeout, 300ms "
        "(`timeout:` in its header); raise it there, up to targets.payments.statement_timeout "
        "when that is set"
    )


def test_a_missing_table_is_an_error_with_the_database_message(runner: Runner) -> None:
    result = runner.run_one(invariant("missing", "SELECT * FROM no_such_table"))
    assert (result.status, result.count) == ("error", None)
    assert result.error == (
        "relation \"no_such_table\" does not exist: not in the database of target 'default'; "
        "check the invariant's `target:` and that target's dsn; `invmon lint --schema FILE` "
        "checks its names against the schema offline"
    )
    wrong = runner.run_one(invariant("wrong", "SELECT n.id FROM (SELECT 1 AS id) AS m"))
    assert wrong.error == 'missing FROM-clause entry for table "n"'  # the query's own mistake


def test_a_refused_connection_makes_every_invariant_an_error() -> None:
    dsn = "postgresql://postgres@127.0.0.1:9/postgres"
    with Runner(dsn, database=DatabaseConfig(connect_timeout=timedelta(seconds=2))) as runner:
        results = runner.run_all([invariant("a", "SELECT 1"), invariant("b", "SELECT 2")])
    assert [(r.invariant, r.status, r.count) for r in results] == [
        ("a", "error", None),
        ("b", "error", None),
    ]
    assert all(r.error and r.error.startswith("cannot connect: ") for r in results)
    assert all("refused" in (r.error or "") for r in results)


def test_one_failing_invariant_does_not_stop_the_others(database: str, runner: Runner) -> None:
    sql(database, "CREATE TABLE t (id int); INSERT INTO t VALUES (1), (2)")
    results = runner.run_all(
        [
            invariant("first", "SELECT id FROM t", ("id",)),
            invariant("broken", "SELECT nope FROM t"),
            invariant("last", "SELECT id FROM t WHERE id > 5"),
        ]
    )
    assert [(r.invariant, r.status, r.count) for r in results] == [
        ("first", "violated", 2),
        ("broken", "error", None),
        ("last", "ok", 0),
    ]


def test_a_function_that_lies_about_writing_is_stopped_by_the_read_only_transaction(
    database: str,
) -> None:
    # Declared STABLE and trusted by name (user code is refused otherwise), so it passes the
    # fence; it calls a VOLATILE writer (PostgreSQL refuses an INSERT written in a STABLE
    # function itself). READ ONLY stops it.
    sql(
        database,
        "CREATE TABLE t (id int);"
        " CREATE FUNCTION writer() RETURNS int LANGUAGE sql"
        " AS 'INSERT INTO t VALUES (1) RETURNING id';"
        " CREATE FUNCTION sneaky() RETURNS int LANGUAGE sql STABLE AS 'SELECT writer()'",
    )
    with Runner(database, allow=_trusting("sneaky")) as runner:
        result = runner.run_one(invariant("sneaky", "SELECT sneaky() AS id"))
    assert result.status == "error"
    assert result.error == "cannot execute INSERT in a read-only transaction"
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_each_run_is_named_and_bounded_in_the_session(runner: Runner) -> None:
    sql = (
        "SELECT current_setting('application_name') AS app,"
        " current_setting('transaction_read_only') AS ro,"
        " current_setting('statement_timeout') AS st,"
        " current_setting('lock_timeout') AS lt"
    )
    result = runner.run_one(invariant("named", sql, timeout=12))
    assert result.rows == [{"app": "invmon:named", "ro": "on", "st": "12s", "lt": "5s"}]


def test_a_table_locked_by_someone_else_fails_fast_on_the_lock_timeout(database: str) -> None:
    sql(database, "CREATE TABLE t (id int)")
    config = DatabaseConfig(lock_timeout=timedelta(milliseconds=200))
    with psycopg.connect(database) as holder, Runner(database, database=config) as runner:
        holder.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
        result = runner.run_one(invariant("locked", "SELECT id FROM t"))
        holder.rollback()
    assert (result.status, result.error) == (
        "error",
        "canceling statement due to lock timeout: another session held a lock the query needs "
        "for longer than the lock timeout, 0.2s (database.lock_timeout): a migration, or a "
        "transaction left open on the table (in a test, often the test's own, not yet "
        "committed)",
    )


def test_a_lock_wait_as_long_as_the_timeout_is_said_to_be_one(database: str) -> None:
    """With a timeout no longer than database.lock_timeout, the statement timeout fired
    first, and a run blocked by a lock all along was told to raise its timeout."""
    sql(database, "CREATE TABLE t (id int)")
    with psycopg.connect(database) as holder, Runner(database) as runner:
        holder.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
        result = runner.run_one(invariant("locked", "SELECT id FROM t", timeout=2))
        shown = runner.run_one(
            invariant("shown", "SELECT current_setting('lock_timeout') AS lt", timeout=2)
        )
        holder.rollback()
    assert (result.status, result.error) == (
        "error",
        "canceling statement due to lock timeout: another session held a lock the query needs "
        "for longer than the lock timeout, 1.8s (90% of the query's timeout, 2s; "
        "database.lock_timeout, 5s, is longer): a migration, or a transaction left open on the "
        "table (in a test, often the test's own, not yet committed)",
    )
    assert shown.rows == [{"lt": "1800ms"}]


RECOVERY_CONFLICT = """
CREATE OR REPLACE FUNCTION replica_rows() RETURNS SETOF int LANGUAGE plpgsql STABLE AS $$
BEGIN
  RAISE EXCEPTION 'canceling statement due to conflict with recovery'
    USING ERRCODE = 'serialization_failure';
END $$"""
RECOVERED = (
    "CREATE OR REPLACE FUNCTION replica_rows() RETURNS SETOF int LANGUAGE sql STABLE AS 'SELECT 1'"
)


def test_a_recovery_conflict_is_retried_with_backoff_then_reported(database: str) -> None:
    sql(database, RECOVERY_CONFLICT)
    slept: list[float] = []
    config = DatabaseConfig(recovery_conflict_retries=3, retry_backoff=timedelta(seconds=1))
    trusted = _trusting("replica_rows")
    with Runner(database, database=config, sleep=slept.append, allow=trusted) as runner:
        result = runner.run_one(invariant("conflict", "SELECT * FROM replica_rows() AS r"))
    assert slept == [1.0, 2.0, 4.0]
    assert (result.status, result.attempts) == ("error", 4)
    assert result.error == (
        "canceling statement due to conflict with recovery (gave up after 4 attempts)"
    )


def test_a_recovery_conflict_that_clears_gives_the_real_result(database: str) -> None:
    sql(database, RECOVERY_CONFLICT)
    slept: list[float] = []

    def recover_while_sleeping(seconds: float) -> None:
        slept.append(seconds)
        sql(database, RECOVERED)

    trusted = _trusting("replica_rows")
    with Runner(database, sleep=recover_while_sleeping, allow=trusted) as runner:
        result = runner.run_one(invariant("conflict", "SELECT * FROM replica_rows() AS r"))
    assert (result.status, result.count, result.attempts, slept) == ("violated", 1, 2, [1.0])


def test_database_values_become_json_safe_values(runner: Runner) -> None:
    sql = """
        SELECT 12.50::numeric(12, 2) AS amount,
               '2026-01-02 03:04:05+00'::timestamptz AS at,
               '2026-01-02'::date AS day,
               'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS id,
               ARRAY[1, 2, 3] AS ids,
               '{"k": [1, null, "x"]}'::jsonb AS doc,
               '\\x0102'::bytea AS raw,
               interval '90 minutes' AS lasted,
               NULL::text AS nothing,
               1 AS id"""
    result = runner.run_one(invariant("types", sql))
    assert result.rows == [
        {
            "amount": "12.50",
            "at": "2026-01-02T03:04:05+00:00",
            "day": "2026-01-02",
            "id": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "ids": [1, 2, 3],
            "doc": {"k": [1, None, "x"]},
            "raw": "AQI=",
            "lasted": "01:30:00",  # as PostgreSQL writes it
            "nothing": None,
            "id_2": 1,
        }
    ]


def test_runs_share_a_bounded_pool(database: str) -> None:
    """Six slow runs with concurrency 2: each counts the invmon queries active beside it."""
    # pg_sleep is VOLATILE, so the fence refuses it in an invariant; a STABLE wrapper (a
    # function that understates what it does, trusted by name) stands in for a slow query.
    sql(
        database,
        "CREATE FUNCTION slow() RETURNS int LANGUAGE sql STABLE AS $$SELECT 1 FROM pg_sleep(0.3)$$",
    )
    query = (
        "SELECT (SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name LIKE 'invmon:%' AND state = 'active'"
        " AND datname = current_database()) AS running,"
        " (SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'invmon%'"
        " AND datname = current_database()) AS connections"
        " FROM slow()"
    )
    with Runner(database, concurrency=2, allow=_trusting("slow")) as runner:
        results = runner.run_all([invariant(f"inv{i}", query) for i in range(6)])
    assert [r.invariant for r in results] == [f"inv{i}" for i in range(6)]
    assert max(r.rows[0]["running"] for r in results) == 2
    # The round's first connection runs invariants too: never a third beside the pool's.
    assert max(r.rows[0]["connections"] for r in results) == 2


def test_a_round_whose_first_connection_breaks_goes_on_with_the_pools(database: str) -> None:
    """The first connection (run_all's, which runs invariants too) is cut while it runs
    one: that run is an error with the reason, and the rest run on the pool's."""
    sql(
        database,
        "CREATE FUNCTION slow() RETURNS int LANGUAGE sql STABLE AS $$SELECT 1 FROM pg_sleep(5)$$",
    )
    cut = invariant("cut", "SELECT slow() AS x")
    rest = [invariant(f"then{i}", "SELECT 1 AS x") for i in range(3)]
    runner = Runner(database, concurrency=1, allow=_trusting("slow"))
    with runner, ThreadPoolExecutor(1) as pool:
        running = pool.submit(runner.run_all, [cut, *rest])
        wait_for(lambda: active_runs(database, "cut", "%invmon_n%"), 30, "the slow run")
        sql(
            database,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'invmon:cut' AND datname = current_database()",
        )
        results = running.result(timeout=60)
    assert [(r.invariant, r.status, r.count) for r in results] == [
        ("cut", "error", None),
        *[(f"then{i}", "violated", 1) for i in range(3)],
    ]
    assert "terminat" in (results[0].error or ""), results[0].error


def test_rows_with_infinite_or_far_future_dates_are_still_counted(runner: Runner) -> None:
    sql_text = (
        "SELECT 'infinity'::timestamptz AS at, '-infinity'::timestamp AS since,"
        " '20000-01-01'::date AS day"
    )
    result = runner.run_one(invariant("dates", sql_text))
    assert (result.status, result.count) == ("violated", 1)
    assert result.rows == [{"at": "infinity", "since": "-infinity", "day": "20000-01-01"}]
    # Times and intervals PostgreSQL holds and Python's types cannot: their text, as sent.
    times = (
        "SELECT '24:00:00'::time AS t, '24:00:00+02'::timetz AS tz,"
        " interval '2147483647 days' AS i, ARRAY['24:00:00'::time] AS ts"
    )
    result = runner.run_one(invariant("times", times))
    assert (result.status, result.count, result.error) == ("violated", 1, None)
    assert result.rows == [
        {"t": "24:00:00", "tz": "24:00:00+02", "i": "2147483647 days", "ts": ["24:00:00"]}
    ]


def test_one_invariant_cannot_change_the_session_another_one_gets(database: str) -> None:
    # set_config is VOLATILE and refused by the fence; a function that lies (STABLE), once
    # trusted by name, gets past it, and the pool's reset must still undo what it did.
    sql(
        database,
        "CREATE FUNCTION poison() RETURNS text LANGUAGE sql STABLE "
        "AS $$SELECT set_config('search_path', 'decoy', false)$$",
    )
    with Runner(database, concurrency=1, allow=_trusting("poison")) as runner:
        poison = runner.run_one(invariant("poison", "SELECT poison() AS s"))
        after = runner.run_one(invariant("after", "SELECT current_setting('search_path') AS p"))
    assert poison.status == "violated"
    assert after.rows == [{"p": '"$user", public'}]


def test_a_text_with_two_statements_is_never_run_as_two(database: str) -> None:
    """Even if the fence's parser and the server's ever disagreed, the executor sends one
    statement through the extended protocol, where a second one is an error."""
    from monitor.execution.execute import send_one_statement

    sql(database, "CREATE TABLE t (id int)")
    with psycopg.connect(database, autocommit=True) as conn, conn.cursor() as cur:
        with pytest.raises(psycopg.errors.SyntaxError, match="multiple commands"):
            send_one_statement(cur, "SELECT 1; INSERT INTO t VALUES (1)")
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_backslashes_are_read_as_the_fence_reads_them_whatever_the_database_default(
    database: str, runner: Runner
) -> None:
    """With standard_conforming_strings off, 'x\\'' ends elsewhere and what follows would be
    code the fence saw as part of a string; the executor turns it on for every run."""
    name = conninfo_to_dict(database)["dbname"]
    sql(database, f'ALTER DATABASE "{name}" SET standard_conforming_strings = off')
    sql(database, f"ALTER DATABASE \"{name}\" SET client_encoding = 'SJIS'")
    text = "SELECT 'x\\'' AS a, 1 AS b --'"
    result = runner.run_one(invariant("backslash", text))
    assert (result.status, result.columns, result.rows) == (
        "violated",
        ["?column?"],
        [{"?column?": "x\\' AS a, 1 AS b --"}],
    )


def test_a_connection_in_another_encoding_is_refused_before_sending(database: str) -> None:
    from monitor.execution.execute import LiveFence, Refused, execute

    with (
        psycopg.connect(database, autocommit=True, client_encoding="SJIS") as conn,
        pytest.raises(Refused, match="client_encoding is shift_jis, not UTF8"),
    ):
        execute(
            conn,
            invariant("sjis", "SELECT 1 AS one"),
            sample=1,
            lock_timeout=timedelta(seconds=1),
            live_fence=LiveFence(),
        )


def test_the_longest_timeout_a_header_or_the_defaults_may_give_runs_and_one_past_it_is_refused(
    runner: Runner,
) -> None:
    """A run's idle limit is its timeout plus IDLE_MARGIN, and PostgreSQL's limits are 32-bit
    counts of milliseconds: `timeout: 2147483s` passed lint and then every run failed on
    `idle_in_transaction_session_timeout`, and so did `defaults: {timeout: 30d}`."""
    from monitor.durations import MAX_STATEMENT_TIMEOUT, statement_timeout
    from monitor.invariants.loader import Defaults

    longest = f"{int(MAX_STATEMENT_TIMEOUT.total_seconds() * 1000)}ms"
    assert statement_timeout(longest) == MAX_STATEMENT_TIMEOUT
    result = runner.run_one(
        invariant(
            "longest", "SELECT 1 AS id WHERE false", timeout=MAX_STATEMENT_TIMEOUT.total_seconds()
        )
    )
    assert (result.status, result.count, result.error) == ("ok", 0, None)
    one_past = f"{int(MAX_STATEMENT_TIMEOUT.total_seconds() * 1000) + 1}ms"
    for header_or_default in (
        lambda: InvariantHeader(description="x", timeout=one_past),
        lambda: Defaults.model_validate({"timeout": "2147483s"}),
        lambda: Defaults.model_validate({"timeout": "30d"}),
    ):
        with pytest.raises(ValueError, match="longer than PostgreSQL allows a statement to run"):
            header_or_default()


def test_vetting_against_a_view_a_migration_holds_locked_ends_within_the_lock_timeout(
    database: str,
) -> None:
    """The catalog's answer on a view (its definition) waits on the view's lock: a start or a
    reload vetting the invariants waited for as long as a migration held it, SIGTERM
    unanswered. Bounded, vet gives up (each run is judged again anyway)."""
    with psycopg.connect(database, autocommit=True) as admin:
        admin.execute(
            "DROP VIEW IF EXISTS vet_locked_view; CREATE VIEW vet_locked_view AS SELECT 1 AS id"
        )
    migration = psycopg.connect(database)
    try:
        migration.execute("LOCK TABLE vet_locked_view IN ACCESS EXCLUSIVE MODE")
        config = DatabaseConfig(lock_timeout=timedelta(milliseconds=300))
        reads = invariant("reads_view", "SELECT id FROM vet_locked_view WHERE id < 0")
        vetted: list[dict[str, Any]] = []
        with Runner(database, database=config) as runner:
            worker = threading.Thread(
                target=lambda: vetted.append(runner.vet([reads])), name="test-vet", daemon=True
            )
            worker.start()
            worker.join(60)  # far past the lock timeout; the old code waited for the lock
            ended = not worker.is_alive()
    finally:
        migration.rollback()
        migration.close()
    assert (ended, vetted) == (True, [{}])


def test_json_values_are_shown_as_the_database_holds_them(runner: Runner) -> None:
    """json.loads alone turned 1e400 into infinity, 1.10 into 1.1, and dropped the first of
    two equal keys, which a json value keeps. Such a value is its text; one Python shows
    exactly keeps its structure."""
    text = (
        'SELECT \'{"a":1e400}\'::json AS huge, \'{"a":1,"a":2}\'::json AS twice,'
        ' \'1.10\'::json AS digits, \'{"k": [1, null, "x"], "n": 0.5}\'::jsonb AS doc,'
        " '{\"n\": 1.10}'::jsonb AS kept, ARRAY['{\"a\":1e400}'::json] AS listed"
    )
    result = runner.run_one(invariant("json", text))
    assert (result.status, result.count, result.error) == ("violated", 1, None)
    assert result.rows == [
        {
            "huge": '{"a":1e400}',
            "twice": '{"a":1,"a":2}',
            "digits": "1.10",
            "doc": {"k": [1, None, "x"], "n": 0.5},
            "kept": '{"n": 1.10}',
            "listed": ['{"a":1e400}'],
        }
    ]


def test_keys_not_tracked_are_no_complete_set_of_keys(database: str) -> None:
    """track_keys 0 (the daemon's daemon.track_keys, or `check`): no keys come back, so the
    run cannot say which rows offend, and says so, unless none does."""
    with Runner(database, track_keys=0) as runner:
        some = runner.run_one(invariant("some", "SELECT g AS id FROM generate_series(1, 3) g"))
        none = runner.run_one(invariant("none", "SELECT 1 AS id WHERE false"))
    assert (some.count, some.keys, some.keys_complete) == (3, {}, False)
    assert (none.count, none.keys, none.keys_complete) == (0, {}, True)


def test_a_pooled_connection_the_server_ended_is_replaced_not_a_failed_run(database: str) -> None:
    """A replica restarted, or a failover: the server ends the pool's idle connections. The
    next run failed ("terminating connection due to administrator command"), every
    invariant of the target with it, for a whole round."""
    with Runner(database, concurrency=1) as runner:
        first = runner.run_one(invariant("once", "SELECT 1 AS x"))

        def ended() -> bool:
            # Again each time: one the pool was still opening when it was asked (it fills
            # itself up in the background) is ended too.
            sql(
                database,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'invmon' AND datname = current_database()",
            )
            return not _invmon_sessions(database)

        wait_for(ended, 30, "the pool's connections to end")
        again = runner.run_one(invariant("again", "SELECT 1 AS x"))
    assert [(r.status, r.count, r.error) for r in (first, again)] == [
        ("violated", 1, None),
        ("violated", 1, None),
    ]


def _invmon_sessions(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'invmon%'"
            " AND datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_database_whose_datestyle_is_not_iso_is_still_read(database: str) -> None:
    # psycopg reads dates and times from ISO output only: a database set to 'Postgres, DMY'
    # made every run with a timestamp in it fail inside invmon.
    name = conninfo_to_dict(database)["dbname"]
    sql(database, f"ALTER DATABASE {name} SET datestyle = 'Postgres, DMY'")
    query = (
        "SELECT '2026-02-01 10:00:00+00'::timestamptz AS at, '03/04/2026'::date AS d,"
        " current_setting('DateStyle') AS style"
    )
    with Runner(database) as fresh:
        result = fresh.run_one(invariant("dates", query))
    assert (result.status, result.error) == ("violated", None)
    # The query's own literals are still read in the database's day/month order.
    assert result.rows == [
        {"at": "2026-02-01T10:00:00+00:00", "d": "2026-04-03", "style": "ISO, DMY"}
    ]


def test_a_fault_inside_invmon_is_that_run_s_error_and_the_others_still_run(
    database: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A value no loader can read (a fault injected here as a loader that raises, as
    psycopg's own did for a non-ISO DateStyle) is the run's error, masked like a row's
    value, with the frames in the log: never an exception out of run_one."""
    from psycopg.adapt import Loader

    from monitor.execution import runner as runner_module

    class Unreadable(Loader):
        def load(self, data: Any) -> Any:
            raise NotImplementedError(f"cannot read {bytes(data).decode()!r}")

    configure = runner_module._configure

    def with_a_fault(conn: psycopg.Connection) -> None:
        configure(conn)
        conn.adapters.register_loader("uuid", Unreadable)

    monkeypatch.setattr(runner_module, "_configure", with_a_fault)
    with Runner(database) as faulty:
        broken = faulty.run_one(
            invariant("ids", "SELECT 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS id")
        )
        fine = faulty.run_one(invariant("fine", "SELECT 1 AS n"))
    assert (broken.status, broken.count) == ("error", None)
    assert broken.error == (
        "invmon could not evaluate it: NotImplementedError: cannot read "
        "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"
    )
    assert (fine.status, fine.count) == ("violated", 1)
    [record] = [r for r in caplog.records if r.name == "invmon.runner"]
    assert record.getMessage().startswith("evaluating ids failed inside invmon: invmon could")
    assert "in load" in record.getMessage()  # the frames, down to the loader


def test_a_timestamptz_reads_the_same_whatever_the_session_time_zone(database: str) -> None:
    """From the message-truth review: keyed on a timestamptz, the database's TimeZone set
    to Asia/Kathmandu between two runs made one unchanged row read as a new one and a gone
    one (+05:45 against +00:00). An instant is said in UTC."""
    name = conninfo_to_dict(database)["dbname"]
    query = "SELECT '2026-01-01 00:00:00+00'::timestamptz AS at"
    seen = []
    for zone in ("UTC", "Asia/Kathmandu", "America/St_Johns"):
        sql(database, f"ALTER DATABASE {name} SET timezone = '{zone}'")
        with Runner(database, track_keys=10) as fresh:
            result = fresh.run_one(invariant("at", query, key=("at",)))
        seen.append((result.rows, sorted(result.keys)))
    assert seen == [([{"at": "2026-01-01T00:00:00+00:00"}], ['["2026-01-01T00:00:00+00:00"]'])] * 3
