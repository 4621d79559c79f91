"""Fixtures: a real PostgreSQL for every test, and a database of its own for each one.

INVMON_TEST_DSN (an admin DSN, e.g. postgresql://postgres@127.0.0.1:5432/postgres) points
the suite at an existing server; without it a throwaway server is started once per run
from the `pgserver` package, so a fresh laptop needs nothing but `pip install`.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_switch import pings  # noqa: F401  (a fixture: the dead man's switch)
from helpers import FakeClock, items_table
from scenario import INVARIANT, World

from monitor.authoring.pgtemp import apply_sql, scratch_database, temporary_server
from monitor.store.state import StateStore
from monitor.store.storage import PostgresStorage, SqliteStorage

# The `standby_pair` fixture (tests/standby.py): a real streaming standby. Registered as a
# plugin rather than imported, so pytest rewrites its asserts too.
pytest_plugins = ["standby", "pytester"]

ROOT = Path(__file__).resolve().parent.parent
INVARIANTS = ROOT / "invariants"
DEMO = ROOT / "deploy" / "demo"


@pytest.fixture(scope="session")
def admin_dsn() -> Iterator[str]:
    configured = os.environ.get("INVMON_TEST_DSN")
    if configured:
        yield configured
        return
    with temporary_server() as dsn:
        yield dsn


@pytest.fixture
def database(admin_dsn: str) -> Iterator[str]:
    """An empty database owned by this test, dropped afterwards."""
    with scratch_database(admin_dsn, prefix="invmon_test") as dsn:
        yield dsn


@pytest.fixture(scope="module")
def fence_database(admin_dsn: str) -> Iterator[str]:
    """The fence corpora's tables (tests/fence/corpus), read by every test of a module; a
    case that needs more creates it in a transaction it rolls back."""
    with scratch_database(admin_dsn, prefix="invmon_fence") as dsn:
        apply_sql(dsn, (DEMO / "schema.sql").read_text())
        apply_sql(dsn, (ROOT / "tests" / "fence" / "corpus" / "schema.sql").read_text())
        yield dsn


@pytest.fixture
def schema_database(database: str) -> str:
    """This test's own database with the reference (refunds) schema and no rows."""
    apply_sql(database, (DEMO / "schema.sql").read_text())
    return database


@pytest.fixture(params=["sqlite", "postgres"])
def bare_storage(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[SqliteStorage | PostgresStorage]:
    """A state store's database that no invmon has migrated yet, once as a SQLite file and
    once in PostgreSQL."""
    if request.param == "sqlite":
        storage: SqliteStorage | PostgresStorage = SqliteStorage(tmp_path / "state.db")
        yield storage
        storage.close()
        return
    with scratch_database(request.getfixturevalue("admin_dsn"), prefix="invmon_state") as dsn:
        storage = PostgresStorage(dsn)
        yield storage
        storage.close()


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    """The daemon's state store, once as a SQLite file and once in PostgreSQL."""
    if request.param == "sqlite":
        opened = StateStore.open(path=tmp_path / "state.db")
        yield opened
        opened.close()
        return
    admin = request.getfixturevalue("admin_dsn")
    with scratch_database(admin, prefix="invmon_state") as dsn:
        opened = StateStore.open(dsn=dsn)
        yield opened
        opened.close()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="also run the long fault-injection sweeps")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="long sweep: run with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _server_wide(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """A test marked `server_wide` watches what the whole PostgreSQL server did (its WAL,
    its locks) and so runs while no other test does: it takes this lock exclusively, and
    every other test takes it shared. The file is in the folder every xdist worker's
    temporary folder is under, so the workers share it."""
    exclusive = request.node.get_closest_marker("server_wide") is not None
    path = tmp_path_factory.getbasetemp().parent / "invmon-server-wide.lock"
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture
def world(database: str, tmp_path: Path) -> Iterator[World]:
    """A monitored table of items, the scripted invariant, a state store and a fake clock."""
    items_table(database)
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "bad_items.sql").write_text(INVARIANT)
    store = StateStore.open(path=tmp_path / "state.db")
    yield World(database, folder, store, FakeClock())
    store.close()
