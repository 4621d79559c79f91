"""The read-only fence: hostile queries refused at their line, offline and against a
database's own catalog; analytical queries accepted; and the parser's reading of names
equal to what the generator wrote, whatever the quoting.

The corpora are YAML files in tests/fence/corpus/, one parametrized test each (as sqlfluff
runs its rule cases), so adding a case never means editing Python.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from helpers import CHECK, invmon
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pglast import keywords

from monitor.execution.execute import LiveFence
from monitor.fence.catalog_memory import Asked
from monitor.fence.fence import fence
from monitor.fence.known import (
    HARMLESS_EXTENSION_FUNCTIONS,
    HARMLESS_VOLATILE,
    RUNS_SQL_TEXT,
    STATE_FREE_PARALLEL_UNSAFE,
)
from monitor.fence.live_catalog import LiveCatalog
from monitor.fence.sqltree import called_functions
from monitor.invariants.validate import validate_sql

CORPUS = Path(__file__).parent / "corpus"
ROOT = Path(__file__).resolve().parents[2]
HOSTILE: dict[str, dict[str, Any]] = yaml.safe_load((CORPUS / "hostile.yaml").read_text())
LIVE: dict[str, dict[str, Any]] = yaml.safe_load((CORPUS / "hostile_live.yaml").read_text())
ACCEPTED: dict[str, str] = yaml.safe_load((CORPUS / "accepted.yaml").read_text())


def errors(problems: list[Any]) -> list[Any]:
    return [p for p in problems if p.level == "error"]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_lint_refuses_each_hostile_query_at_its_line(name: str) -> None:
    case = HOSTILE[name]
    refused = errors(validate_sql(case["sql"]))
    assert refused, f"{name}: accepted"
    first = refused[0]
    assert (first.line, case["says"] in first.message) == (case["line"], True), first


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_lint_accepts_each_analytical_query(name: str) -> None:
    assert validate_sql(ACCEPTED[name]) == []


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def test_lint_reports_every_hostile_file_at_its_path_and_line(tmp_path: Path) -> None:
    """The same corpus through the real command: one file per query after a two-line
    header and a blank line (so a query that starts with a comment stays a query)."""
    expected = {}
    for name, case in HOSTILE.items():
        file = tmp_path / f"{_slug(name)}.sql"
        file.write_text(f"-- description: {_slug(name)}\n-- owner: '@fence'\n\n{case['sql']}\n")
        expected[str(file)] = (case["line"] + 3, case["says"])
    done = invmon("lint", str(tmp_path))
    assert done.returncode == 2, done.stderr
    first: dict[str, tuple[int, str]] = {}
    for line in done.stdout.splitlines():
        path, number, message = line.split(":", 2)
        if not message.startswith(" warning:"):
            first.setdefault(path, (int(number), message))
    assert set(first) == set(expected)
    for path, (line, says) in expected.items():
        assert first[path][0] == line and says in first[path][1], (path, first[path])
    assert f"0 invariants valid, {len(HOSTILE)} with errors" in done.stderr


# --- against a database's own catalog -------------------------------------------------------


def _has_extension(conn: psycopg.Connection[Any], name: str) -> bool:
    row = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = %s", (name,))
    return row.fetchone() is not None


@pytest.mark.parametrize("name", sorted(LIVE))
def test_the_database_catalog_refuses_each_hostile_query_at_its_line(
    name: str, fence_database: str
) -> None:
    case = LIVE[name]
    with psycopg.connect(fence_database) as conn:
        if case.get("extension") and not _has_extension(conn, case["extension"]):
            pytest.skip(f"extension {case['extension']} is not available on this server")
        conn.execute(case["setup"].encode())
        fresh = fence(case["sql"], LiveCatalog(conn))
        # Learned first (LiveFence.learn), the verdict is the same and nothing is left to ask.
        live = LiveFence()
        live.learn(conn, [case["sql"]])
        left = live.still_to_ask(case["sql"])  # before a verdict, which would ask itself
        learned = live.problems(conn, case["sql"])
        conn.rollback()
    assert (learned, left) == (fresh, Asked()), name
    refused = errors(fresh)
    assert refused, f"{name}: accepted by the database's catalog"
    first = refused[0]
    assert (first.line, case["says"] in first.message) == (case["line"], True), first
    offline = errors(validate_sql(case["sql"]))
    assert ("refused" if offline else "accepted") == case["lint"], offline


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_the_database_catalog_accepts_each_analytical_query(name: str, fence_database: str) -> None:
    with psycopg.connect(fence_database) as conn:
        assert fence(ACCEPTED[name], LiveCatalog(conn)) == []


def test_invmon_check_refuses_what_the_database_says_may_act_and_names_the_line(
    fence_database: str, tmp_path: Path
) -> None:
    """A function lint cannot know passes lint's deferral, then the runner's own judgement
    against the database refuses it before it runs, naming the file and line."""
    with psycopg.connect(fence_database, autocommit=True) as conn:
        conn.execute("CREATE FUNCTION public.count_visit() RETURNS int LANGUAGE sql AS 'SELECT 1'")
        conn.execute("CREATE TABLE visits (n int)")
    try:
        (tmp_path / "visits.sql").write_text(
            "-- description: visits\n\nSELECT n\nFROM visits\nWHERE n < count_visit()\n"
        )
        done = invmon(*CHECK, "--dsn", fence_database, "--invariants", str(tmp_path))
    finally:
        with psycopg.connect(fence_database, autocommit=True) as conn:
            conn.execute("DROP TABLE visits; DROP FUNCTION public.count_visit()")
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        f"refused by the read-only fence: {tmp_path / 'visits.sql'}:5: function count_visit() "
        "is VOLATILE" in done.stdout
    )


def test_the_harmless_lists_of_the_fence_and_the_role_scripts_are_the_same() -> None:
    quoted = re.compile(r"'([a-z_0-9]+)'")

    def listed(path: Path, start: str, end: str) -> set[str]:
        text = path.read_text()
        begin = text.index(start) + len(start)
        block = text[begin : text.index(end, begin)]
        return set(quoted.findall(block))

    role_sql = ROOT / "deploy" / "readonly-role.sql"
    verify_sql = ROOT / "deploy" / "verify-readonly-role.sql"
    role = listed(role_sql, "harmless text[]", "];")
    verify = listed(
        verify_sql, "p.pronamespace = 'pg_catalog'::regnamespace AND p.proname IN (", "))"
    )
    assert role == set(HARMLESS_VOLATILE) | set(STATE_FREE_PARALLEL_UNSAFE)
    assert verify == set(HARMLESS_VOLATILE)
    assert listed(role_sql, "runs_sql text[]", "];") == set(RUNS_SQL_TEXT)
    assert listed(verify_sql, "OR p.proname IN (", "))") == set(RUNS_SQL_TEXT)
    assert listed(role_sql, "harmless_ext text[]", "];") == {
        name for _, name in HARMLESS_EXTENSION_FUNCTIONS
    }


# --- the parser decodes names as the server does ----------------------------------------------

_NAME_CHARS = "abcdefghijklmnopqrstuvwxyz_"
# Only unreserved keywords can name a function unquoted; the others are grammar (COALESCE,
# EXTRACT, LEFT...) and parse as something else, as they do on the server.
_GRAMMAR = (
    set(keywords.RESERVED_KEYWORDS)
    | set(keywords.COL_NAME_KEYWORDS)
    | set(keywords.TYPE_FUNC_NAME_KEYWORDS)
)
_DANGEROUS = ["pg_sleep", "pg_terminate_backend", "lo_from_bytea", "pg_notify", "set_config"]
_LITERALS = st.sampled_from(
    [
        "'it''s'",
        "E'\\''",
        "E'\\\\'",
        "$$'$$",
        "$$--$$",
        "$$/*$$",
        "$$*/$$",
        "$tag$ ' -- /* $tag$",
        "U&'\\0041'",
        "'U&\"x'",
        "'/* not a comment */'",
        "'-- not a comment'",
        '"quoted""col"',
        "1",
        "NULL",
    ]
)
_COMMENTS = st.sampled_from(
    ["", " ", "\n", " -- a comment\n", " /* c */ ", " /* a /* nested */ one */ "]
)


@st.composite
def _function_name(draw: st.DrawFn) -> tuple[str, str]:
    """(how it is written, how PostgreSQL names it)."""
    bare = draw(
        st.one_of(
            st.sampled_from(_DANGEROUS),
            st.text(_NAME_CHARS, min_size=1, max_size=12).filter(lambda s: s[0] != "_"),
        )
    )
    style = draw(st.sampled_from(["plain", "upper", "quoted", "unicode", "uescape"]))
    if bare in _GRAMMAR and style in ("plain", "upper"):
        style = "quoted"
    if style == "plain":
        written, real = bare, bare
    elif style == "upper":
        written, real = bare.upper(), bare
    elif style == "quoted":
        real = draw(st.sampled_from([bare, bare.upper(), bare + " x", bare + "'", bare + '"']))
        written = '"' + real.replace('"', '""') + '"'
    else:
        real = bare
        escape = "\\" if style == "unicode" else "!"
        escaped = "".join(f"{escape}{ord(c):04x}" if draw(st.booleans()) else c for c in bare)
        written = f'U&"{escaped}"' + (" UESCAPE '!'" if style == "uescape" else "")
    if draw(st.booleans()):
        written, real = f"pg_catalog.{written}", f"pg_catalog.{real}"
    return written, real


@st.composite
def _query(draw: st.DrawFn) -> tuple[str, list[str]]:
    items: list[str] = []
    calls: list[str] = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            items.append(draw(_LITERALS))
            continue
        written, real = draw(_function_name())
        argument = draw(_LITERALS)
        items.append(f"{written}({argument})")
        calls.append(real)
    pieces = []
    for item in items:
        pieces.append(draw(_COMMENTS) + item + draw(_COMMENTS))
    return "SELECT " + ",".join(pieces), calls


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_query())
def test_the_functions_the_fence_sees_are_the_ones_written(
    generated: tuple[str, list[str]],
) -> None:
    sql, calls = generated
    seen = [".".join(name) for name in called_functions(sql)]
    assert sorted(seen) == sorted(calls), sql
    dangerous = {c.split(".")[-1] for c in calls} & set(_DANGEROUS)
    refused = " ".join(p.message for p in errors(validate_sql(sql)))
    for name in dangerous:
        assert f"{name}()" in refused, (sql, refused)


def test_several_problems_in_one_query_are_all_reported_in_line_order() -> None:
    sql = "SELECT pg_sleep(1),\n  nextval('s')\nFROM t\nFOR UPDATE"
    assert [(p.line, p.message.split(" ")[1]) for p in validate_sql(sql)] == [
        (1, "pg_sleep()"),
        (2, "nextval()"),
        (4, "UPDATE"),
    ]


def test_a_trusted_function_is_accepted_with_a_warning_that_names_the_remaining_fences(
    fence_database: str,
) -> None:
    from monitor.fence.allowances import Allowances

    with psycopg.connect(fence_database) as conn:
        conn.execute(
            "CREATE FUNCTION public.st_fake_distance(int) RETURNS int LANGUAGE sql AS 'SELECT 1'"
        )
        problems = fence(
            "SELECT st_fake_distance(1)",
            LiveCatalog(conn),
            Allowances(functions=frozenset({"st_fake_distance"})),
        )
        conn.rollback()
    assert [
        (p.level, "READ ONLY transaction and the database role" in p.message) for p in problems
    ] == [("warning", True)]


def test_what_the_config_trusts_passes_the_fence_offline_and_live(fence_database: str) -> None:
    from monitor.config import FenceConfig
    from monitor.fence.allowances import FencePolicy

    trusting = FenceConfig(
        allow_functions=["xml", "xmlparse"],
        allow_types=["Public.Noisy"],
        trust_extensions=["citext"],
        allow_settings=["App.JWT_Secret"],
    ).allowances()
    offline = [
        "SELECT note::xml AS x, xmlparse(content note) AS y FROM t",
        "SELECT current_setting('app.jwt_secret') AS s",
    ]
    assert [validate_sql(q, FencePolicy(trusting)) for q in offline] == [[], []]
    every_setting = FencePolicy(FenceConfig(allow_settings=["*"]).allowances())
    assert (
        validate_sql("SELECT name, setting, rolconfig FROM pg_settings, pg_roles", every_setting)
        == []
    )
    with psycopg.connect(fence_database) as conn:
        if not _has_extension(conn, "citext"):
            pytest.skip("citext is not available on this server")
        conn.execute(
            "CREATE EXTENSION citext;"
            " CREATE FUNCTION public.noisy_ok(int) RETURNS bool LANGUAGE sql IMMUTABLE"
            " AS 'SELECT true';"
            " CREATE DOMAIN public.noisy AS int CHECK (public.noisy_ok(VALUE))"
        )
        live = ["SELECT id FROM users WHERE email = 'a@example.com'", "SELECT 1::noisy AS n"]
        trusted = [fence(q, LiveCatalog(conn), trusting) for q in live]
        untrusted = [len(errors(fence(q, LiveCatalog(conn)))) for q in live]
        conn.rollback()
    assert (trusted, untrusted) == ([[], []], [1, 1])


def test_reading_pg_stat_statements_is_accepted_where_the_extension_is_installed(
    fence_database: str,
) -> None:
    """Its view calls a VOLATILE reader; finding slow queries is a fair invariant."""
    with psycopg.connect(fence_database) as conn:
        if not _has_extension(conn, "pg_stat_statements"):
            pytest.skip("pg_stat_statements is not available on this server")
        conn.execute("CREATE EXTENSION pg_stat_statements")
        problems = fence(
            "SELECT queryid, mean_exec_time FROM pg_stat_statements WHERE mean_exec_time > 1000",
            LiveCatalog(conn),
        )
        conn.rollback()
    assert problems == []


def test_the_shipped_table_knows_every_builtin_of_this_server_at_least_as_strictly(
    admin_dsn: str,
) -> None:
    """pg_builtins.json is generated from the supported versions; the server the tests run
    on is one of them, and nothing it has may look safer in the table than it is."""
    from monitor.fence.builtin_catalog import builtin_catalog
    from monitor.fence.builtins_table import read_builtins
    from monitor.fence.catalog import VOLATILITY_ORDER

    with psycopg.connect(admin_dsn) as conn:
        live = read_builtins(conn)
    table = builtin_catalog()
    shipped = table._functions
    assert live["versions"][0] in table.versions
    for name, (volatility, unsafe, _kinds, _one_arg) in live["functions"].items():
        assert name in shipped, name
        assert VOLATILITY_ORDER.index(shipped[name][0]) >= VOLATILITY_ORDER.index(volatility), name
        assert shipped[name][1] or not unsafe, name
