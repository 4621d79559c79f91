"""The bounded query is compiled (JIT) only when the invariant's own text would be compiled
with optimization, and then with the text's passes.

PostgreSQL decides on JIT by a plan's estimated cost, and the wrapper's sort and window
functions add to it: orphaned_receipts crossed jit_above_cost only because of them, and ran
10% slower compiled. Compiled unoptimized, the wrapper cost duplicate_settled_refunds 12% of
its run. `execute` plans the text alone first and decides from its plan (query.jit_settings).
What the server actually did is read from the server itself: auto_explain reports each
statement's plan, JIT options included, as a NOTICE."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from helpers import invariant, sql
from psycopg.types.json import JsonLoader

from monitor.execution.execute import LiveFence, execute, register_loaders
from monitor.execution.query import JIT_OFF, Column, bounded_query, jit_settings, planning_query

# A seq scan with ~1,000 rows to sort by key: the wrapper's sort is what it adds.
TABLE = """
CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL);
INSERT INTO t SELECT g, g % 997 FROM generate_series(1, 100000) g;
ANALYZE t;
"""
QUERY = "SELECT id, v\nFROM t\nWHERE v < 10"
COUNT = sum(1 for g in range(1, 100_001) if g % 997 < 10)
BOUNDED = bounded_query(QUERY, [Column("id", 23), Column("v", 23)], [0], full=5, fetch=5, cell=64)


def plan_of(conn: psycopg.Connection[Any], text: str) -> tuple[float, object]:
    """(estimated total cost, the JIT section or None) of `text`, by EXPLAIN."""
    cur = conn.cursor()
    cur.adapters.register_loader("json", JsonLoader)  # as execute reads its plan
    explained = cur.execute(f"EXPLAIN (FORMAT JSON) {text}").fetchone()
    assert explained is not None
    top = explained[0][0]
    return float(top["Plan"]["Total Cost"]), top.get("JIT")


@pytest.fixture
def explained(database: str) -> Iterator[tuple[psycopg.Connection[Any], list[str]]]:
    """A connection whose every statement's plan comes back as a NOTICE (the list)."""
    sql(database, TABLE)
    with psycopg.connect(database, autocommit=True) as conn:
        if conn.execute("SELECT pg_catalog.pg_jit_available()").fetchone() != (True,):
            pytest.skip("the test server has no JIT provider")
        try:
            conn.execute("LOAD 'auto_explain'")
        except psycopg.Error:
            pytest.skip("the test server has no auto_explain")
        conn.execute(
            "SET auto_explain.log_min_duration = 0; SET auto_explain.log_level = 'notice';"
            " SET auto_explain.log_format = 'json'; SET auto_explain.log_nested_statements = on"
        )
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        register_loaders(conn)
        yield conn, notices


def bounded_plan(notices: list[str]) -> dict[str, Any]:
    """The plan auto_explain reported for the bounded query, the one with our count."""
    plans = [json.loads(n.split("plan:", 1)[1]) for n in notices if "plan:" in n]
    ours = [
        p
        for p in plans
        if "invmon_total_count" in p["Query Text"] and not p["Query Text"].startswith("EXPLAIN")
    ]
    assert len(ours) == 1, [p["Query Text"][:80] for p in plans]
    found: dict[str, Any] = ours[0]
    return found


def run(conn: psycopg.Connection[Any]) -> None:
    evaluation = execute(
        conn,
        invariant("jit", QUERY, key=("id",)),
        sample=5,
        lock_timeout=timedelta(seconds=5),
        live_fence=LiveFence(),
    )
    assert evaluation.count == COUNT


def test_a_wrapper_that_crosses_jit_above_cost_is_not_compiled_when_the_text_is_not(
    explained: tuple[psycopg.Connection[Any], list[str]],
) -> None:
    conn, notices = explained
    own, _ = plan_of(conn, QUERY)
    wrapped, _ = plan_of(conn, BOUNDED)
    assert wrapped > own  # the premise: the wrapper alone adds cost
    # A threshold between the two: the text alone is not compiled, the wrapper would be.
    conn.execute(f"SET jit_above_cost = {(own + wrapped) / 2}")
    assert plan_of(conn, QUERY)[1] is None
    run(conn)
    assert "JIT" not in bounded_plan(notices)


@pytest.mark.parametrize(
    ("optimize", "inline"), [(False, False), (True, False), (False, True), (True, True)]
)
def test_a_text_compiled_with_optimization_has_its_bounded_query_compiled_with_its_passes(
    explained: tuple[psycopg.Connection[Any], list[str]], optimize: bool, inline: bool
) -> None:
    conn, notices = explained
    own, _ = plan_of(conn, QUERY)
    # Each pass on for the text (cost past 0) or off for it while the wrapper, costlier,
    # would cross it (a threshold between the two costs): so only following the text's own
    # plan gives the same passes.
    conn.execute("SET jit_above_cost = 0")
    for name, on in (("jit_optimize_above_cost", optimize), ("jit_inline_above_cost", inline)):
        conn.execute(f"SET {name} = {0 if on else own + 0.5}")
    _, jit = plan_of(conn, QUERY)
    assert isinstance(jit, dict)
    assert (jit["Options"]["Optimization"], jit["Options"]["Inlining"]) == (optimize, inline)
    run(conn)
    plan = bounded_plan(notices)
    if not optimize:  # the first level only: not compiled at all
        assert "JIT" not in plan
        return
    options = plan["JIT"]["Options"]
    assert (options["Optimization"], options["Inlining"]) == (optimize, inline)


def test_the_planning_query_plans_the_text_and_runs_none_of_it(database: str) -> None:
    sql(database, "CREATE TABLE hits (n int); INSERT INTO hits VALUES (0)")
    counting = "SELECT n FROM hits WHERE pg_catalog.nextval('s') > 0"
    sql(database, "CREATE SEQUENCE s")
    with psycopg.connect(database) as conn:
        answer = conn.execute(planning_query(counting)).fetchone()
        assert answer is not None and jit_settings(answer[0]) is not None
        assert conn.execute("SELECT last_value, is_called FROM s").fetchone() == (1, False)


def test_the_settings_follow_explain_s_jit_section_and_nothing_else() -> None:
    def answer(jit: object = None) -> list[dict[str, object]]:
        top: dict[str, object] = {"Plan": {"Node Type": "Result", "Total Cost": 1.0}}
        if jit is not None:
            top["JIT"] = jit
        return [top]

    assert jit_settings(answer()) == JIT_OFF
    for optimize, inline in ((False, False), (True, False), (False, True), (True, True)):
        options = {"Inlining": inline, "Optimization": optimize, "Expressions": True}
        assert jit_settings(answer({"Functions": 3, "Options": options})) == (
            "SET LOCAL jit_above_cost = 0; SET LOCAL jit_optimize_above_cost = 0; "
            f"SET LOCAL jit_inline_above_cost = {0 if inline else -1}"
            if optimize
            else JIT_OFF
        )
    # Anything not shaped as EXPLAIN answers leaves the server's own settings.
    odd: list[object] = [None, [], {}, "[]", [None], [[]], answer("yes"), answer({"Options": 0})]
    assert [jit_settings(o) for o in odd] == [None] * len(odd)
