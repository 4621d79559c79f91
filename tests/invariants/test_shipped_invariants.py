"""The shipped invariants are tested by their own cases: every case of every
`invariants/*.test.yaml` is one pytest case here, run through the same executor as the
daemon (as sqlfluff runs its rule YAML files through one parametrized test). Adding an
invariant with its cases needs no Python. The demo seed is checked against
deploy/demo/planted.yaml the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from monitor.authoring.fixtures import Case, canonical_key, compare, fixture_path, load_fixture
from monitor.authoring.pgtemp import apply_sql, scratch_database
from monitor.authoring.tester import FIXTURE_LIMITS, KEY_LIMIT, LOCK_TIMEOUT, run_case
from monitor.execution.execute import CLIENT_ENCODING, LiveFence, execute, register_loaders
from monitor.execution.rows import offending_key
from monitor.invariants.loader import Invariant, load_directory

ROOT = Path(__file__).resolve().parents[2]
INVARIANTS = ROOT / "invariants"
DEMO = ROOT / "deploy" / "demo"
LOADED = load_directory(INVARIANTS)
SHIPPED = {inv.name: inv for inv in LOADED.invariants}
CASES = [
    (inv.name, case)
    for inv in LOADED.invariants
    if fixture_path(inv.path).exists()
    for case in load_fixture(fixture_path(inv.path), inv.key).cases
]
PLANTED: dict[str, dict[str, Any]] = yaml.safe_load((DEMO / "planted.yaml").read_text())


@pytest.fixture(scope="module")
def schema_connection(admin_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """One database with the reference schema for every case; each case empties it."""
    with scratch_database(admin_dsn, prefix="invmon_shipped") as dsn:
        apply_sql(dsn, (DEMO / "schema.sql").read_text())
        with psycopg.connect(dsn, autocommit=True, client_encoding=CLIENT_ENCODING) as conn:
            register_loaders(conn)
            yield conn


def test_every_shipped_file_loads_cleanly_and_has_a_firing_and_a_holding_case() -> None:
    assert LOADED.problems == []
    assert set(SHIPPED) == {p.stem for p in INVARIANTS.glob("*.sql")}
    for name, inv in SHIPPED.items():
        cases = [case for shipped, case in CASES if shipped == name]
        assert any(c.fires for c in cases), f"{name}: no case shows it firing"
        assert any(c.count == 0 for c in cases), f"{name}: no case shows it holding"
        assert inv.header.runbook and inv.header.owner and inv.key, name


@pytest.mark.parametrize(("name", "case"), CASES, ids=[f"{n}: {c.name}" for n, c in CASES])
def test_each_case_of_each_shipped_invariant(
    name: str, case: Case, schema_connection: psycopg.Connection[Any]
) -> None:
    result = run_case(schema_connection, SHIPPED[name], case, LiveFence())
    assert result.passed, result.describe()


@pytest.fixture(scope="module")
def seeded(admin_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with scratch_database(admin_dsn, prefix="invmon_seed") as dsn:
        apply_sql(dsn, (DEMO / "schema.sql").read_text())
        apply_sql(dsn, (DEMO / "seed.sql").read_text())
        with psycopg.connect(dsn, autocommit=True, client_encoding=CLIENT_ENCODING) as conn:
            register_loaders(conn)
            yield conn


def test_planted_lists_every_shipped_invariant() -> None:
    assert set(PLANTED) == set(SHIPPED)


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_the_demo_seed_plants_exactly_what_planted_yaml_says(
    name: str, seeded: psycopg.Connection[Any]
) -> None:
    inv: Invariant = SHIPPED[name]
    expect = PLANTED[name]
    keys = expect.get("keys")
    case = Case(
        "the demo seed",
        1,
        {},
        keys=None if keys is None else sorted(canonical_key(k) for k in keys),
        count=expect.get("count"),
        rows_expected=expect.get("rows"),
    )
    evaluation = execute(
        seeded,
        inv,
        sample=KEY_LIMIT,
        limits=FIXTURE_LIMITS,
        lock_timeout=LOCK_TIMEOUT,
        live_fence=LiveFence(),
    )
    found = [offending_key(row, inv.key) for row in evaluation.rows]
    result = compare(case, found, evaluation.count, evaluation.rows)
    assert result.passed, result.describe()
