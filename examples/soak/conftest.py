"""The soak's database and seeds, as an application's conftest.py would set them up.

- One database for the session, with the reference schema; each test empties it first, so
  every seed starts from no rows (it owns its state) and no database is made per seed.
- `invmon_dsn` is overridden to return it: the plugin runs the invariants there.
- Seeds: the first QUICK by default (seconds); all SOAK with --soak. A case named on the
  command line (`test_refunds_soak.py::test_refunds_soak[137-check_then_create]`, as a
  failure's rerun line gives it) runs whatever its seed, so every failure replays alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from monitor.authoring.pgtemp import apply_sql, scratch_database, temporary_server

# The reference schema the shipped invariants are written against, from this repository.
SCHEMA = Path(__file__).resolve().parents[2] / "deploy" / "demo" / "schema.sql"
QUICK = 8
SOAK = 200


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help=f"run all {SOAK} seeds, not {QUICK}")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "seed" in metafunc.fixturenames:
        metafunc.parametrize("seed", range(SOAK))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak") or any("[" in arg for arg in config.args):
        return
    quick: list[pytest.Item] = []
    rest: list[pytest.Item] = []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        seed = params.get("seed")
        (rest if isinstance(seed, int) and seed >= QUICK else quick).append(item)
    if rest:
        config.hook.pytest_deselected(items=rest)
        items[:] = quick


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    """INVMON_TEST_DSN (an admin DSN) when set, else a throwaway server from pgserver."""
    configured = os.environ.get("INVMON_TEST_DSN")
    if configured:
        yield configured
        return
    with temporary_server() as dsn:
        yield dsn


@pytest.fixture(scope="session")
def refunds_database(server: str) -> Iterator[str]:
    with scratch_database(server, prefix="refunds_soak") as dsn:
        apply_sql(dsn, SCHEMA.read_text())
        yield dsn


@pytest.fixture
def conn(refunds_database: str) -> Iterator[psycopg.Connection]:
    """This test's connection, to a database it has emptied."""
    with psycopg.connect(refunds_database, autocommit=True) as connection:
        connection.execute(
            "TRUNCATE accounts, credit_log, disputes, refunds, jobs, invoices, receipt_objects"
            " RESTART IDENTITY"
        )
        yield connection


@pytest.fixture
def invmon_dsn(refunds_database: str) -> str:
    """Where the plugin runs the invariants: the database the soak wrote."""
    return refunds_database
