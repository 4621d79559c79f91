"""What the source tests share: the live receipts invariant with its `source:` pointed at a
place the test owns, and the receipts world (schema, invoices) it checks."""

from __future__ import annotations

from pathlib import Path

import psycopg

from monitor.invariants.loader import Invariant, load_file

ROOT = Path(__file__).resolve().parent.parent
LIVE = ROOT / "examples" / "live" / "orphaned_receipts_live.sql"
SHIPPED_SOURCE = """\
-- source:
--   receipt_objects:
--     s3: "s3://receipts-prod/receipts/"
--     columns: [key, size, last_modified]
--     min_age: 10m
--     max_objects: 1000000
--     timeout: 20m
"""


def live_invariant(where: Path, **source: object) -> Invariant:
    """The shipped live form, its source replaced by `source` (YAML flow values)."""
    text = LIVE.read_text()
    assert SHIPPED_SOURCE in text
    lines = "".join(f"--     {key}: {value}\n" for key, value in source.items())
    where.mkdir(parents=True, exist_ok=True)
    path = where / "orphaned_receipts_live.sql"
    path.write_text(text.replace(SHIPPED_SOURCE, f"-- source:\n--   receipt_objects:\n{lines}"))
    invariant, problems = load_file(path, "orphaned_receipts_live")
    assert invariant is not None, problems
    assert [p for p in problems if p.level == "error"] == []
    return invariant


def add_invoices(dsn: str, keys_by_invoice: dict[int, str], age: str = "2 days") -> None:
    """One account, and one invoice per entry whose receipt was uploaded `age` ago."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO accounts (account_id, email) VALUES (1, 'a@example.com') "
            "ON CONFLICT DO NOTHING"
        )
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO invoices (invoice_id, account_id, amount_eur, receipt_key,"
                " receipt_uploaded_at) VALUES (%s, 1, 10, %s, now() - %s::interval)",
                [(i, key, age) for i, key in keys_by_invoice.items()],
            )


def found(rows: list[dict[str, object]]) -> set[tuple[str, str]]:
    return {(str(r["problem"]), str(r["subject"])) for r in rows}
