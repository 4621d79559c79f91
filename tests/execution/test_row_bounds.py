"""Rows from production are hostile too: a run brings back and keeps a bounded amount
whatever the invariant returns. Long values are cut by the database and say what they
were; rows past the sample come back as keys only; byte budgets cap what a run keeps."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from helpers import invariant

from monitor.execution.execute import LiveFence, Unrunnable, execute, register_loaders
from monitor.execution.offending import DEFAULT_ROW_LIMITS, Evaluation, RowLimits
from monitor.execution.rows import json_safe
from monitor.execution.runner import Runner


@pytest.fixture
def conn(database: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database, autocommit=True) as connection:
        register_loaders(connection)
        yield connection


def run(
    conn: psycopg.Connection[Any],
    sql: str,
    key: tuple[str, ...] = (),
    sample: int = 20,
    track: int = 0,
    limits: RowLimits = DEFAULT_ROW_LIMITS,
) -> Evaluation:
    return execute(
        conn,
        invariant("bounded", sql, key=key, sample=sample),
        sample=sample,
        track=track,
        limits=limits,
        lock_timeout=timedelta(seconds=5),
        live_fence=LiveFence(),
    )


EVERY_KIND = """
SELECT true AS b, 'x'::"char" AS ch, 'nm'::name AS nm, '10.0.0.1'::inet AS ip,
       '10.0.0.0/8'::cidr AS net, 'ab'::char(4) AS padded, ''::text AS empty, NULL::text AS nul,
       12.500::numeric AS money, '{"a": [1, null]}'::jsonb AS doc, '[1,2]'::json AS js,
       ARRAY['a', NULL, 'c'] AS arr, ARRAY[[1, 2], [3, 4]] AS grid, 'infinity'::timestamptz AS inf,
       '2026-11-30 12:00:00+00'::timestamptz AS ts, '1 day 2 hours'::interval AS iv,
       'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS id, ROW(1, 'x') AS rec,
       '\\x0102'::bytea AS raw, 3.5::float8 AS f, 'NaN'::float8 AS nan, 7::int2 AS small,
       '[1,5)'::int4range AS r, 'café ☕'::varchar AS uni, E'line\\nbreak' AS nl
