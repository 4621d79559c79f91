"""Peak memory and time of an invariant with a `source:`: `invmon check` against the
plainest alternative, a script listing the same store into Python sets and comparing them
with the invoices' keys.

    python bench/sources.py --dsn postgresql://postgres@127.0.0.1:5432/postgres \
        --objects 100000 --folder-objects 1000000 [--before REF] --json

The store is moto's S3 server (as the test suite uses it), started here on 127.0.0.1 and
filled through its own backend (uploading 100,000 objects over HTTP would take minutes and
measure nothing of invmon's). A million objects are measured with the folder source: moto
sorts a bucket's every key for each page it returns, so listing a million of them takes
longer than any listing timeout worth having, which says nothing about invmon either.

The world, for n invoices (one in 1,000 of each kind breaking the invariant, as data.py):
invoice k's receipt is `receipts/inv-k.pdf`, except that invoice k shares k-1's key when
k % 1000 == 0 (referenced_by_many) and k's object is absent when k % 1000 == 500
(missing_object); 2n/1000 objects no invoice names (unreferenced) make the store hold
exactly n objects. Before anything is timed the store is listed and the invoices counted,
and each is compared (`==`) with the plan; every timed run's counts are compared with it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT)]

import peers  # noqa: E402  (bench/peers.py: run_measured)
import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

EVERY = 1000
BUCKET = "receipts-bench"
ACCESS = {
    "AWS_ACCESS_KEY_ID": "AKIAINVMONBENCH",
    "AWS_SECRET_ACCESS_KEY": "invmon-bench-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def _missing(n: int) -> int:
    return (n + EVERY // 2) // EVERY  # k in 1..n with k % EVERY == EVERY / 2


def plan(n: int) -> dict[str, int]:
    """The counts the world is built to hold (the invariant's three problems)."""
    return {
        "unreferenced": n // EVERY + _missing(n),
        "referenced_by_many": n // EVERY,
        "missing_object": _missing(n),
    }


def object_keys(n: int) -> Iterator[str]:
    """Exactly n keys: every invoice's own but the shared and the missing, and orphans."""
    for k in range(1, n + 1):
        if k % EVERY not in (0, EVERY // 2):
            yield f"receipts/inv-{k}.pdf"
    for j in range(1, plan(n)["unreferenced"] + 1):
        yield f"receipts/orphan-{j}.pdf"


def invoices_database(dsn: str, dbname: str, n: int) -> str:
    """A database of the bench's own holding the reference schema and n invoices."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(dbname)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    target = psycopg.conninfo.make_conninfo(dsn, dbname=dbname)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute((ROOT / "deploy" / "demo" / "schema.sql").read_text().encode())
        conn.execute("INSERT INTO accounts (account_id, email) VALUES (1, 'a@example.com')")
        conn.execute(
            f"""INSERT INTO invoices (invoice_id, account_id, amount_eur, receipt_key,
                                      receipt_uploaded_at)
            SELECT k, 1, 10, 'receipts/inv-' || CASE WHEN k % {EVERY} = 0 THEN k - 1 ELSE k END
                             || '.pdf', now() - interval '2 days'
            FROM generate_series(1::bigint, {n}) AS k"""
        )
        conn.execute("VACUUM ANALYZE invoices")
    return target


@contextmanager
def s3_server(keys: Iterator[str]) -> Iterator[tuple[str, int]]:
    """moto's S3 server on 127.0.0.1 with the bench's bucket holding `keys`; its URL and
    how many objects went in."""
    import logging

    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    backend.create_bucket(BUCKET, "us-east-1")
    count = 0
    for key in keys:
        backend.put_object(BUCKET, key, b"%PDF")
        count += 1
    try:
        yield f"http://{host}:{port}", count
    finally:
        server.stop()


def folder_store(root: Path, keys: Iterator[str]) -> int:
    count = 0
    made: set[str] = set()
    for key in keys:
        path = root / key
        if path.parent.name not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent.name)
        path.touch()
        count += 1
    return count


INVARIANT = (ROOT / "examples" / "live" / "orphaned_receipts_live.sql").read_text()
SHIPPED_SOURCE = INVARIANT[INVARIANT.index("-- source:") : INVARIANT.index("\n\n")] + "\n"


def invariant_file(folder: Path, n: int, where: dict[str, str]) -> Path:
    """The shipped live invariant, its source pointed at the bench's store, no grace (the
    objects were all just made), bounds wide enough for the whole store."""
    lines = "".join(f"--     {k}: {v}\n" for k, v in where.items())
    source = (
        f"-- source:\n--   receipt_objects:\n{lines}"
        f"--     columns: [key, size, last_modified]\n--     max_objects: {n}\n"
        "--     timeout: 30m\n"
    )
    text = INVARIANT.replace(SHIPPED_SOURCE, source).replace("-- timeout: 2m", "-- timeout: 10m")
    text = text.replace("-- sample: 50", "-- sample: 1000")  # a sample to count by problem
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "orphaned_receipts_live.sql").write_text(text)
    return folder


# The plainest alternative: list into a set, read the invoices' keys, compare in Python.
PLAIN_SCRIPT = r"""
import json, os, sys, time
from collections import Counter
import psycopg
dsn, kind, where = sys.argv[1], sys.argv[2], sys.argv[3]
started = time.perf_counter()
objects = set()
if kind == "s3":
    import boto3
    endpoint, bucket = where.rsplit("/", 1)
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="receipts/"):
        for item in page.get("Contents", []):
            objects.add(item["Key"])
