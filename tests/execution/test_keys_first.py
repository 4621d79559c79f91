"""Reading an invariant's keys first (query.keys_first_query): the count and the keys from
the key columns alone, the sample's rows found again by their keys. Whatever the rows, a
run so read says exactly what a run of the bounded query says; a row not found again, or
found twice, has the run read again whole."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import cli, invariant, wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.config import DatabaseConfig
from monitor.execution.execute import LiveFence, execute, register_loaders
from monitor.execution.offending import DEFAULT_ROW_LIMITS, Evaluation, RowLimits
from monitor.execution.query import (
    ALWAYS_KEYS_FIRST,
    BY_ESTIMATES,
    NEVER_KEYS_FIRST,
    Column,
    KeysFirst,
    keys_first_applies,
    keys_first_query,
    plan_cost,
)
from monitor.execution.runner import Runner

READ_FIRST = "read its keys first"
READ_AGAIN = "read again whole"


@pytest.fixture(scope="module")
def conn(fence_database: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection whose tables each test makes in a transaction it rolls back."""
    with psycopg.connect(fence_database) as connection:
        register_loaders(connection)
        connection.autocommit = True
        yield connection


def run(
    conn: psycopg.Connection[Any],
    sql: str,
    key: tuple[str, ...],
    policy: KeysFirst,
    *,
    sample: int = 3,
    track: int = 10,
    limits: RowLimits = DEFAULT_ROW_LIMITS,
    fence: LiveFence | None = None,
    timeout: float = 30,
    stopping: bool = False,
) -> Evaluation:
    return execute(
        conn,
        invariant("keyed", sql, key=key, sample=sample, timeout=timeout),
        sample=sample,
        track=track,
        lock_timeout=timedelta(seconds=5),
        live_fence=fence or LiveFence(),
        keys_first=policy,
        limits=limits,
        stopping=lambda: stopping,
    )


def both(
    conn: psycopg.Connection[Any], sql: str, key: tuple[str, ...], **kwargs: Any
) -> tuple[Evaluation, Evaluation]:
    return (
        run(conn, sql, key, ALWAYS_KEYS_FIRST, **kwargs),
        run(conn, sql, key, NEVER_KEYS_FIRST, **kwargs),
    )


ESTIMATES = "the planner estimates"


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the runs said of how they were read, but for the planner's estimates."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "invmon.execute" and ESTIMATES not in r.getMessage()
    ]


def said_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return said(caplog)


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the runs said of how they were read (each message's clause after the name)."""
    return [message.split(": ")[1] for message in logged(caplog)]


def asked(caplog: pytest.LogCaptureFixture) -> int:
    """How many times the planner was asked for its estimates."""
    return sum(ESTIMATES in r.getMessage() for r in caplog.records if r.name == "invmon.execute")


def make(conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]]) -> None:
    """refunds(id, dispute, note, amount): the shape of duplicate_settled_refunds."""
    conn.execute(
        "DROP TABLE IF EXISTS kf_refunds; "
        "CREATE TABLE kf_refunds (id int8, dispute int8, note text, amount numeric)"
    )
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO kf_refunds VALUES (%s, %s, %s, %s)", rows)


GROUPED = """
SELECT dispute, count(*) AS refunds, sum(amount) AS total,
       array_agg(note ORDER BY id) AS notes, max(note) AS longest
FROM kf_refunds GROUP BY dispute HAVING count(*) > 1
"""