"""


def test_every_value_reads_as_a_plain_fetch_would_read_it(conn: psycopg.Connection[Any]) -> None:
    done = run(conn, EVERY_KIND, sample=1)
    with conn.cursor() as cur:
        cur.execute(EVERY_KIND)
        plain = cur.fetchone()
        names = [c.name for c in cur.description or []]
    assert plain is not None
    assert done.rows == [{n: json_safe(v) for n, v in zip(names, plain, strict=True)}]
    assert done.rows[0]["b"] is True and done.rows[0]["ip"] == "10.0.0.1"
    assert (done.rows[0]["padded"], done.rows[0]["empty"], done.rows[0]["nul"]) == (
        "ab  ",
        "",
        None,
    )


def test_a_long_text_is_cut_by_the_database_and_says_its_size_and_md5(
    conn: psycopg.Connection[Any],
) -> None:
    done = run(conn, "SELECT g, repeat('x', 2000000) AS big FROM generate_series(1, 20) g", ("g",))
    digest = hashlib.md5(b"x" * 2_000_000).hexdigest()
    assert done.count == 20 and len(done.rows) == 20
    assert {row["big"] for row in done.rows} == {
        "x" * 4096 + f"… [cut: 2,000,000 bytes in all, md5 {digest}]"
    }
    assert [row["g"] for row in done.rows] == list(range(1, 21))
    assert (done.cut_values, done.cell_bytes, done.rows_withheld) == (20, 4096, 0)


def test_a_long_bytea_is_cut_as_bytes_and_shown_as_base64(conn: psycopg.Connection[Any]) -> None:
    done = run(conn, "SELECT decode(repeat('ab', 3000000), 'hex') AS blob, '\\x00ff'::bytea AS b")
    text = "\\x" + "ab" * 3_000_000
    digest = hashlib.md5(text.encode()).hexdigest()
    shown = base64.b64encode(b"\xab" * 2047).decode()  # 4,096 characters: \x and 2,047 bytes
    assert done.rows == [
        {
            "blob": f"{shown}… [cut: 3,000,000 bytes in all, md5 of its \\x text {digest}]",
            "b": "AP8=",
        }
    ]


def test_values_of_every_other_type_are_cut_through_their_text(
    conn: psycopg.Connection[Any],
) -> None:
    done = run(
        conn,
        "SELECT array_fill(7, ARRAY[5000]) AS arr, "
        "(SELECT jsonb_agg(g) FROM generate_series(1, 5000) g) AS doc, "
        "repeat('9', 10000)::numeric AS n, 'short'::text AS s, '{\"a\": 1}'::jsonb AS small",
    )
    [row] = done.rows
    assert row["arr"].startswith("{7,7,7") and "bytes in all" in row["arr"]
    assert row["doc"].startswith("[1, 2, 3") and "bytes in all" in row["doc"]
    assert row["n"].startswith("9999") and "10,000 bytes in all" in row["n"]
    assert (row["s"], row["small"]) == ("short", {"a": 1})  # short values keep their type
    assert done.cut_values == 3


def test_a_thousand_long_columns_share_the_row_budget(conn: psycopg.Connection[Any]) -> None:
    columns = ", ".join(f"repeat('y', 500) AS c{i}" for i in range(1000))
    done = run(conn, f"SELECT {columns} FROM generate_series(1, 3)")
    assert done.count == 3 and len(done.rows) == 3
    assert done.cell_bytes == 65  # 64 KiB over 1,000 columns
    assert all(len(v) == 128 and v.startswith("y" * 65 + "…") for v in done.rows[0].values())
    assert len(json.dumps(done.rows[0])) < 150_000
    assert done.cut_values == 3000


def test_rows_past_the_sample_come_back_as_keys_only(conn: psycopg.Connection[Any]) -> None:
    done = run(
        conn,
        "SELECT g AS id, repeat('z', 100) AS note FROM generate_series(1, 50) g",
        key=("id",),
        sample=2,
        track=1000,
    )
    assert done.count == 50
    assert [row["id"] for row in done.rows] == [1, 2]
    assert set(done.keys) == {f"[{n}]" for n in range(1, 51)}
    assert {k for k, row in done.keys.items() if row is not None} == {"[1]", "[2]"}
    assert done.keys_complete


def test_the_sample_stops_at_its_byte_budget_and_says_how_many_rows_it_withheld(
    conn: psycopg.Connection[Any],
) -> None:
    done = run(
        conn,
        "SELECT g AS id, repeat('w', 500) AS note FROM generate_series(1, 20) g",
        key=("id",),
        sample=20,
        track=1000,
        limits=RowLimits(sample_bytes=2048),
    )
    kept = len(done.rows)
    assert kept == 3  # each row is 527 bytes of JSON
    assert done.rows_withheld == 17
    assert len(done.keys) == 20 and done.keys_complete  # keys are still all tracked


def test_keys_past_their_budget_are_not_tracked_so_none_is_claimed_gone(
    conn: psycopg.Connection[Any],
) -> None:
    done = run(
        conn,
        "SELECT lpad(g::text, 90, '0') AS id FROM generate_series(1, 100) g",
        key=("id",),
        sample=0,
        track=1000,
        limits=RowLimits(keys_bytes=1024),
    )
    assert done.count == 100
    assert len(done.keys) == 1024 // 96  # each key is a 96-character JSON list
    assert not done.keys_complete


def test_a_long_key_is_cut_yet_two_keys_stay_two(conn: psycopg.Connection[Any]) -> None:
    done = run(
        conn,
        "SELECT repeat('k', 9000) || g AS id FROM generate_series(1, 2) g",
        key=("id",),
        track=10,
    )
    assert len(done.keys) == 2 and done.keys_complete
    assert all(len(k) < 4300 for k in done.keys)


def test_without_a_key_only_the_sample_is_tracked(conn: psycopg.Connection[Any]) -> None:
    done = run(conn, "SELECT g FROM generate_series(1, 30) g", sample=5, track=1000)
    assert done.count == 30 and len(done.rows) == 5
    assert len(done.keys) == 5 and not done.keys_complete


def test_a_result_without_columns_is_still_counted(conn: psycopg.Connection[Any]) -> None:
    done = run(conn, "SELECT FROM generate_series(1, 3)")
    assert (done.count, done.columns, done.rows) == (3, [], [{}, {}, {}])


def test_columns_of_the_same_name_are_both_kept(conn: psycopg.Connection[Any]) -> None:
    done = run(conn, "SELECT 1 AS id, 2 AS id, 'x' AS invmon_n", key=("invmon_n",))
    assert done.rows == [{"id": 1, "id_2": 2, "invmon_n": "x"}]


def test_a_name_the_query_gave_is_never_given_to_another_column(
    conn: psycopg.Connection[Any],
) -> None:
    """A review found `SELECT 'a' AS x, 'b' AS x, 'c' AS x_2` reported as x_2 = 'b', and
    `key: [x_2]` keyed on 'b': the second x took the name of the third column."""
    done = run(conn, "SELECT 'a' AS x, 'b' AS x, 'c' AS x_2", key=("x_2",))
    assert done.rows == [{"x": "a", "x_3": "b", "x_2": "c"}]
    assert list(done.keys) == ['["c"]']
    many = run(conn, "SELECT 1 AS id, 2 AS id_2, 3 AS id, 4 AS id_3, 5 AS id")
    assert many.rows == [{"id": 1, "id_2": 2, "id_4": 3, "id_3": 4, "id_5": 5}]


def test_a_key_naming_two_columns_is_refused(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(Unrunnable) as refused:
        run(conn, "SELECT 1 AS id, 2 AS id", key=("id",))
    assert str(refused.value) == (
        "key column 'id' names 2 of the query's columns; give them distinct names (AS …)"
    )


def test_a_key_the_query_does_not_return_is_one_sentence(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(Unrunnable) as refused:
        run(conn, "SELECT 1 AS a, 2 AS b", key=("id",))
    assert str(refused.value) == "key column 'id' not among the query's columns: ['a', 'b']"


def test_a_sample_of_zero_still_counts_every_row(conn: psycopg.Connection[Any]) -> None:
    done = run(conn, "SELECT g FROM generate_series(1, 7) g", sample=0)
    assert (done.count, done.rows) == (7, [])


def test_the_runner_reports_what_its_bounds_left_out(database: str) -> None:
    with Runner(database, concurrency=1, track_keys=100, limits=RowLimits(cell_bytes=64)) as r:
        result = r.run_one(
            invariant(
                "wide",
                "SELECT g AS id, repeat('q', 100) AS t FROM generate_series(1, 4) g",
                key=("id",),
                sample=2,
            )
        )
        missing = r.run_one(invariant("nokey", "SELECT 1 AS a", key=("id",)))
    assert (result.count, len(result.rows), len(result.keys)) == (4, 2, 4)
    assert (result.cut_values, result.cell_bytes) == (2, 64)
    assert missing.status == "error"
    assert missing.error == "key column 'id' not among the query's columns: ['a']"


def test_a_jsonb_null_and_an_sql_null_are_two_values_and_two_keys(
    conn: psycopg.Connection[Any],
) -> None:
    done = run(
        conn,
        "SELECT * FROM (VALUES ('null'::jsonb, 1), (NULL::jsonb, 2)) v(jb, n)",
        key=("jb",),
        track=10,
    )
    assert done.rows == [{"jb": "null", "n": 1}, {"jb": None, "n": 2}]
    assert sorted(done.keys) == ['["null"]', "[null]"]


def test_an_array_keeps_lower_bounds_other_than_1(conn: psycopg.Connection[Any]) -> None:
    """'[0:1]={1,2}' read as [1, 2], which says the elements sit at 1 and 2: an array whose
    lower bounds are not all 1 is PostgreSQL's text; any other stays a list, and so does a
    jsonb array, whose text starts with [ too."""
    done = run(
        conn,
        "SELECT '[0:1]={1,2}'::int[] AS a, '{1,2}'::int[] AS b,"
        " '[2:3][1:1]={{1},{2}}'::int[] AS c, '[-1:0]={x,y}'::text[] AS d,"
        " '[1,2]'::jsonb AS e, '[1:2]={7,8}'::int[] AS f",
    )
    assert done.rows == [
        {
            "a": "[0:1]={1,2}",
            "b": [1, 2],
            "c": "[2:3][1:1]={{1},{2}}",
            "d": "[-1:0]={x,y}",
            "e": [1, 2],
            "f": [7, 8],
        }
    ]


def test_values_are_written_as_postgresql_writes_them(conn: psycopg.Connection[Any]) -> None:
    """A truth review found '1 mon' and '30 days' both 2592000.0 (one key for two values),
    '1 year' as 365 days, 0.0000001 as 1E-7, and NaN as nan."""
    done = run(
        conn,
        "SELECT '1 mon'::interval AS a, '30 days'::interval AS b, '1 year'::interval AS c,"
        " '-1 mon +1 day'::interval AS d, 0.0000001::numeric AS e, 'NaN'::float8 AS f,"
        " '-Infinity'::float8 AS g, 'NaN'::numeric AS h",
    )
    assert done.rows == [
        {
            "a": "1 mon",
            "b": "30 days",
            "c": "1 year",
            "d": "-1 mons +1 day",
            "e": "0.0000001",
            "f": "NaN",
            "g": "-Infinity",
            "h": "NaN",
        }
    ]


def test_a_cut_value_s_start_is_at_most_the_cell_s_bytes_in_any_script(
    conn: psycopg.Connection[Any],
) -> None:
    """left() counts characters: 2,000 emoji (8,000 bytes) came back whole, labelled cut."""
    done = run(
        conn,
        "SELECT repeat('☕', 2000) AS v, repeat('x', 8000) AS w",
        limits=RowLimits(cell_bytes=4096),
    )
    [row] = done.rows
    for column, width in (("v", 3), ("w", 1)):
        value = str(row[column])
        start, label = value.split("… [cut: ")
        assert label.startswith("8,000 bytes in all" if width == 1 else "6,000 bytes in all")
        assert len(start.encode()) <= 4096 and len(start.encode()) > 4096 - width


def test_ranges_are_written_as_postgresql_writes_them(conn: psycopg.Connection[Any]) -> None:
    """A review found int4range(1, 5) reported as '[1, 5)', psycopg's spelling."""
    done = run(
        conn,
        "SELECT int4range(1, 5) AS r, 'empty'::numrange AS e,"
        " tstzrange('2026-01-01 00:00+00', NULL) AS open_ended,"
        " ARRAY[int8range(1, 2)] AS several",
    )
    assert done.rows == [
        {
            "r": "[1,5)",
            "e": "empty",
            "open_ended": '["2026-01-01 00:00:00+00",)',
            "several": ["[1,2)"],
        }
    ]
