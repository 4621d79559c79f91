"""`invmon demo`: the shipped invariants against the reference schema with planted bugs,
as one of three targets: a second live database and one that is down."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg

from monitor.authoring.pgtemp import apply_sql, scratch_database, temporary_server
from monitor.cli.render import results_table
from monitor.config import Config, DatabaseConfig, HttpConfig, StateConfig, TargetConfig
from monitor.execution.check import run_check
from monitor.execution.results import RunResult


def shipped_folder(repo_relative: str, package: str) -> Path:
    """A folder of shipped files: from the source checkout, else from the installed wheel.

    pyproject maps `invariants/` and `deploy/demo/` into the wheel as packages; an editable
    install does not carry that mapping, so a checkout is looked up first.
    """
    checkout = Path(__file__).resolve().parents[2] / repo_relative
    if checkout.is_dir():
        return checkout
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the package data {package} is missing; reinstall invmon")
    return Path(next(iter(spec.submodule_search_locations)))


@contextlib.contextmanager
def _server(admin_dsn: str | None, say: Callable[[str], None]) -> Iterator[str]:
    if admin_dsn:
        yield admin_dsn
        return
    say("Starting a throwaway PostgreSQL server (from the pgserver package)…")
    with temporary_server() as dsn:
        yield dsn


LIVE = "monitor.live_examples"  # examples/live/, mapped into the wheel by pyproject


def show_alerts(config: Config) -> list[tuple[str, int]]:
    """One burst-mode pass of the daemon with a throwaway state store and no Slack."""
    # The demo shows alerts, not the daemon's log lines about them. Both changes are undone
    # after, so a caller in the same process (a test, a notebook) keeps its own logging.
    quiet, silent = logging.getLogger("invmon"), logging.NullHandler()
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    logging.getLogger().addHandler(silent)
    try:
        return _one_pass(config)
    finally:
        quiet.setLevel(level)
        logging.getLogger().removeHandler(silent)


def _one_pass(config: Config) -> list[tuple[str, int]]:
    from monitor.daemon.assembly import assemble
    from monitor.store.state import StateStore

    with tempfile.TemporaryDirectory(prefix="invmon-demo-state-") as folder:
        config = config.model_copy(update={"state": StateConfig(path=Path(folder) / "state.db")})
        store = StateStore.open(path=config.state.path)
        try:
            daemon = assemble(config, None, store)
            try:
                _, results = daemon.run_once()
            finally:
                daemon.close()
        finally:
            store.close()
    # Violated, but waiting for more consecutive violated runs (`for: N`) before alerting.
    waiting = [(r.invariant, daemon.invariants[r.invariant].header.for_runs) for r in results]
    return [(name, runs) for name, runs in waiting if runs > 1 and name in violated(results)]


def violated(results: list[RunResult]) -> set[str]:
    return {r.invariant for r in results if r.status == "violated"}


def closed_port() -> int:
    """A local port nothing listens on (bound, then released): the unreachable database."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def demo_folder(root: Path, shipped: Path, demo: Path) -> Path:
    """The demo's invariants folder: one subfolder per target, which binds each file to
    the target of its folder's name, as `invariants/payments/**` would in a real repo."""
    folder = root / "invariants"
    for target, source in (
        ("payments", shipped),
        ("subscriptions", demo / "subscriptions"),
        ("warehouse", demo / "warehouse"),
    ):
        (folder / target).mkdir(parents=True)
        for path in sorted(source.glob("*.sql")):
            if path.name not in ("schema.sql", "seed.sql"):
                shutil.copyfile(path, folder / target / path.name)
    return folder


LIVE_SOURCE_LINE = '--     s3: "s3://receipts-prod/receipts/"\n'


