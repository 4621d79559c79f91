"""Work PostgreSQL cannot interrupt: libxml2 parsing XML, and numeric arithmetic on huge
numbers, never check for a cancel, so a statement timeout does not stop them. Each attack is
measured once against the real server, with an input small enough to keep the suite fast
(the full ones ran 10-67 s past a 2 s timeout), and shown refused by the fence offline and
by the database's own catalog; the bounds on literals hold whatever way a literal is
written."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.fence.bounds import MAX_EXPONENT, MAX_NUMBER_DIGITS, MAX_NUMERIC_WORK, MAX_STRING_CHARS
from monitor.fence.catalog import FIRST_USER_OID, LIBXML_PARSERS
from monitor.fence.fence import fence
from monitor.fence.known import UNINTERRUPTIBLE, XML_PARSING
from monitor.fence.live_catalog import LiveCatalog
from monitor.invariants.validate import validate_sql

TIMEOUT_MS = 100
# An internal entity referenced this many times: about 1 s of libxml2 on PostgreSQL 15
# (the attack's 1,000,000 ran 10-20 s); the cost grows faster than the count.
ENTITY_REFERENCES = 40_000
BOMB = (
    "'<!DOCTYPE d [<!ENTITY a \"' || repeat('x', 100) || '\">]><d>' || "
    f"repeat('&a;', {ENTITY_REFERENCES}) || '</d>'"
)
XML_PATHS = {
    "xml_is_well_formed_document": f"SELECT xml_is_well_formed_document({BOMB}) AS x",
    "XMLPARSE": f"SELECT xmlparse(document {BOMB}) IS NULL AS x",
    "a cast to xml": f"SELECT ({BOMB})::xml IS NULL AS x",
    "a cast in a column definition list": (
        f"SELECT r.d IS NULL AS x FROM jsonb_to_record(jsonb_build_object('d', {BOMB})) AS r(d xml)"
    ),
}


def _products(terms: int, digits: int = 65_000) -> str:
    """The attack's shape: a sum of products of two numbers of `digits` digits."""
    big = f"(10::numeric ^ {digits})"
    return " + ".join(f"({big} - {k}) * ({big} - {k})" for k in range(1, terms + 1))