else:
    for top, _, files in os.walk(where):
        for name in files:
            objects.add(os.path.relpath(os.path.join(top, name), where))
listed = time.perf_counter()
with psycopg.connect(dsn) as conn:
    rows = conn.execute(
        "SELECT invoice_id, receipt_key, receipt_uploaded_at < now() - interval '15 minutes'"
        " FROM invoices WHERE receipt_key IS NOT NULL").fetchall()
uses = Counter(key for _, key, _ in rows)
counts = {
    "unreferenced": sum(1 for key in objects if key not in uses),
    "referenced_by_many": sum(1 for n in uses.values() if n > 1),
    "missing_object": sum(1 for _, key, old in rows if old and key not in objects),
}
done = time.perf_counter()
print(json.dumps({"counts": counts, "listing_ms": (listed - started) * 1000,
                  "query_ms": (done - listed) * 1000}))
"""


def _invmon(work: Path, dsn: str, folder: Path, code: Path) -> tuple[list[str], dict[str, str]]:
    argv = [sys.executable, "-m", "monitor.cli", "check", "--allow-privileged-role"]
    argv += ["--dsn", dsn, "--invariants", str(folder), "--format", "json"]
    return argv, {"PYTHONPATH": str(code)}


def _invmon_counts(out: str, err: str) -> tuple[dict[str, int], float, float]:
    try:
        result = json.loads(out)["results"][0]
    except (ValueError, LookupError):
        raise SystemExit(f"invmon check said nothing readable: {err[-500:]}") from None
    if result["status"] not in ("ok", "violated"):
        raise SystemExit(f"invmon check: {result['status']}: {result.get('error')}")
    counts: dict[str, int] = {}
    for row in result["rows"]:
        counts[row["problem"]] = counts.get(row["problem"], 0) + 1
    if result["count"] != len(result["rows"]):
        # More offending rows than a sample holds: the total is checked, not each problem.
        counts = {"all": result["count"]}
    listing = float(result["listing_ms"])
    return counts, listing, float(result["duration_ms"]) - listing


def measure(
    dsn: str,
    kind: str,
    where: str,
    folder: Path,
    expected: dict[str, int],
    rounds: int,
    codes: dict[str, Path],
) -> list[dict[str, Any]]:
    """Each contestant `rounds` times, in rotating order: wall, peak RSS, listing and query."""
    found: dict[str, dict[str, list[float]]] = {}
    names = ["plain", *codes]
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp)
                if name == "plain":
                    (work / "plain.py").write_text(PLAIN_SCRIPT)
                    argv = [sys.executable, str(work / "plain.py"), dsn, kind, where]
                    env: dict[str, str] = {}
                else:
                    argv, env = _invmon(work, dsn, folder, codes[name])
                out, err, _code, wall, rss = peers.run_measured(argv, {**ACCESS, **env}, work)
            if name == "plain":
                try:
                    said = json.loads(out)
                except ValueError:
                    raise SystemExit(f"the plain script failed: {err[-500:]}") from None
                counts, listing, query = said["counts"], said["listing_ms"], said["query_ms"]
            else:
                counts, listing, query = _invmon_counts(out, err)
            want = {"all": sum(expected.values())} if "all" in counts else expected
            if counts != want:
                raise SystemExit(f"{name} counted {counts}, not {expected}")
            row = found.setdefault(name, {"wall": [], "rss": [], "listing": [], "query": []})
            row["wall"].append(wall)
            row["rss"].append(rss / 1024)
            row["listing"].append(listing)
            row["query"].append(query)
    return [
        {
            "name": name,
            "wall_median_s": statistics.median(v["wall"]),
            "peak_rss_mib": max(v["rss"]),
            "peak_rss_runs_mib": v["rss"],
            "listing_median_ms": statistics.median(v["listing"]),
            "query_median_ms": statistics.median(v["query"]),
        }
        for name, v in found.items()
    ]


COMMANDS = {
    "invmon": "invmon check --allow-privileged-role --dsn DSN --invariants inv --format json"
    "  # inv/: the live receipts invariant, its source pointed at the store",
    "plain": "python plain.py DSN s3 ENDPOINT/BUCKET  # or: folder PATH (PLAIN_SCRIPT in "
    "bench/sources.py: the listing into a set, the invoices' keys into a Counter)",
}


def exported(ref: str, into: Path) -> Path:
    """The code at `ref` (a commit of this repository), unpacked: invmon as it was."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", ref, "monitor"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run(
    dsn: str,
    objects: int,
    folder_objects: int,
    rounds: int,
    before: str | None,
    dbname: str = "invmon_bench_sources",
) -> dict[str, Any]:
    results: dict[str, Any] = {"every": EVERY, "rounds": rounds, "sizes": [], "commands": COMMANDS}
    with tempfile.TemporaryDirectory() as tmp:
        codes = {"invmon": ROOT}
        if before:
            short = subprocess.run(
                ["git", "rev-parse", "--short", before],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            codes = {f"invmon at {short}": exported(before, Path(tmp) / "before"), **codes}
            results["before"] = short
        for kind, n in (("s3", objects), ("folder", folder_objects)):
            if not n:
                continue
            expected = plan(n)
            target = invoices_database(dsn, dbname, n)
            with psycopg.connect(target) as conn:
                row = conn.execute("SELECT count(*) FROM invoices").fetchone()
            if row is None or row[0] != n:
                raise SystemExit(f"{row} invoices, not {n:,}")
            work = Path(tmp) / kind
            started = time.monotonic()
            if kind == "s3":
                with s3_server(object_keys(n)) as (endpoint, made):
                    listed = _listed_s3(endpoint)
                    where = {
                        "s3": f'"s3://{BUCKET}/receipts/"',
                        "endpoint": endpoint,
                        "region": "us-east-1",
                    }
                    folder = invariant_file(work / "inv", n, where)
                    built = time.monotonic() - started
                    _check_store(made, listed, n)
                    rows = measure(
                        target, "s3", f"{endpoint}/{BUCKET}", folder, expected, rounds, codes
                    )
            else:
                store = work / "store"
                made = folder_store(store, object_keys(n))
                listed = sum(len(files) for _, _, files in os.walk(store))
                built = time.monotonic() - started
                _check_store(made, listed, n)
                folder = invariant_file(work / "inv", n, {"folder": f'"{store}"'})
                rows = measure(target, "folder", str(store), folder, expected, rounds, codes)
                shutil.rmtree(store)
            results["sizes"].append(
                {
                    "kind": kind,
                    "objects": n,
                    "invoices": n,
                    "expected": expected,
                    "build_s": built,
                    "runs": rows,
                }
            )
    return results


def _listed_s3(endpoint: str) -> int:
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        **{
            "aws_access_key_id": ACCESS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": ACCESS["AWS_SECRET_ACCESS_KEY"],
        },
    )
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="receipts/")
    return sum(page.get("KeyCount", 0) for page in pages)


def _check_store(made: int, listed: int, n: int) -> None:
    if not made == listed == n:
        raise SystemExit(f"the store holds {listed:,} objects ({made:,} made), not {n:,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--objects", type=int, default=100_000, help="in the S3 bucket")
    parser.add_argument("--folder-objects", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", help="also measure invmon at this commit")
    parser.add_argument("--dbname", default="invmon_bench_sources", help="made afresh")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    found = run(args.dsn, args.objects, args.folder_objects, args.rounds, args.before, args.dbname)
    print(json.dumps(found, indent=2 if not args.json else None))


if __name__ == "__main__":
    main()
