"""The four shipped invariants, each checked against the reference schema. For each one:
it reports exactly the rows that break it, it reports nothing on healthy data (including
the edge cases it must allow), and it finds exactly the violations planted in the demo seed.

Each query runs here as `invmon` runs it: the SQL after the header, in a read-only
transaction.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg.rows import dict_row

ROOT = Path(__file__).resolve().parent.parent
INVARIANTS = ROOT / "invariants"
SEED = ROOT / "deploy" / "demo" / "seed.sql"

SHIPPED = (
    "balance_ledger_drift",
    "duplicate_settled_refunds",
    "expired_lease_jobs",
    "orphaned_receipts",
)
HEADER_KEYS = {
    "description",
    "severity",
    "owner",
    "runbook",
    "schedule",
    "timeout",
    "key",
    "sample",
    "tags",
    "for",
    "channel",
    "max_cost",
}


# --- helpers -----------------------------------------------------------------------------


def read_invariant(name: str) -> tuple[dict[str, Any], str]:
    """The header (the leading `--` lines, read as YAML) and the query after it."""
    lines = (INVARIANTS / f"{name}.sql").read_text().splitlines()
    header: list[str] = []
    while lines and lines[0].startswith("--"):
        header.append(lines.pop(0).removeprefix("--"))
    return yaml.safe_load("\n".join(header)), "\n".join(lines)


def run_script(dsn: str, script: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(script)


def offending_rows(dsn: str, name: str) -> list[dict[str, Any]]:
    _, query = read_invariant(name)
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        conn.read_only = True  # the monitor runs invariants on a read-only replica
        return conn.execute(query).fetchall()


def offending_keys(dsn: str, name: str) -> set[Any]:
    """The header's key of every offending row. A key with several columns gives a tuple.
    Two rows with the same key fail the test, since the key must identify one row."""
    header, _ = read_invariant(name)
    columns = header["key"]
    keys = [
        row[columns[0]] if len(columns) == 1 else tuple(row[c] for c in columns)
        for row in offending_rows(dsn, name)
    ]
    assert len(keys) == len(set(keys)), f"{name}: key {columns} repeats in {keys}"
    return set(keys)


ACCOUNTS = """
    INSERT INTO accounts (account_id, email) VALUES
        (1, 'one@example.com'), (2, 'two@example.com'), (3, 'three@example.com');
