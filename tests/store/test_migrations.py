"""The state store's schema files: a clean numbered sequence, every type name filled in,
and every step applied on both stores (the `store` fixture opens each at the newest)."""

from __future__ import annotations

import re
from pathlib import Path

import monitor.store
from alerts.ledger import Ledger
from monitor.store.migrations import migrations, statements
from monitor.store.state import StateStore
from monitor.store.storage import PostgresStorage, SqliteStorage, migrate
from monitor.store.writes import open_incident

SCHEMA = Path(monitor.store.__file__).parent / "schema"
SQLITE = ("INTEGER PRIMARY KEY AUTOINCREMENT", "INTEGER", "REAL")


def test_the_schema_files_are_numbered_from_one_without_a_gap() -> None:
    names = sorted(p.name for p in SCHEMA.glob("*.sql"))
    assert [n[:5] for n in names] == [f"{i:04d}_" for i in range(1, len(names) + 1)]
    assert len(migrations(*SQLITE)) == len(names)


def test_every_type_name_is_filled_in_and_no_comment_reaches_the_database() -> None:
    for step in migrations(*SQLITE):
        assert re.findall(r"\{[a-z]+\}", step) == []
        assert [line for line in step.splitlines() if line.lstrip().startswith("--")] == []


def test_a_comment_holding_a_semicolon_is_dropped_before_the_split() -> None:
    text = "-- one; two\nCREATE TABLE t (id {pk}, n {real});\n"
    assert statements(text, {"{pk}": "BIGINT", "{real}": "REAL"}) == (
        "CREATE TABLE t (id BIGINT, n REAL);"
    )


def test_a_new_store_is_at_the_newest_schema_version(store: StateStore) -> None:
    with store.storage.transaction() as tx:
        versions = [int(v) for (v,) in tx.rows("SELECT version FROM invmon_schema ORDER BY 1")]
    assert versions == list(range(1, len(migrations(*SQLITE)) + 1))


def test_the_sent_count_starts_from_the_deliveries_a_store_already_holds(
    bare_storage: SqliteStorage | PostgresStorage,
) -> None:
    """Migration 0017: the ledger's counts read the SENT count it keeps from then on, so it
    starts from what was SENT when migrated."""
    storage = bare_storage
    migrate(storage, storage.migrations[:16])
    with storage.transaction() as tx:
        for n, state in enumerate(["SENT", "SENT", "FAILED", "SENT", "PENDING"]):
            tx.run(
                "INSERT INTO deliveries (idem_key, invariant, channel, action, state,"
                " next_attempt_at, created_at, updated_at) VALUES (?, 'inv', '#c', 'post_root',"
                " ?, '2026-11-01T00:00:00.000000Z', '2026-11-01T00:00:00.000000Z',"
                " '2026-11-01T00:00:00.000000Z')",
                (f"key-{n}", state),
            )
    migrate(storage, storage.migrations)
    assert Ledger(storage).counts() == {"SENT": 3, "FAILED": 1, "PENDING": 1}


def test_an_incident_opened_before_step_18_is_judged_by_its_counts(
    bare_storage: SqliteStorage | PostgresStorage,
) -> None:
    """Migration 0018: an incident opened before it has no record of whether its last run
    was complete (NULL). Its keys are then every row when its count says so, as before."""
    storage = bare_storage
    migrate(storage, storage.migrations[:17])
    stamp = "2026-11-01T00:00:00.000000Z"
    with storage.transaction() as tx:
        for invariant, count in (("all_known", 2), ("past_tracking", 5)):
            [(incident_id,)] = tx.rows(
                "INSERT INTO incidents (invariant, kind, opened_at, first_count, last_count,"
                " last_seen_at, target) VALUES (?, 'violation', ?, ?, ?, ?, 'default')"
                " RETURNING id",
                (invariant, stamp, count, count, stamp),
            )
            for key in ("[1]", "[2]"):  # two keys tracked of `count` rows
                tx.run(
                    "INSERT INTO incident_keys (incident_id, offending_key, first_seen_at,"
                    " last_seen_at) VALUES (?, ?, ?, ?)",
                    (incident_id, key, stamp, stamp),
                )
    migrate(storage, storage.migrations)
    with storage.transaction() as tx:
        found = {
            name: open_incident(tx, name, "violation") for name in ("all_known", "past_tracking")
        }
    assert {name: (i.complete, i.knew_every_row()) for name, i in found.items() if i} == {
        "all_known": (None, True),
        "past_tracking": (None, False),
    }
