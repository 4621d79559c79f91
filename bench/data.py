"""A deterministic refunds data set at a chosen scale, with a controlled share of violations.

The same rules are written twice on purpose: once as SQL that generates the rows on the server
(fast: generate_series, no random()), and once in Python that says which ids break each shipped
invariant. `check` compares the two with `==` on exact counts before anything is timed, so a
benchmark can never time queries over data that does not hold what it claims.

    python bench/data.py --dsn postgresql://postgres@127.0.0.1:5432/postgres \
        [--scale 1] [--every 1000]

Scale 1 is 100k accounts, 2M ledger rows, 800k disputes, 1M refunds, 200k jobs, 300k invoices
and their receipt objects. One row in `every` of each kind breaks an invariant.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "deploy" / "demo" / "schema.sql"
GENERATOR_VERSION = 1  # bump when the rules change, so a cached database is rebuilt

# Fixed instants, so that the data and the expected counts do not depend on when it is made.
LONG_AGO = "2020-01-01 00:00:00+00"
UPLOADED = "2026-01-01 00:00:00+00"
INVENTORY_DATE = "2026-06-01"
LEASE_FAR_AHEAD = "2099-01-01 00:00:00+00"


@dataclass(frozen=True)
class Shape:
    scale: float = 1.0
    every: int = 1000  # one row in `every` breaks its invariant

    def __post_init__(self) -> None:
        if self.every < 10:
            raise ValueError("every must be at least 10 (the rules need room between cases)")

    def n(self, base: int) -> int:
        return max(self.every, int(base * self.scale))

    @property
    def accounts(self) -> int:
        return self.n(100_000)

    @property
    def ledger(self) -> int:
        return self.accounts * 20

    @property
    def disputes(self) -> int:
        return self.n(800_000)

    @property
    def refunds(self) -> int:
        return self.n(1_000_000)

    @property
    def jobs(self) -> int:
        return self.n(200_000)

    @property
    def invoices(self) -> int:
        return self.n(300_000)


# ---- the rules, in Python: which ids break which invariant ------------------------------------


def drifted_accounts(s: Shape) -> int:
    return sum(1 for a in range(1, s.accounts + 1) if a % s.every == 0)


def duplicate_disputes(s: Shape) -> int:
    # refund r pays dispute ((r-1) % disputes) + 1: the first `refunds - disputes` disputes get
    # a second refund, which is 'failed' unless the dispute id is a multiple of `every`.
    twice = s.refunds - s.disputes
    return sum(1 for d in range(1, twice + 1) if d % s.every == 0)


def stuck_jobs(s: Shape) -> int:
    return sum(1 for j in range(1, s.jobs + 1) if j % 10 == 0 and j % s.every == 0)


def receipt_problems(s: Shape) -> int:
    e, n = s.every, s.invoices
    shared = sum(1 for k in range(1, n + 1) if k % e == e - 1 and k + 1 <= n)
    missing = sum(1 for k in range(1, n + 1) if k % e == e // 2)
    unreferenced = n // e
    return shared + missing + unreferenced


def expected(s: Shape) -> dict[str, int]:
    return {
        "balance_ledger_drift": drifted_accounts(s),
        "duplicate_settled_refunds": duplicate_disputes(s),
        "expired_lease_jobs": stuck_jobs(s),
        "orphaned_receipts": receipt_problems(s),
    }


# ---- the same rules, as SQL -------------------------------------------------------------------


def generate_sql(s: Shape) -> list[str]:
    e = s.every
    return [
        f"""INSERT INTO accounts (account_id, email, credit_balance_eur, created_at)
        SELECT a, 'user' || a || '@example.com', 0, '{LONG_AGO}'
        FROM generate_series(1::bigint, {s.accounts}) AS a""",
        # 20 entries per account; amounts spread over -50.00 .. 149.99 by a fixed hash of the id.
        f"""INSERT INTO credit_log (entry_id, account_id, amount_eur, reason, created_at)
        SELECT i, ((i - 1) % {s.accounts}) + 1, ((i * 7919) % 20000 - 5000) / 100.0,
               'bench', '{LONG_AGO}'
        FROM generate_series(1::bigint, {s.ledger}) AS i""",
        f"""UPDATE accounts AS a SET credit_balance_eur = l.total
                 + CASE WHEN a.account_id % {e} = 0 THEN 10.00 ELSE 0 END
        FROM (SELECT account_id, sum(amount_eur) AS total FROM credit_log GROUP BY account_id) AS l
        WHERE l.account_id = a.account_id""",
        f"""INSERT INTO disputes (dispute_id, account_id, reason, amount_eur, opened_at)
        SELECT d, ((d - 1) % {s.accounts}) + 1, 'bench', 10 + d % 90, '{LONG_AGO}'
        FROM generate_series(1::bigint, {s.disputes}) AS d""",
        f"""INSERT INTO refunds (refund_id, dispute_id, amount_eur, status, provider_ref,
                                created_at, settled_at)
        SELECT r, ((r - 1) % {s.disputes}) + 1, 10 + r % 90, st,
               'pr-' || r, '{LONG_AGO}',
               CASE WHEN st = 'settled' THEN timestamptz '{LONG_AGO}' END
        FROM (SELECT r, CASE
                  WHEN r <= {s.disputes} THEN 'settled'
                  WHEN (((r - 1) % {s.disputes}) + 1) % {e} = 0 THEN 'settled'
                  ELSE 'failed' END AS st
              FROM generate_series(1::bigint, {s.refunds}) AS r) AS g""",
        f"""INSERT INTO jobs (job_id, kind, state, owner, lease_until, attempts, created_at,
                             updated_at)
        SELECT j, 'kind' || j % 7,
               CASE WHEN j % 10 = 0 THEN 'in_progress' ELSE 'done' END,
               CASE WHEN j % 10 <> 0 THEN NULL
                    WHEN j % {e} = 0 AND (j / {e}) % 2 = 1 THEN NULL
                    ELSE 'worker-' || j % 13 END,
               CASE WHEN j % 10 <> 0 THEN NULL
                    WHEN j % {e} = 0 THEN timestamptz '{LONG_AGO}'
                    ELSE timestamptz '{LEASE_FAR_AHEAD}' END,
               j % 4, '{LONG_AGO}', '{LONG_AGO}'
        FROM generate_series(1::bigint, {s.jobs}) AS j""",
        # invoice k shares the key of k-1 when k % e == 0; every other invoice has its own key.
        f"""INSERT INTO invoices (invoice_id, account_id, amount_eur, issued_at, receipt_key,
                                 receipt_uploaded_at)
        SELECT k, ((k - 1) % {s.accounts}) + 1, 5 + k % 500, '{UPLOADED}',
               'receipts/inv-' || CASE WHEN k % {e} = 0 THEN k - 1 ELSE k END || '.pdf',
               '{UPLOADED}'
        FROM generate_series(1::bigint, {s.invoices}) AS k""",
        # The bucket: every invoice's own key except the shared ones' (never used) and the
        # missing ones (k % e == e/2), plus n/e objects no invoice points to.
        f"""INSERT INTO receipt_objects (object_key, size_bytes, last_modified, inventory_date)
        SELECT 'receipts/inv-' || k || '.pdf', 20000 + k % 5000, timestamptz '{UPLOADED}',
               date '{INVENTORY_DATE}'
        FROM generate_series(1::bigint, {s.invoices}) AS k
        WHERE k % {e} <> 0 AND k % {e} <> {e // 2}
        UNION ALL
        SELECT 'receipts/orphan-' || j || '.pdf', 1000, timestamptz '{UPLOADED}',
               date '{INVENTORY_DATE}'
        FROM generate_series(1::bigint, {s.invoices // e}) AS j""",
    ]


def admin_dsn(dsn: str, dbname: str) -> str:
    """`dsn` on another database, as a URL (every tool of the bench, peers included, takes
    one)."""
    parts = conninfo_to_dict(make_conninfo(dsn, dbname=dbname))
    user = quote(str(parts.get("user") or "postgres"), safe="")
    password = parts.get("password")
    auth = f"{user}:{quote(str(password), safe='')}" if password else user
    host, port = str(parts.get("host") or "127.0.0.1"), parts.get("port") or "5432"
    if host.startswith("/"):  # a socket folder (a throwaway pgserver) goes in the query
        return f"postgresql://{auth}@/{quote(dbname, safe='')}?host={quote(host)}&port={port}"
    return f"postgresql://{auth}@{host}:{port}/{quote(dbname, safe='')}"


def marker(s: Shape) -> str:
    return f"v{GENERATOR_VERSION} scale={s.scale} every={s.every}"


def ensure(dsn: str, dbname: str, s: Shape, *, log: bool = True) -> str:
    """Creates (or reuses, when its marker matches) the bench database; returns its DSN."""
    target = admin_dsn(dsn, dbname)
    base = conninfo_to_dict(dsn).get("dbname") or "postgres"
    with psycopg.connect(admin_dsn(dsn, str(base)), autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [dbname]).fetchone()
        if exists:
            with psycopg.connect(target) as conn:
                found = conn.execute(
                    "SELECT obj_description('accounts'::regclass, 'pg_class')"
                ).fetchone()
            if found and found[0] == marker(s):
                return target
            admin.execute(f'DROP DATABASE "{dbname}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{dbname}"')
    if log:
        print(f"generating {dbname} ({marker(s)}) ...", file=sys.stderr)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(SCHEMA.read_text())  # type: ignore[arg-type]  # a trusted file of ours
        for statement in generate_sql(s):
            conn.execute(statement)  # type: ignore[arg-type]
        conn.execute("VACUUM ANALYZE")
        conn.execute(f"COMMENT ON TABLE accounts IS '{marker(s)}'")  # type: ignore[arg-type]
    return target


def check(target: str, s: Shape) -> dict[str, int]:
    """Counts each shipped invariant's rows directly and compares with the rules (==)."""
    want = expected(s)
    got: dict[str, int] = {}
    with psycopg.connect(target) as conn:
        for name in want:
            body = (ROOT / "invariants" / f"{name}.sql").read_text()
            got[name] = conn.execute(f"SELECT count(*) FROM ({body}) AS q").fetchone()[0]  # type: ignore[index,arg-type]
    if got != want:
        raise SystemExit(f"bench data does not hold what it claims: expected {want}, found {got}")
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--dbname", default="invmon_bench")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--every", type=int, default=1000)
    args = parser.parse_args()
    shape = Shape(args.scale, args.every)
    target = ensure(args.dsn, args.dbname, shape)
    print(check(target, shape))


if __name__ == "__main__":
    main()