def live_bucket_demo(payments: str, root: Path, live: Path) -> list[RunResult]:
    """The live form of orphaned_receipts, its bucket a local folder: the objects of the
    seed's inventory written as files (their sizes and times kept), the source pointed at
    that folder instead of S3. Nothing else changes: the same binding, fence and run."""
    bucket = root / "bucket"
    with psycopg.connect(payments) as conn:
        objects = conn.execute(
            "SELECT object_key, size_bytes, extract(epoch FROM last_modified)::float8"
            " FROM receipt_objects ORDER BY object_key"
        ).fetchall()
    for key, size, stamp in objects:
        path = bucket / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"%" * min(int(size), 1 << 20))
        os.utime(path, (stamp, stamp))
    text = (live / "orphaned_receipts_live.sql").read_text(encoding="utf-8")
    folder = root / "live" / "payments"
    folder.mkdir(parents=True)
    # A JSON string is a YAML scalar: any path, quoted.
    pointed = text.replace(LIVE_SOURCE_LINE, f"--     folder: {json.dumps(str(bucket))}\n")
    (folder / "orphaned_receipts_live.sql").write_text(pointed, encoding="utf-8")
    config = Config(
        invariants=root / "live",
        targets={"payments": TargetConfig(dsn=payments)},
        database=DatabaseConfig(allow_privileged_role=True),  # as in run_demo
        http=HttpConfig(listen=None),
    )
    return run_check(config, config.invariants).results


def run_demo(admin_dsn: str | None, say: Callable[[str], None]) -> int:
    shipped = shipped_folder("invariants", "monitor.shipped_invariants")
    demo = shipped_folder("deploy/demo", "monitor.demo_data")
    with (
        _server(admin_dsn, say) as server,
        scratch_database(server, prefix="invmon_demo_payments") as payments,
        scratch_database(server, prefix="invmon_demo_subscriptions") as subscriptions,
        tempfile.TemporaryDirectory(prefix="invmon-demo-") as scratch,
    ):
        say("Three monitored databases (targets), from one config:")
        say("  payments       the refunds schema, seeded with planted violations")
        say("  subscriptions  a second database, with one planted violation")
        say("  warehouse      a database that is down (a closed port), on purpose")
        apply_sql(payments, (demo / "schema.sql").read_text(encoding="utf-8"))
        apply_sql(payments, (demo / "seed.sql").read_text(encoding="utf-8"))
        for script in ("schema.sql", "seed.sql"):
            text = (demo / "subscriptions" / script).read_text(encoding="utf-8")
            apply_sql(subscriptions, text)
        dead = f"postgresql://invmon@127.0.0.1:{closed_port()}/warehouse?connect_timeout=2"
        # The demo made these databases, as the server's administrator, and runs only the
        # shipped invariants: a privileged role is allowed here, as nowhere by default.
        config = Config(
            invariants=demo_folder(Path(scratch), shipped, demo),
            database=DatabaseConfig(allow_privileged_role=True),
            targets={
                "payments": TargetConfig(dsn=payments),
                "subscriptions": TargetConfig(dsn=subscriptions),
                "warehouse": TargetConfig(dsn=dead),
            },
            http=HttpConfig(listen=None),
        )
        say("\nRunning every invariant, each on its own target's database:\n")
        started = time.monotonic()
        outcome = run_check(config, config.invariants)
        say(results_table(outcome.results, sample_rows=5))
        say(
            f"\nEvaluated in {time.monotonic() - started:.2f}s. Each violation above was "
            "planted in deploy/demo/; warehouse could not be evaluated because its database "
            "is down, and the other two targets did not wait for it."
        )
        say(
            "\nThe alerts on-call would get. No Slack is configured, so they print here, "
            "through the same delivery ledger:"
        )
        for name, runs in show_alerts(config):
            say(
                f"\n({name} is violated too, but its header says `for: {runs}`: its "
                f"incident opens only after {runs} violated runs in a row.)"
            )
        say(
            "\nAcross two systems: orphaned_receipts read its bucket from a table loaded from "
            "the daily inventory. Its live form (examples/live/) lists the bucket at each run "
            "instead; here the bucket is a local folder holding the same objects:\n"
        )
        live = live_bucket_demo(payments, Path(scratch), shipped_folder("examples/live", LIVE))
        say(results_table(live, sample_rows=5))
        say(
            "\nIt also reports invoice 5007, uploaded two hours ago with no object: the "
            "day-old inventory cannot judge it yet, the live listing can."
        )
        say("\nNext: `invmon check --dsn <replica>` on your own data.")
    say("Removed the demo databases" + ("." if admin_dsn else " and stopped the server."))
    # The warehouse error is planted; any other error is the demo's own failure.
    errored = any(
        r.status == "error" and r.target != "warehouse" for r in [*outcome.results, *live]
    )
    return 2 if errored else 0