"""


# --- every shipped file ------------------------------------------------------------------


def test_every_file_in_the_invariants_folder_is_covered_by_this_module() -> None:
    assert {p.stem for p in INVARIANTS.glob("*.sql")} == set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_the_header_uses_known_keys_and_the_key_columns_are_output_columns(
    schema_database: str, name: str
) -> None:
    header, query = read_invariant(name)
    assert set(header) <= HEADER_KEYS
    assert header["description"].strip()
    assert header["severity"] in {"critical", "warning", "info"}
    assert header["runbook"].startswith("https://")
    with psycopg.connect(schema_database) as conn:
        conn.read_only = True
        columns = [c.name for c in conn.execute(query).description or []]
    # The monitor wraps the query as a subquery, where duplicate column names are ambiguous.
    assert len(columns) == len(set(columns))
    assert header["key"]
    assert set(header["key"]) <= set(columns)


# --- duplicate_settled_refunds -----------------------------------------------------------


def test_a_dispute_with_two_settled_refunds_is_reported_once(schema_database: str) -> None:
    run_script(
        schema_database,
        ACCOUNTS
        + """
        INSERT INTO disputes (dispute_id, account_id, reason, amount_eur) VALUES
            (10, 1, 'charged twice', 20.00), (20, 2, 'not received', 15.00),
            (30, 3, 'damaged', 9.99);
        INSERT INTO refunds (refund_id, dispute_id, amount_eur, status, provider_ref, settled_at)
        VALUES
            (101, 10, 20.00, 'settled', 'rf_a', now() - interval '1 hour'),
            (102, 10, 20.00, 'settled', 'rf_b', now()),
            (201, 20, 15.00, 'settled', 'rf_c', now() - interval '2 hours'),
            (202, 20, 15.00, 'failed',  'rf_d', NULL),
            (203, 20, 15.00, 'settled', 'rf_e', now() - interval '1 hour'),
            (204, 20,  5.00, 'settled', 'rf_f', now()),
            (301, 30,  9.99, 'settled', 'rf_g', now());
        """,
    )

    assert offending_keys(schema_database, "duplicate_settled_refunds") == {10, 20}
    rows = offending_rows(schema_database, "duplicate_settled_refunds")
    assert {
        r["dispute_id"]: (r["settled_refunds"], r["total_eur"], r["refund_ids"]) for r in rows
    } == {
        10: (2, Decimal("40.00"), [101, 102]),
        20: (3, Decimal("35.00"), [201, 203, 204]),
    }


def test_failed_and_pending_attempts_beside_one_settled_refund_are_not_duplicates(
    schema_database: str,
) -> None:
    run_script(
        schema_database,
        ACCOUNTS
        + """
        INSERT INTO disputes (dispute_id, account_id, reason, amount_eur) VALUES
            (10, 1, 'retried', 20.00), (20, 2, 'waiting', 15.00),
            (30, 3, 'gave up', 9.99), (40, 3, 'no refund yet', 5.00);
        INSERT INTO refunds (refund_id, dispute_id, amount_eur, status, settled_at) VALUES
            (101, 10, 20.00, 'failed',  NULL),
            (102, 10, 20.00, 'settled', now()),
            (201, 20, 15.00, 'pending', NULL),
            (301, 30,  9.99, 'failed',  NULL),
            (302, 30,  9.99, 'failed',  NULL);
        """,
    )

    assert offending_rows(schema_database, "duplicate_settled_refunds") == []


# --- balance_ledger_drift ----------------------------------------------------------------


def test_accounts_whose_balance_differs_from_their_ledger_are_reported_with_the_drift(
    schema_database: str,
) -> None:
    run_script(
        schema_database,
        """
        INSERT INTO accounts (account_id, email, credit_balance_eur) VALUES
            (1, 'higher@example.com',    40.00),
            (2, 'no-ledger@example.com', 15.00),
            (3, 'lower@example.com',      5.00),
            (4, 'zeroed@example.com',     0.00),
            (5, 'healthy@example.com',   12.00);
        INSERT INTO credit_log (account_id, amount_eur, reason) VALUES
            (1, 20.00, 'refund'), (1, 10.00, 'goodwill'),
            (3, 20.00, 'refund'), (3, -10.00, 'checkout'),
            (4, 7.50, 'promotion'),
            (5, 12.00, 'refund');
        """,
    )

    assert offending_keys(schema_database, "balance_ledger_drift") == {1, 2, 3, 4}
    rows = offending_rows(schema_database, "balance_ledger_drift")
    assert {r["account_id"]: (r["drift_eur"], r["ledger_entries"]) for r in rows} == {
        1: (Decimal("10.00"), 2),
        2: (Decimal("15.00"), 0),
        3: (Decimal("-5.00"), 2),
        4: (Decimal("-7.50"), 1),
    }


def test_accounts_matching_their_ledger_including_zero_balance_and_no_ledger_are_not_reported(
    schema_database: str,
) -> None:
    run_script(
        schema_database,
        """
        INSERT INTO accounts (account_id, email, credit_balance_eur) VALUES
            (1, 'new@example.com',      0.00),
            (2, 'spent@example.com',    0.00),
            (3, 'holding@example.com', 25.00),
            (4, 'overdrawn@example.com', -3.00);
        INSERT INTO credit_log (account_id, amount_eur, reason) VALUES
            (2, 12.50, 'promotion'), (2, -12.50, 'checkout'),
            (3, 50.00, 'refund'), (3, -25.00, 'checkout'),
            (4, 10.00, 'refund'), (4, -13.00, 'checkout');
        """,
    )

    assert offending_rows(schema_database, "balance_ledger_drift") == []


# --- expired_lease_jobs ------------------------------------------------------------------


def test_in_progress_jobs_with_an_expired_lease_or_no_lease_at_all_are_reported(
    schema_database: str,
) -> None:
    run_script(
        schema_database,
        """
        INSERT INTO jobs (job_id, kind, state, owner, lease_until) VALUES
            (1, 'render_receipt', 'in_progress', 'worker-a', now() - interval '3 minutes'),
            (2, 'settle_refund',  'in_progress', 'worker-b', now() - interval '1 day'),
            (3, 'send_receipt',   'in_progress', NULL,       NULL),
            (4, 'send_receipt',   'in_progress', 'worker-c', NULL),
            (5, 'export_ledger',  'in_progress', NULL,       now() + interval '5 minutes'),
            (6, 'export_ledger',  'in_progress', 'worker-d', now() + interval '5 minutes');
        """,
    )

    assert offending_keys(schema_database, "expired_lease_jobs") == {1, 2, 3, 4, 5}
    rows = offending_rows(schema_database, "expired_lease_jobs")
    assert {r["job_id"]: r["problem"] for r in rows} == {
        1: "lease_expired",
        2: "lease_expired",
        3: "no_lease",
        4: "no_lease",
        5: "no_lease",
    }


def test_a_lease_expired_inside_the_grace_period_or_a_finished_job_is_not_reported(
    schema_database: str,
) -> None:
    run_script(
        schema_database,
        """
        INSERT INTO jobs (job_id, kind, state, owner, lease_until) VALUES
            (1, 'render_receipt', 'in_progress', 'worker-a', now() - interval '30 seconds'),
            (2, 'render_receipt', 'in_progress', 'worker-b', now() + interval '5 minutes'),
            (3, 'settle_refund',  'done',        'worker-a', now() - interval '1 day'),
            (4, 'settle_refund',  'failed',      'worker-b', now() - interval '1 day'),
            (5, 'export_ledger',  'abandoned',   'worker-c', now() - interval '9 days'),
            (6, 'send_receipt',   'accepted',    NULL,       NULL),
            (7, 'send_receipt',   'done',        NULL,       NULL);
        """,
    )

    assert offending_rows(schema_database, "expired_lease_jobs") == []


# --- orphaned_receipts -------------------------------------------------------------------

# The inventory report is from yesterday (UTC), as in production. A receipt uploaded days
# ago must be in it; one uploaded an hour ago cannot be yet.
INVENTORY_DATE = "(now() AT TIME ZONE 'UTC' - interval '1 day')::date"


def test_unreferenced_shared_and_missing_receipts_are_each_reported_under_their_problem(
    schema_database: str,
) -> None:
    run_script(
        schema_database,
        ACCOUNTS
        + f"""
        INSERT INTO invoices (invoice_id, account_id, amount_eur, receipt_key,
                              receipt_uploaded_at) VALUES
            (1, 1, 10.00, 'r/one.pdf',     now() - interval '5 days'),
            (2, 2, 20.00, 'r/shared.pdf',  now() - interval '5 days'),
            (3, 3, 30.00, 'r/shared.pdf',  now() - interval '4 days'),
            (4, 1, 40.00, 'r/missing.pdf', now() - interval '5 days');
        INSERT INTO receipt_objects (object_key, size_bytes, last_modified, inventory_date)
        VALUES
            ('r/one.pdf',    1000, now() - interval '5 days', {INVENTORY_DATE}),
            ('r/shared.pdf', 1000, now() - interval '5 days', {INVENTORY_DATE}),
            ('r/orphan.pdf', 1000, now() - interval '3 days', {INVENTORY_DATE});
        """,
    )

    assert offending_keys(schema_database, "orphaned_receipts") == {
        ("unreferenced", "r/orphan.pdf"),
        ("referenced_by_many", "r/shared.pdf"),
        ("missing_object", "4"),
    }
    rows = offending_rows(schema_database, "orphaned_receipts")
    assert {(r["problem"], r["object_key"], tuple(r["invoice_ids"])) for r in rows} == {
        ("unreferenced", "r/orphan.pdf", ()),
        ("referenced_by_many", "r/shared.pdf", (2, 3)),
        ("missing_object", "r/missing.pdf", (4,)),
    }


def test_a_shared_key_with_no_object_is_reported_once_as_shared_and_once_per_invoice(
    schema_database: str,
) -> None:
    run_script(
        schema_database,
        ACCOUNTS
        + f"""
        INSERT INTO invoices (invoice_id, account_id, amount_eur, receipt_key,
                              receipt_uploaded_at) VALUES
            (5, 1, 10.00, 'r/gone.pdf', now() - interval '5 days'),
            (6, 2, 20.00, 'r/gone.pdf', now() - interval '5 days'),
            (7, 3, 30.00, 'r/kept.pdf', now() - interval '5 days');
        INSERT INTO receipt_objects (object_key, size_bytes, last_modified, inventory_date)
        VALUES ('r/kept.pdf', 1000, now() - interval '5 days', {INVENTORY_DATE});
        """,
    )

    assert offending_keys(schema_database, "orphaned_receipts") == {
        ("referenced_by_many", "r/gone.pdf"),
        ("missing_object", "5"),
        ("missing_object", "6"),
    }


def test_invoices_without_a_receipt_or_with_one_newer_than_the_inventory_are_not_reported(
    schema_database: str,
) -> None:
    run_script(
        schema_database,
        ACCOUNTS
        + f"""
        INSERT INTO invoices (invoice_id, account_id, amount_eur, receipt_key,
                              receipt_uploaded_at) VALUES
            (1, 1, 10.00, 'r/one.pdf', now() - interval '5 days'),
            (2, 2, 20.00, 'r/two.pdf', now() - interval '9 days'),
            (3, 3, 30.00, NULL,        NULL),
            (4, 1, 40.00, 'r/new.pdf', now() - interval '1 hour');
        INSERT INTO receipt_objects (object_key, size_bytes, last_modified, inventory_date)
        VALUES
            ('r/one.pdf', 1000, now() - interval '5 days', {INVENTORY_DATE}),
            ('r/two.pdf', 1000, now() - interval '9 days', {INVENTORY_DATE});
        """,
    )

    assert offending_rows(schema_database, "orphaned_receipts") == []


def test_before_any_inventory_is_loaded_no_invoice_is_reported_missing(
    schema_database: str,
) -> None:
    run_script(
        schema_database,
        ACCOUNTS
        + """
        INSERT INTO invoices (invoice_id, account_id, amount_eur, receipt_key,
                              receipt_uploaded_at) VALUES
            (1, 1, 10.00, 'r/one.pdf', now() - interval '30 days');
        """,
    )

    assert offending_rows(schema_database, "orphaned_receipts") == []


# --- the demo seed -----------------------------------------------------------------------


def test_the_demo_seed_plants_exactly_the_violations_its_header_documents(
    schema_database: str,
) -> None:
    run_script(schema_database, SEED.read_text())

    assert offending_keys(schema_database, "duplicate_settled_refunds") == {2003, 2005}
    assert offending_keys(schema_database, "balance_ledger_drift") == {1004, 1005, 1006}
    assert offending_keys(schema_database, "expired_lease_jobs") == {4004, 4005}
    assert offending_keys(schema_database, "orphaned_receipts") == {
        ("unreferenced", "receipts/inv-5008.pdf"),
        ("referenced_by_many", "receipts/inv-5004.pdf"),
        ("missing_object", "5006"),
        ("missing_object", "5008"),
    }
    refunds = offending_rows(schema_database, "duplicate_settled_refunds")
    assert {r["dispute_id"]: r["refund_ids"] for r in refunds} == {
        2003: [3004, 3005],
        2005: [3007, 3009, 3010],
    }
    drift = offending_rows(schema_database, "balance_ledger_drift")
    assert {r["account_id"]: r["drift_eur"] for r in drift} == {
        1004: Decimal("10.00"),
        1005: Decimal("15.00"),
        1006: Decimal("-5.00"),
    }
    jobs = offending_rows(schema_database, "expired_lease_jobs")
    assert {r["job_id"]: r["problem"] for r in jobs} == {4004: "lease_expired", 4005: "no_lease"}