def test_a_grouped_invariant_read_keys_first_says_what_the_bounded_query_says(
    conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "invmon.execute")
    rows = [(i, i // 2, f"note {i} " + "x" * (i * 37 % 400), i * 1.25) for i in range(40)]
    make(conn, [*rows, (99, 7, None, None)])
    limits = RowLimits(cell_bytes=64)
    first, whole = both(conn, GROUPED, ("dispute",), sample=4, track=30, limits=limits)
    assert first == whole
    assert first.count == 20 and len(first.rows) == 4 and len(first.keys) == 20
    assert first.cut_values == whole.cut_values > 0  # long notes, cut by the database alike
    assert [r["dispute"] for r in first.rows] == [0, 1, 2, 3]
    assert [r["refunds"] for r in first.rows] == [2, 2, 2, 2]
    assert said(caplog) == [READ_FIRST]


def test_a_key_of_two_columns_and_every_kind_of_key_type(
    conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "invmon.execute")
    conn.execute(
        "DROP TABLE IF EXISTS kf_kinds; CREATE TABLE kf_kinds AS SELECT i, "
        "(i % 3 = 0) AS b, i::int2 AS s, ('k' || i)::varchar AS v, ('c' || i)::char(5) AS c,"
        " DATE '2026-01-01' + i AS d, TIMESTAMP '2026-01-01' + i * interval '1h' AS ts,"
        " TIMESTAMPTZ '2026-01-01 00:00+00' + i * interval '1s' AS tz, (i / 7.0)::numeric AS n,"
        " md5(i::text)::uuid AS u, i::oid AS o, repeat('z', i) AS payload"
        " FROM generate_series(1, 12) AS i"
    )
    for key in (("b", "s"), ("v",), ("c",), ("d", "ts"), ("tz",), ("n",), ("u",), ("o",)):
        first, whole = both(conn, "SELECT * FROM kf_kinds", key, sample=5)
        assert first == whole, key
        assert first.count == 12 and len(first.rows) == 5, key
    assert said(caplog) == [READ_FIRST] * 8


@pytest.mark.parametrize(
    "rows, why",
    [
        ([(1, None, "a", 1), (2, None, "b", 2), (3, 5, "c", 3), (4, 5, "d", 4)], "a NULL key"),
        ([(1, 5, "a", 1), (2, 5, "b", 2), (3, 6, "c", 3)], "a key two rows share"),
    ],
)
def test_a_row_not_found_again_or_found_twice_has_the_run_read_again_whole(
    conn: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
    rows: list[tuple[Any, ...]],
    why: str,
) -> None:
    """Read keys first, a NULL key finds no row again (NULL = NULL is not true), and a
    shared key finds both rows for each: the sample would have shown NULLs, or one row twice,
    where the database held other values."""
    caplog.set_level(logging.DEBUG, "invmon.execute")
    make(conn, rows)
    sql = "SELECT dispute, id, note FROM kf_refunds"
    first, whole = both(conn, sql, ("dispute",))
    assert first == whole, why
    assert first.count == len(rows)
    assert said(caplog) == [READ_AGAIN]


def test_a_text_read_again_whole_is_read_whole_for_an_hour(
    conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Not twice at every run: its keys are tried first again an hour later (the NULL key
    may have been fixed)."""
    caplog.set_level(logging.DEBUG, "invmon.execute")
    make(conn, [(1, None, "a", 1), (2, 5, "b", 2)])
    now = [1000.0]
    fence = LiveFence(clock=lambda: now[0])
    sql = "SELECT dispute, note FROM kf_refunds"
    counts = [run(conn, sql, ("dispute",), ALWAYS_KEYS_FIRST, fence=fence).count]
    now[0] += 3599
    counts.append(run(conn, sql, ("dispute",), ALWAYS_KEYS_FIRST, fence=fence).count)
    assert said(caplog) == [READ_AGAIN]
    conn.execute("UPDATE kf_refunds SET dispute = 4 WHERE dispute IS NULL")
    now[0] += 1
    counts.append(run(conn, sql, ("dispute",), ALWAYS_KEYS_FIRST, fence=fence).count)
    assert counts == [2, 2, 2]
    assert said(caplog) == [READ_AGAIN, READ_FIRST]


def test_equal_keys_written_differently_are_read_again_whole(
    conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """numeric's 1.0 = 1.00: two keys to invmon (their text), one to `=`."""
    caplog.set_level(logging.DEBUG, "invmon.execute")
    sql = "SELECT * FROM (VALUES (1.0::numeric, 'a'), (1.00, 'b'), (2, 'c')) AS v(k, note)"
    first, whole = both(conn, sql, ("k",))
    assert first == whole
    assert sorted(row["note"] for row in first.rows) == ["a", "b", "c"]
    assert said(caplog) == [READ_AGAIN]


def test_past_the_sample_a_shared_key_needs_no_second_reading(
    conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Rows past the sample carry their keys only: none is found again."""
    caplog.set_level(logging.DEBUG, "invmon.execute")
    make(conn, [(1, 1, "a", 1), (2, 2, "b", 2), (3, 9, "c", 3), (4, 9, "d", 4)])
    first, whole = both(conn, "SELECT dispute, note FROM kf_refunds", ("dispute",), sample=2)
    assert first == whole and first.count == 4 and len(first.keys) == 3
    assert said(caplog) == [READ_FIRST]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(
    rows=st.lists(
        st.tuples(
            st.none() | st.integers(0, 6),
            st.none()
            | st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30),
        ),
        max_size=12,
    ),
    sample=st.integers(0, 4),
    track=st.integers(0, 8),
    cell=st.integers(8, 40),
)
def test_any_rows_read_keys_first_say_what_the_bounded_query_says(
    conn: psycopg.Connection[Any],
    rows: list[tuple[int | None, str | None]],
    sample: int,
    track: int,
    cell: int,
) -> None:
    make(conn, [(i, key, note, i) for i, (key, note) in enumerate(rows)])
    limits = RowLimits(cell_bytes=cell)
    sql = "SELECT dispute, note, id FROM kf_refunds"
    first, whole = both(conn, sql, ("dispute",), sample=sample, track=track, limits=limits)
    assert first == whole, (rows, sample, track, cell)


def test_only_a_key_of_plain_types_is_read_first() -> None:
    columns = [Column("a", 20), Column("doc", 3802), Column("tags", 1009, array=True)]
    assert keys_first_applies(columns, [0]) is True
    assert keys_first_applies(columns, [0, 1]) is False  # jsonb: no pg_catalog `=` to trust
    assert keys_first_applies(columns, [2]) is False
    assert keys_first_applies(columns, []) is False  # no key: nothing to find a row by


def test_the_text_read_keys_first_compares_with_pg_catalog_s_equality_and_limits_each_find() -> (
    None
):
    text = keys_first_query(
        "SELECT 1 AS a, 2 AS b", [Column("a", 23), Column("b", 23)], [0], full=3, fetch=9, cell=64
    )
    assert "r.c1 OPERATOR(pg_catalog.=) k.c1" in text
    assert "WHERE k.invmon_n OPERATOR(pg_catalog.<=) 3 AND" in text
    assert "LIMIT 2) AS l ON TRUE" in text and "LIMIT 9) AS k" in text
    assert text.count("SELECT 1 AS a, 2 AS b") == 2
    priced = keys_first_query(
        "SELECT 1 AS a", [Column("a", 23)], [0], full=3, fetch=3, cell=64, priced=True
    )
    assert "OFFSET 0) AS l ON TRUE" in priced and "LIMIT 2" not in priced


def test_the_choice_follows_the_planner_s_estimates() -> None:
    assert plan_cost([{"Plan": {"Total Cost": 12.5}}]) == 12.5
    assert plan_cost([{"Plan": {}}]) is None and plan_cost("no") is None
    policy = KeysFirst(above_cost=100.0, margin=1.1)
    assert (policy.worth_asking(99.9), policy.worth_asking(100.0)) == (False, True)
    assert policy.worth_asking(None) is False
    assert (policy.chosen(110.0, 100.0), policy.chosen(110.1, 100.0)) == (True, False)
    assert policy.chosen(None, 100.0) is False
    assert NEVER_KEYS_FIRST.worth_asking(1e300) is False


def make_big(conn: psycopg.Connection[Any]) -> None:
    """Costly enough to ask the planner (past 10,000): 400,000 rows, two to a group."""
    conn.execute(
        "DROP TABLE IF EXISTS kf_big; CREATE TABLE kf_big AS SELECT i AS id, i / 2 AS grp,"
        " md5(i::text) AS note FROM generate_series(1, 400000) AS i;"
        " CREATE INDEX ON kf_big (grp); ANALYZE kf_big"
    )


GROUPED_BIG = (
    "SELECT grp, array_agg(note ORDER BY id) AS notes FROM kf_big"
    " GROUP BY grp HAVING count(*) > 1 AND min(id) % 2000 = 0"
)


def test_the_planner_chooses_keys_first_where_the_key_reaches_an_index(
    conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """An aggregate whose key an index finds is read keys first; a UNION whose key is made
    in the query is not (each row found again would read it all)."""
    caplog.set_level(logging.DEBUG, "invmon.execute")
    make_big(conn)
    grouped = GROUPED_BIG
    chosen = run(conn, grouped, ("grp",), BY_ESTIMATES)
    assert chosen.count == 199 and said(caplog) == [READ_FIRST]
    caplog.clear()
    union = (
        "SELECT 'a' || grp AS k FROM kf_big GROUP BY grp HAVING min(id) % 2000 = 0"
        " UNION ALL SELECT 'b' || grp FROM kf_big GROUP BY grp HAVING min(id) % 2000 = 0"
    )
    assert run(conn, union, ("k",), BY_ESTIMATES).count == 400 and said(caplog) == []


@pytest.mark.parametrize("keys_first, told", [(True, [READ_FIRST]), (False, [])])
def test_the_config_turns_keys_first_off(
    conn: psycopg.Connection[Any],
    fence_database: str,
    caplog: pytest.LogCaptureFixture,
    keys_first: bool,
    told: list[str],
) -> None:
    """`database.keys_first: false` has every invariant read whole, in one reading."""
    caplog.set_level(logging.DEBUG, "invmon.execute")
    make_big(conn)
    database = DatabaseConfig(keys_first=keys_first)
    with Runner(fence_database, concurrency=1, track_keys=10, database=database) as runner:
        result = runner.run_one(invariant("grouped", GROUPED_BIG, key=("grp",), sample=3))
    assert (result.status, result.count, len(result.rows)) == ("violated", 199, 3)
    assert said(caplog) == told


def test_an_error_only_the_second_reading_meets_has_the_run_read_whole_for_a_day(
    conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The key's comparison is pushed into the text, below its join: `r.v::int = k.k` met
    'bad10', a row the join drops before the text itself casts it. The run failed at every
    run where read whole it holds rows."""
    caplog.set_level(logging.DEBUG, "invmon.execute")
    conn.execute(
        "DROP TABLE IF EXISTS kf_raw, kf_ok; CREATE TABLE kf_raw (id int, v text);"
        " INSERT INTO kf_raw SELECT i, CASE WHEN i % 10 = 0 THEN 'bad' || i ELSE i::text END"
        " FROM generate_series(1, 50) AS i;"
        " CREATE TABLE kf_ok AS SELECT id FROM kf_raw WHERE v !~ 'bad'"
    )
    sql = "SELECT r.v::int AS k, r.id FROM kf_raw r JOIN kf_ok o ON o.id = r.id"
    now = [0.0]
    fence = LiveFence(clock=lambda: now[0])
    first = run(conn, sql, ("k",), ALWAYS_KEYS_FIRST, fence=fence)
    assert first == run(conn, sql, ("k",), NEVER_KEYS_FIRST) and first.count == 45
    assert logged(caplog) == [
        "keyed: read again whole: reading its keys first failed (22P02 "
        "InvalidTextRepresentation); read whole for the next 1d"
    ]
    caplog.clear()
    now[0] += 86399
    assert run(conn, sql, ("k",), ALWAYS_KEYS_FIRST, fence=fence).count == 45
    assert said(caplog) == []


def test_reading_keys_first_stops_at_half_the_timeout_and_the_run_reads_whole(
    conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Each of the sample's 200 rows found again by a key made in the query reads the whole
    table (about 200 times the text's own reading): stopped at 500 ms, half the run's
    timeout, the run reads the text whole in the other half."""
    caplog.set_level(logging.DEBUG, "invmon.execute")
    make_big(conn)
    sql = "SELECT 'r' || id AS k, note FROM kf_big WHERE id % 2000 = 0"
    done = run(conn, sql, ("k",), ALWAYS_KEYS_FIRST, sample=200, track=0, timeout=1)
    assert done == run(conn, sql, ("k",), NEVER_KEYS_FIRST, sample=200, track=0, timeout=1)
    assert done.count == 200 and len(done.rows) == 200
    assert logged(caplog) == [
        "keyed: read again whole: reading its keys first took all of the 500ms it may take "
        "(half the run's timeout, or what was left of it); read whole for the next 1d"
    ]


def test_a_lookup_that_reads_everything_is_priced_so(
    conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Found again with LIMIT 2, a row of a key the planner expects 0.5% of the table to
    match was priced as stopping after 2 of them: 9% under the bounded query, where each
    lookup read the whole table and the run took 7 times as long."""
    caplog.set_level(logging.DEBUG, "invmon.execute")
    make_big(conn)
    sql = "SELECT 'r' || id AS k, note FROM kf_big WHERE note <> md5(id::text) OR id % 100000 = 0"
    assert run(conn, sql, ("k",), BY_ESTIMATES, sample=20, track=0).count == 4
    assert said(caplog) == []


def test_a_stop_s_cancel_while_reading_keys_first_ends_the_run(
    conn: psycopg.Connection[Any], fence_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """57014 is the cap's and a stop's alike (and worded in the server's language): a
    cancel well before the cap is the run's end, never a reason to read it again whole."""
    caplog.set_level(logging.DEBUG, "invmon.execute")
    make_big(conn)
    sql = "SELECT 'r' || id AS k, note FROM kf_big WHERE id % 2000 = 0"
    fence = LiveFence()

    def cancel_when_reading() -> None:
        with psycopg.connect(fence_database, autocommit=True) as watcher:
            wait_for(
                lambda: watcher.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE application_name = 'invmon:keyed'"
                    " AND state = 'active' AND query LIKE '%invmon_found%'"
                ).fetchone(),
                30,
                "the keys to be read first",
            )
        conn.cancel_safe()

    canceller = threading.Thread(target=cancel_when_reading)
    canceller.start()
    try:
        with pytest.raises(psycopg.errors.QueryCanceled):
            run(conn, sql, ("k",), ALWAYS_KEYS_FIRST, sample=200, track=0, timeout=60, fence=fence)
    finally:
        canceller.join(timeout=60)
    assert not canceller.is_alive()
    assert said(caplog) == [] and fence.keys_first_choice((sql, (0,), 200, 200)) is True


def test_no_second_reading_once_a_stop_is_asked(
    conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A cancel late in the reading looks like the cap's own: when the runner was asked to
    stop (its interrupt), the cancel ends the run, read whole or not."""
    caplog.set_level(logging.DEBUG, "invmon.execute")
    make_big(conn)
    sql = "SELECT 'r' || id AS k, note FROM kf_big WHERE id % 2000 = 0"
    with pytest.raises(psycopg.errors.QueryCanceled):
        run(conn, sql, ("k",), ALWAYS_KEYS_FIRST, sample=200, track=0, timeout=1, stopping=True)
    assert said(caplog) == []


def test_invmon_check_says_the_same_with_keys_first_on_and_off(
    conn: psycopg.Connection[Any],
    fence_database: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """End to end, from the config to the JSON: the shipped shape of a costly grouped
    invariant, once read keys first (the planner's choice) and once whole."""
    make_big(conn)
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "pairs.sql").write_text(
        "-- description: every group has one row\n-- key: [grp]\n-- sample: 5\n" + GROUPED_BIG
    )
    said, told = {}, {}
    for keys_first in ("true", "false"):
        caplog.clear()
        caplog.set_level(logging.DEBUG, "invmon.execute")
        config = tmp_path / f"invmon-{keys_first}.yaml"
        config.write_text(f"database:\n  keys_first: {keys_first}\n")
        ran = cli(
            "check",
            "--config",
            str(config),
            "--invariants",
            str(folder),
            "--dsn",
            fence_database,
            "--allow-privileged-role",
            "--format",
            "json",
            "--show-values",  # unmasked: each call masks with a key of its own
        )
        assert ran.returncode == 1, ran.stderr
        [result] = json.loads(ran.stdout)["results"]
        result.pop("duration_ms")
        said[keys_first], told[keys_first] = result, said_of(caplog)
    assert said["true"] == said["false"]
    assert told == {"true": [READ_FIRST], "false": []}
    assert (said["true"]["count"], len(said["true"]["rows"])) == (199, 5)


def test_the_planner_is_asked_once_an_hour_per_text(
    conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Its two plans plan the text three times, which for a join of many tables can cost
    more than the run: what it said is kept for an hour, either way."""
    caplog.set_level(logging.DEBUG, "invmon.execute")
    make_big(conn)
    now = [0.0]
    fence = LiveFence(clock=lambda: now[0])
    union = (
        "SELECT 'a' || grp AS k FROM kf_big GROUP BY grp HAVING min(id) % 2000 = 0"
        " UNION ALL SELECT 'b' || grp FROM kf_big GROUP BY grp HAVING min(id) % 2000 = 0"
    )
    for sql, key, told in ((GROUPED_BIG, "grp", [READ_FIRST]), (union, "k", [])):
        for step in (0, 3599, 1):
            now[0] += step
            caplog.clear()
            run(conn, sql, (key,), BY_ESTIMATES, fence=fence)
            assert (asked(caplog), said(caplog)) == (int(step != 3599), told), (sql, step)


def test_a_choice_is_kept_for_its_key_and_sample_and_a_no_outlives_a_late_yes(
    conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The same text with another key, or another sample, is estimated anew (a reload
    that changes the header keeps the runner's fence); and a run's estimate never replaces
    the no a failed run of the same reading left."""
    caplog.set_level(logging.DEBUG, "invmon.execute")
    make_big(conn)
    sql = (
        "SELECT grp, 'k' || grp AS k, array_agg(note ORDER BY id) AS notes FROM kf_big"
        " GROUP BY grp HAVING count(*) > 1 AND min(id) % 2000 = 0"
    )
    fence, asks = LiveFence(), []
    for key, sample in (("grp", 3), ("grp", 3), ("grp", 4), ("k", 4)):
        caplog.clear()
        assert run(conn, sql, (key,), BY_ESTIMATES, fence=fence, sample=sample).count == 199
        asks.append(asked(caplog))
    assert asks == [1, 0, 1, 1]
    which = (sql, (0,), 3, 10)
    fence.remember_keys_first(which, False, timedelta(days=1))
    fence.remember_keys_first(which, True, timedelta(hours=1))
    assert fence.keys_first_choice(which) is False
