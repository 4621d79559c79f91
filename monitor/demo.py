"""`invmon demo`: the shipped invariants against the reference schema with planted bugs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

from monitor.check import run_check
from monitor.config import Config
from monitor.pgtemp import apply_sql, scratch_database, temporary_server
from monitor.render import results_table


@contextlib.contextmanager
def shipped_files() -> Iterator[tuple[Path, Path]]:
    """The shipped invariants folder and the demo data folder, as real paths."""
    with (
        resources.as_file(resources.files("monitor.shipped_invariants")) as invariants,
        resources.as_file(resources.files("monitor.demo_data")) as demo,
    ):
        yield Path(invariants), Path(demo)


@contextlib.contextmanager
def _server(admin_dsn: str | None, say: Callable[[str], None]) -> Iterator[str]:
    if admin_dsn:
        yield admin_dsn
        return
    say("Starting a throwaway PostgreSQL server (from the pgserver package)…")
    with temporary_server() as dsn:
        yield dsn


def run_demo(admin_dsn: str | None, say: Callable[[str], None]) -> int:
    with shipped_files() as (invariants, demo), _server(admin_dsn, say) as server:
        with scratch_database(server, prefix="invmon_demo") as dsn:
            say("Loading the refunds schema and seeding it with planted violations…")
            apply_sql(dsn, (demo / "schema.sql").read_text(encoding="utf-8"))
            apply_sql(dsn, (demo / "seed.sql").read_text(encoding="utf-8"))
            names = sorted(p.stem for p in invariants.glob("*.sql"))
            say(f"Running {len(names)} invariants: {', '.join(names)}\n")
            started = time.monotonic()
            outcome = run_check(Config(), dsn, invariants)
            say(results_table(outcome.results, sample_rows=5))
            say(
                f"\nEvaluated in {time.monotonic() - started:.2f}s. Each violation above was "
                "planted in deploy/demo/seed.sql; in production these rows would be\n"
                "attached to a Slack alert. Next: `invmon check --dsn <replica>` on your data."
            )
        say("Removed the demo database" + ("." if admin_dsn else " and stopped the server."))
    errored = any(r.status == "error" for r in outcome.results)
    return 2 if errored else 0
