"""What invmon adds around an invariant's run, against a real PostgreSQL: the wrapper it
sends means the same in any database (the objects a database's owners create cannot change
it, nor make the fence blame the invariant for it), and the run's session is bounded in what
it may write to temporary files."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator

import psycopg
import pytest
from helpers import invariant, sql
from pydantic import ValidationError

from monitor.config import DatabaseConfig
from monitor.execution.query import Column, bounded_query, describing_query, planning_query
from monitor.execution.runner import Runner
from monitor.fence.sqltree import analyze

# Look-alikes of everything invmon's wrapper uses, each VOLATILE, in the search_path. A name
# looked up there finds them: `'c' || octet_length(…)` (unknown || integer) would even pick
# the `||` on (text, integer) over the built-in `text || anynonarray`.
LOOK_ALIKES = """
CREATE FUNCTION public.le_text_int(text, int) RETURNS bool LANGUAGE sql VOLATILE AS 'SELECT true';
CREATE OPERATOR public.<= (LEFTARG = text, RIGHTARG = int, FUNCTION = public.le_text_int);
CREATE FUNCTION public.eq_bigint_text(bigint, text) RETURNS bool LANGUAGE sql VOLATILE
    AS 'SELECT true';
CREATE OPERATOR public.= (LEFTARG = bigint, RIGHTARG = text, FUNCTION = public.eq_bigint_text);
CREATE FUNCTION public.cat_text_int(text, int) RETURNS text LANGUAGE sql VOLATILE
    AS $$SELECT 'hijacked'$$;
CREATE OPERATOR public.|| (LEFTARG = text, RIGHTARG = int, FUNCTION = public.cat_text_int);
CREATE FUNCTION public.md5(text) RETURNS text LANGUAGE sql VOLATILE AS $$SELECT 'hijacked'$$;
CREATE TYPE public.mood AS ENUM ('calm', 'cross');
CREATE FUNCTION public.mood_text(public.mood) RETURNS text LANGUAGE sql VOLATILE
    AS $$SELECT 'hijacked'$$;
CREATE CAST (public.mood AS text) WITH FUNCTION public.mood_text(public.mood);
CREATE TABLE t (id int, note text, how public.mood);
INSERT INTO t VALUES (1, 'short', 'calm'), (2, repeat('x', 5000), 'cross');
"""


def test_objects_a_database_owner_creates_cannot_change_or_refuse_the_wrapper(
    database: str,
) -> None:
    """Issue 26: one VOLATILE `public.<=` made every invariant of the database `error`,
    blamed on the invariant's own line. The invariant here uses none of those objects."""
    sql(database, LOOK_ALIKES)
    with Runner(database, concurrency=1) as runner:
        keyed = runner.run_one(
            invariant("keyed", "SELECT id, note, how\nFROM t", key=("id",), sample=1)
        )
        plain = runner.run_one(invariant("plain", "SELECT id\nFROM t"))
    assert (keyed.status, keyed.error, keyed.count) == ("violated", None, 2)
    # Row 2 is past the sample: its key only. Its note was never sent.
    assert keyed.rows == [{"id": 1, "note": "short", "how": "calm"}]
    assert (plain.status, plain.error, plain.count) == ("violated", None, 2)
    with Runner(database, concurrency=1) as runner:
        cut = runner.run_one(invariant("cut", "SELECT id, note, how\nFROM t\nWHERE id > 1"))
    assert (cut.status, cut.error, cut.cut_values) == ("violated", None, 1)
    digest = hashlib.md5(b"x" * 5000).hexdigest()
    assert cut.rows == [
        {"id": 2, "note": f"{'x' * 4096}… [cut: 5,000 bytes in all, md5 {digest}]", "how": "cross"}
    ]


def test_every_name_the_wrapper_adds_is_in_pg_catalog() -> None:
    """What the parser reads in the texts sent, around an invariant that names nothing."""
    columns = [Column("a", 23), Column("b", 16, via_format=True), Column("c", 25)]
    texts = [
        describing_query("SELECT 1 AS a, true AS b, 'x' AS c"),
        planning_query("SELECT 1 AS a, true AS b, 'x' AS c"),
        bounded_query(
            "SELECT 1 AS a, true AS b, 'x' AS c", columns, [0, 2], full=5, fetch=9, cell=64
        ),
        bounded_query("SELECT 1 AS a, true AS b, 'x' AS c", columns, [], full=5, fetch=9, cell=64),
    ]
    named = {
        (ref.kind, ref.name)
        for text in texts
        for ref in analyze(text).references
        # `s.c1`, `u.v`: columns of our own aliases (the fence also reads them as possible
        # attribute calls, `c1(s)`, which a column of that name always wins over).
        if ref.kind not in ("relation", "attribute")
    }
    assert {name[0] for _, name in named} == {"pg_catalog"}
    assert {kind for kind, _ in named} == {"function", "operator", "cast"}


