"""`invmon demo`: the shipped invariants against the reference schema with planted bugs."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from monitor.check import run_check
from monitor.config import Config, HttpConfig, StateConfig
from monitor.pgtemp import apply_sql, scratch_database, temporary_server
from monitor.render import results_table
from monitor.results import RunResult


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


def show_alerts(dsn: str, invariants: Path) -> list[tuple[str, int]]:
    """One burst-mode pass of the daemon with a throwaway state store and no Slack."""
    from monitor.daemon import Daemon
    from monitor.state import StateStore

    # The demo shows alerts, not the daemon's log lines about them.
    logging.getLogger().addHandler(logging.NullHandler())
    logging.getLogger("invmon").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="invmon-demo-state-") as folder:
        config = Config(
            invariants=invariants,
            state=StateConfig(path=Path(folder) / "state.db"),
            http=HttpConfig(listen=None),
        )
        store = StateStore.open(path=config.state.path)
        try:
            daemon = Daemon.build(config, dsn, store)
            _, results = daemon.run_once()
        finally:
            store.close()
    # Violated, but waiting for more consecutive violated runs (`for: N`) before alerting.
    waiting = [(r.invariant, daemon.invariants[r.invariant].header.for_runs) for r in results]
    return [(name, runs) for name, runs in waiting if runs > 1 and name in violated(results)]


def violated(results: list[RunResult]) -> set[str]:
    return {r.invariant for r in results if r.status == "violated"}


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
            outcome = run_check(Config(dsn=dsn), invariants)
            say(results_table(outcome.results, sample_rows=5))
            say(
                f"\nEvaluated in {time.monotonic() - started:.2f}s. Each violation above was "
                "planted in deploy/demo/seed.sql."
            )
            say(
                "\nThe alerts on-call would get. No Slack is configured, so they print here, "
                "through the same delivery ledger:"
            )
            for name, runs in show_alerts(dsn, invariants):
                say(
                    f"\n({name} is violated too, but its header says `for: {runs}`: its "
                    f"incident opens only after {runs} violated runs in a row.)"
                )
            say("\nNext: `invmon check --dsn <replica>` on your own data.")
        say("Removed the demo database" + ("." if admin_dsn else " and stopped the server."))
    errored = any(r.status == "error" for r in outcome.results)
    return 2 if errored else 0
