"""What monitor/store/inspection.py reads of a store, on both stores: its schema version,
its tables and their rows, the runs kept and its size, without changing it; and the one
log line a migration writes."""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg
import pytest

from monitor.authoring.pgtemp import scratch_database
from monitor.store.inspection import applied_version, inspect, invmon_tables
from monitor.store.migrations import schema_version
from monitor.store.state import StateStore
from monitor.store.storage import PostgresStorage, SqliteStorage, Storage, migrate


def tables_in(storage: Storage) -> list[str]:
    """Every table the database has, as its own catalog lists them."""
    with storage.transaction() as tx:
        if storage.kind == "postgresql":
            found = tx.rows(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
            )
        else:
            found = tx.rows(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name <> 'sqlite_sequence' ORDER BY 1"
            )
    return [str(name) for (name,) in found]


def test_a_new_store_has_every_table_of_the_schema_files_and_nothing_but_its_version(
    store: StateStore,
) -> None:
    report = inspect(store.storage)
    assert tables_in(store.storage) == list(invmon_tables())
    assert report.rows == {name: 0 for name in invmon_tables()} | {
        "invmon_schema": schema_version(),
        "delivery_counts": 1,  # the ledger's SENT deliveries: none yet (alerts/ledger.py)
    }
    with store.storage.transaction() as tx:
        assert tx.rows("SELECT state, n FROM delivery_counts") == [("SENT", 0)]
    assert (report.schema_version, report.known_version) == (schema_version(), schema_version())
    assert (report.pending, report.too_new) == (0, False)
    assert (report.oldest_run, report.newest_run) == (None, None)
    assert report.kind == store.storage.kind


def test_a_store_never_migrated_reads_as_version_zero_and_stays_empty(
    bare_storage: SqliteStorage | PostgresStorage,
) -> None:
    report = inspect(bare_storage)
    assert (report.schema_version, report.pending, report.rows) == (0, schema_version(), {})
    assert applied_version(bare_storage) == 0
    assert tables_in(bare_storage) == []  # reading created nothing, not even invmon_schema


def test_the_runs_kept_are_the_oldest_and_newest_finished(store: StateStore) -> None:
    with store.storage.transaction() as tx:
        for finished in ("2026-11-02T00:00:01.000000Z", "2026-10-30T08:00:00.000000Z"):
            tx.run(
                "INSERT INTO runs (invariant, started_at, finished_at, status, count)"
                " VALUES ('refunds', '2026-10-01T00:00:00.000000Z', ?, 'ok', 0)",
                (finished,),
            )
    report = inspect(store.storage)
    assert (report.oldest_run, report.newest_run) == (
        "2026-10-30T08:00:00.000000Z",
        "2026-11-02T00:00:01.000000Z",
    )
    assert report.rows["runs"] == 2


def test_the_size_of_a_sqlite_store_counts_its_write_ahead_log(tmp_path: Path) -> None:
    store = StateStore.open(path=tmp_path / "state.db")
    try:
        with store.storage.transaction() as tx:
            tx.run("INSERT INTO meta (name, value) VALUES ('filler', ?)", ("x" * 50_000,))
        wal = tmp_path / "state.db-wal"
        assert wal.stat().st_size > 0  # the write is in the log, not checkpointed yet
        main = (tmp_path / "state.db").stat().st_size
        assert inspect(store.storage).size_bytes == main + wal.stat().st_size
    finally:
        store.close()


def test_the_size_of_a_postgresql_store_is_its_tables_with_their_indexes(
    admin_dsn: str,
) -> None:
    with scratch_database(admin_dsn, prefix="invmon_state") as dsn:
        store = StateStore.open(dsn=dsn)
        try:
            with psycopg.connect(dsn) as conn:
                row = conn.execute(
                    "SELECT sum(pg_table_size(c.oid) + pg_indexes_size(c.oid)) FROM pg_class c"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = 'public' AND c.relkind = 'r'"
                ).fetchone()
            assert row is not None
            assert inspect(store.storage).size_bytes == int(row[0])
        finally:
            store.close()


def test_a_migration_logs_one_line_with_its_numbers_and_none_when_up_to_date(
    bare_storage: SqliteStorage | PostgresStorage, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="invmon.store")

    def said() -> list[tuple[str, int, str]]:
        return [(r.name, r.levelno, r.getMessage()) for r in caplog.records]

    migrate(bare_storage, bare_storage.migrations[:3])
    assert said() == [("invmon.store", logging.INFO, "state store migrated 0→3")]
    assert applied_version(bare_storage) == 3
    migrate(bare_storage, bare_storage.migrations)
    assert said()[1:] == [
        ("invmon.store", logging.INFO, f"state store migrated 3→{schema_version()}")
    ]
    migrate(bare_storage, bare_storage.migrations)
    assert len(said()) == 2
    assert applied_version(bare_storage) == schema_version()