def test_the_invariants_own_use_of_a_volatile_look_alike_is_still_refused_at_its_line(
    database: str,
) -> None:
    sql(database, LOOK_ALIKES)
    with Runner(database, concurrency=1) as runner:
        result = runner.run_one(invariant("uses", "SELECT id\nFROM t\nWHERE note <= 3"))
    assert result.status == "error"
    assert result.error == (
        "refused by the read-only fence: uses.sql:4: using operator <= may run "
        "le_text_int(text,integer), which is VOLATILE: PostgreSQL's catalog says it may "
        "change the database or act outside the query; not allowed (the fence cannot see the "
        "types of an operator's operands, so it judges every function using one named <= may "
        "run, the planner's estimators included)"
    )


# Numeric generate_series keeps its whole output in a tuplestore, which spills to temporary
# files: as a superuser with no temp_file_limit it wrote 300 MB in 3 s here.
SPILLS = "SELECT g FROM generate_series(1, 1e12) g WHERE g < 0"


@pytest.fixture
def superuser_database(database: str) -> Iterator[str]:
    with psycopg.connect(database) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    if row != (True,):
        pytest.skip("the test server's DSN is not a superuser's")
    yield database


def test_a_superuser_run_that_writes_past_the_temp_file_limit_is_an_error_naming_it(
    superuser_database: str,
) -> None:
    config = DatabaseConfig(temp_file_limit="1MB")
    with Runner(superuser_database, database=config) as runner:
        clock = time.monotonic()
        result = runner.run_one(invariant("spills", SPILLS, timeout=20))
        took = time.monotonic() - clock
    assert (result.status, result.count) == ("error", None)
    assert result.error == (
        "temporary file size exceeds temp_file_limit (1024kB): the run wrote more temporary "
        "files than its limit (database.temp_file_limit, for a superuser; else the role's "
        "own temp_file_limit)"
    )
    assert took < 10


SHOW_LIMIT = "SELECT current_setting('temp_file_limit') AS limit"


def test_a_superuser_run_has_a_temp_file_limit_by_default(superuser_database: str) -> None:
    with Runner(superuser_database) as runner:
        result = runner.run_one(invariant("default", SHOW_LIMIT))
    assert result.rows == [{"limit": "1GB"}]


def test_the_limit_is_the_configured_one_or_none_when_unset(superuser_database: str) -> None:
    with Runner(superuser_database, database=DatabaseConfig(temp_file_limit="64MB")) as runner:
        configured = runner.run_one(invariant("configured", SHOW_LIMIT))
    with Runner(superuser_database, database=DatabaseConfig(temp_file_limit=None)) as runner:
        unset = runner.run_one(invariant("unset", SHOW_LIMIT))
    assert [configured.rows, unset.rows] == [[{"limit": "64MB"}], [{"limit": "-1"}]]


def test_a_lower_limit_the_session_already_has_is_kept(superuser_database: str) -> None:
    """Bounded by the config: never raised past what the database or role already says."""
    name = psycopg.conninfo.conninfo_to_dict(superuser_database)["dbname"]
    sql(superuser_database, f"ALTER DATABASE \"{name}\" SET temp_file_limit = '2MB'")
    with Runner(superuser_database) as runner:
        result = runner.run_one(invariant("lower", SHOW_LIMIT))
    assert result.rows == [{"limit": "2MB"}]


@pytest.mark.parametrize("value", ["1 gigabyte", "-1", "10", "1gb", "0kB"])
def test_a_temp_file_limit_is_a_size_postgresql_reads(value: str) -> None:
    with pytest.raises(ValidationError) as refused:
        DatabaseConfig(temp_file_limit=value)
    assert "write a size such as 1GB, 512MB or 64kB" in str(refused.value)


def test_the_limit_is_set_per_run_and_gone_after_it(superuser_database: str) -> None:
    with Runner(superuser_database, concurrency=1, database=DatabaseConfig()) as runner:
        runner.run_one(invariant("first", "SELECT 1 AS one"))
        with runner._pool.connection() as conn:  # the pooled session the run used
            after = conn.execute("SELECT current_setting('temp_file_limit')").fetchone()
    assert after == ("-1",)
