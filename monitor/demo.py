"""`invmon demo`: the shipped invariants against the reference schema with planted bugs."""

from __future__ import annotations

import contextlib
import importlib.util
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from monitor.check import run_check
from monitor.config import Config
from monitor.pgtemp import apply_sql, scratch_database, temporary_server
from monitor.render import results_table


def shipped_folder(repo_relative: str, package: str) -> Path:
    """A folder of shipped files: from the source checkout, else from the installed wheel.

    pyproject maps `invariants/` and `deploy/demo/` into the wheel as packages; an editable
    install does not carry that mapping, so a checkout is looked up first.
    """
    checkout = Path(__file__).resolve().parents[1] / repo_relative
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


def run_demo(admin_dsn: str | None, say: Callable[[str], None]) -> int:
    invariants = shipped_folder("invariants", "monitor.shipped_invariants")
    demo = shipped_folder("deploy/demo", "monitor.demo_data")
    with _server(admin_dsn, say) as server:
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
