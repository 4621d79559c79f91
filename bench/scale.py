"""1,000 invariants: generated files for the load and per-run cost measurements.

Each file is a real invariant over the bench data (bench/data.py) with its own literals, so
no two texts are alike (a cache keyed by text gains nothing within one load) and each query
is an index lookup: the database's share of a run is small, and what remains is invmon's own
time. Every tenth one is violated, so rows, keys and sample handling are part of the cost.
"""

from __future__ import annotations

from pathlib import Path

HEADER = """-- description: Bench invariant {i} ({kind}).
-- severity: warning
-- owner: "@bench"
-- schedule: every 15m
-- timeout: 30s
-- key: [{key}]
-- sample: 20
-- tags: [bench, {kind}]
"""

TEMPLATES: dict[str, tuple[str, str]] = {
    # (key column, query); {lo}/{hi} bound an id range that the planner reads by index.
    "lease": (
        "job_id",
        """SELECT job_id, kind, owner, lease_until, now() - lease_until AS overdue_by
FROM jobs
WHERE state = 'in_progress' AND job_id BETWEEN {lo} AND {hi}
  AND (owner IS NULL OR lease_until < now() - interval '2 minutes')""",
    ),
    "refunds": (
        "dispute_id",
        """SELECT r.dispute_id, count(*) AS settled,
       array_agg(r.refund_id ORDER BY r.refund_id) AS ids
FROM refunds AS r
WHERE r.status = 'settled' AND r.dispute_id BETWEEN {lo} AND {hi}
GROUP BY r.dispute_id
HAVING count(*) > 1""",
    ),
    "drift": (
        "account_id",
        """SELECT a.account_id, a.credit_balance_eur, sum(l.amount_eur) AS ledger_eur
FROM accounts AS a
JOIN credit_log AS l ON l.account_id = a.account_id
WHERE a.account_id BETWEEN {lo} AND {hi}
GROUP BY a.account_id, a.credit_balance_eur
HAVING a.credit_balance_eur <> sum(l.amount_eur)""",
    ),
    "receipts": (
        "invoice_id",
        """SELECT i.invoice_id, i.receipt_key
FROM invoices AS i
WHERE i.invoice_id BETWEEN {lo} AND {hi}
  AND NOT EXISTS (SELECT 1 FROM receipt_objects AS o WHERE o.object_key = i.receipt_key)""",
    ),
}


def write(folder: Path, count: int = 1000, every: int = 1000) -> list[Path]:
    """`count` invariant files in `folder`; ranges are chosen so about one in ten holds a
    violation planted by bench/data.py (one id in `every` of each kind breaks a rule)."""
    folder.mkdir(parents=True, exist_ok=True)
    kinds = list(TEMPLATES)
    paths = []
    for i in range(count):
        kind = kinds[i % len(kinds)]
        key, query = TEMPLATES[kind]
        # Nine in ten windows sit between violations; the tenth covers one.
        violated = i % 10 == 0
        # 90 windows fit in the smallest table (100k accounts at scale 1); the round number
        # widens each window by one, so no two files share a query text.
        base = (i % 90 + 1) * every + (every // 2 if kind == "receipts" else 0)
        widen = i // 90
        lo, hi = (base - 5 - widen, base + 5) if violated else (base + 20, base + 30 + widen)
        path = folder / f"bench_{kind}_{i:04d}.sql"
        path.write_text(HEADER.format(i=i, kind=kind, key=key) + query.format(lo=lo, hi=hi) + "\n")
        paths.append(path)
    return paths