@pytest.fixture
def conn(admin_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(admin_dsn, autocommit=True) as connection:
        yield connection


def _seconds_under_timeout(conn: psycopg.Connection[Any], sql: str) -> float:
    """How long the server took to give up on `sql` (or finish it) under TIMEOUT_MS."""
    conn.execute(f"SET statement_timeout = {TIMEOUT_MS}")
    start = time.monotonic()
    try:
        conn.execute(sql.encode())
    except psycopg.errors.QueryCanceled:
        pass
    finally:
        conn.execute("RESET statement_timeout")
    return time.monotonic() - start


def _errors(problems: list[Any]) -> list[str]:
    return [p.message for p in problems if p.level == "error"]


def test_an_xml_entity_expansion_outlasts_its_timeout_and_every_path_to_it_is_refused(
    conn: psycopg.Connection[Any],
) -> None:
    try:
        conn.execute("SELECT '<a/>'::xml")
    except psycopg.errors.FeatureNotSupported:
        pytest.skip("this server is built without libxml")
    took = _seconds_under_timeout(conn, XML_PATHS["xml_is_well_formed_document"])
    # A cancel is only noticed once libxml2 returns: the run outlives its timeout many times.
    assert took > 3 * TIMEOUT_MS / 1000, took
    for what, sql in XML_PATHS.items():
        offline = _errors(validate_sql(sql))
        live = _errors(fence(sql, LiveCatalog(conn)))
        assert (what, "libxml2" in offline[0], "libxml2" in live[0]) == (what, True, True)


def test_the_fence_names_every_built_in_function_that_hands_text_to_libxml2(
    conn: psycopg.Connection[Any],
) -> None:
    """Offline the fence knows them by name; live by their C symbol: the two lists agree
    with this server's catalog."""
    rows = conn.execute(
        "SELECT proname, prosrc FROM pg_proc WHERE prosrc = ANY (%s) AND oid < %s",
        (sorted(LIBXML_PARSERS), FIRST_USER_OID),
    ).fetchall()
    assert {src for _, src in rows} == LIBXML_PARSERS
    assert {name for name, _ in rows} == (XML_PARSING | UNINTERRUPTIBLE) - {"xmltable"}


def test_numeric_products_outlast_their_timeout_and_the_attack_is_refused(
    conn: psycopg.Connection[Any],
) -> None:
    took = _seconds_under_timeout(conn, f"SELECT length(({_products(8)})::text)")
    assert took > 3 * TIMEOUT_MS / 1000, took
    attack = f"SELECT 1 AS x\nWHERE {_products(400)} < 0"  # the 25 KB expression as reported
    assert len(attack) > 25_000
    for problems in (validate_sql(attack), fence(attack, LiveCatalog(conn))):
        assert [m.split(":")[0] for m in _errors(problems)[:2]] == [
            "an exponent of 65000 is over 1,000",
            f"the query holds {3 * 400} multiplications, divisions, powers, roots or logarithms, "
            f"over {MAX_NUMERIC_WORK}",
        ]


def test_what_the_bounds_leave_is_a_bounded_number_of_operations() -> None:
    """Numbers built at run time (repeat('9', 65000)::numeric) are not literals: such a query
    passes the fence as long as it holds at most MAX_NUMERIC_WORK operations, each ~0.1 s (a
    product) to ~0.8 s (a division) of work no timeout stops. A run that overruns its
    timeout by a margin is quarantined (SECURITY.md)."""
    built = "repeat('9', 65000)::numeric"

    def products(n: int) -> str:
        return "SELECT " + " + ".join(f"{built} * {built}" for _ in range(n)) + " AS x"

    assert validate_sql(products(MAX_NUMERIC_WORK)) == []
    assert "multiplications" in _errors(validate_sql(products(MAX_NUMERIC_WORK + 1)))[0]


# --- the bounds hold whatever way a literal is written --------------------------------------

_STRING_STYLES = st.sampled_from(["plain", "escape", "dollar", "tagged", "unicode"])


def _written(text: str, style: str) -> str:
    """`text` as an SQL string literal in one of PostgreSQL's ways of writing one."""
    if style == "plain":
        return "'" + text.replace("'", "''") + "'"
    if style == "escape":
        return "E'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if style == "dollar":
        return f"$${text}$$"
    if style == "tagged":
        return f"$q${text}$q$"
    escaped = "".join(f"\\{ord(c):04x}" if c in "<!" else c for c in text)
    return "U&'" + escaped.replace("'", "''") + "'"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    digits=st.integers(1, 2 * MAX_NUMBER_DIGITS),
    form=st.sampled_from(["integer", "decimal", "exponent", "string", "negative"]),
)
def test_a_numeric_literal_is_refused_exactly_when_it_has_too_many_digits(
    digits: int, form: str
) -> None:
    if form == "integer":
        literal = "9" * digits
    elif form == "decimal":
        literal = "0." + "0" * (digits - 1) + "5"
    elif form == "exponent":
        literal = f"1e{digits - 1}"
    elif form == "string":
        literal = f"'{'7' * digits}'::numeric"
    else:
        literal = "-" + "9" * digits
    refused = any("digits" in m for m in _errors(validate_sql(f"SELECT {literal} AS n")))
    assert refused == (digits > MAX_NUMBER_DIGITS), literal[:40]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    exponent=st.integers(-3 * MAX_EXPONENT, 3 * MAX_EXPONENT),
    form=st.sampled_from(["operator", "power", "pow", "qualified", "cast", "parenthesised"]),
)
def test_a_literal_exponent_is_refused_exactly_when_it_is_over_the_bound(
    exponent: int, form: str
) -> None:
    sql = {
        "operator": f"SELECT x ^ {exponent} AS p FROM t",
        "power": f"SELECT power(x, {exponent}) AS p FROM t",
        "pow": f"SELECT pow(x, {exponent}) AS p FROM t",
        "qualified": f"SELECT pg_catalog.power(x, {exponent}) AS p FROM t",
        "cast": f"SELECT x ^ {exponent}::numeric AS p FROM t",
        "parenthesised": f"SELECT x ^ ({exponent}) AS p FROM t",
    }[form]
    refused = any("exponent" in m for m in _errors(validate_sql(sql)))
    assert refused == (abs(exponent) > MAX_EXPONENT), sql


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    style=_STRING_STYLES,
    marker=st.sampled_from(["<!DOCTYPE d [<!ENTITY a 'x'>]>", "<!ENTITY b SYSTEM 'f'>"]),
    before=st.text("abc <>&;", max_size=20),
)
def test_a_dtd_in_a_string_is_refused_however_the_string_is_written(
    style: str, marker: str, before: str
) -> None:
    sql = f"SELECT coalesce(xmlelement(name r), {_written(before + marker, style)}) AS x"
    assert any("holds a DTD" in m for m in _errors(validate_sql(sql))), sql


@pytest.mark.parametrize("style", ["plain", "escape", "dollar", "tagged", "unicode"])
def test_a_string_literal_is_refused_past_its_length_bound(style: str) -> None:
    def problems(length: int) -> list[str]:
        text = ("<a " * length)[:length]
        return _errors(validate_sql(f"SELECT {_written(text, style)} AS s"))

    assert problems(MAX_STRING_CHARS) == []
    [refused] = problems(MAX_STRING_CHARS + 1)
    assert refused.startswith(
        f"a string literal of {MAX_STRING_CHARS + 1:,} characters, over {MAX_STRING_CHARS:,}"
    )
