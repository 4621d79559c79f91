"""Learning the catalog for a batch of texts (LiveFence.learn, Runner.learn): afterwards no
verdict on those texts asks the database anything, every verdict is the one a fresh catalog
gives (test_fence.py also judges each hostile case of the live corpus after learning), and
a catalog that cannot be read stops nothing."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import psycopg
import yaml
from helpers import invariant

from monitor.config import DatabaseConfig
from monitor.execution.execute import LiveFence
from monitor.execution.runner import Runner
from monitor.fence.builtin_catalog import builtin_catalog
from monitor.fence.catalog_memory import Asked, CatalogMemory, Recording
from monitor.fence.fence import fence
from monitor.fence.live_catalog import LiveCatalog
from monitor.invariants.loader import load_directory

CORPUS = Path(__file__).parent / "corpus"
ROOT = Path(__file__).resolve().parents[2]
ACCEPTED: dict[str, str] = yaml.safe_load((CORPUS / "accepted.yaml").read_text())
SHIPPED = load_directory(ROOT / "invariants").invariants


def test_a_memory_that_keeps_nothing_notes_only_what_it_lacks_and_learns_nothing() -> None:
    memory = CatalogMemory(300, clock=lambda: 0.0)
    memory.learn(Asked(functions={("lower",), ("no_such_function",)}), builtin_catalog())
    wanted = [("lower",), ("no_such_function",), ("upper",)]
    for _ in range(2):  # the second time too: the first noting kept nothing
        recording = Recording()
        found = memory.over(recording, keep=False).functions(wanted)
        assert (set(found), recording.asked) == ({("lower",)}, Asked(functions={("upper",)}))


def test_after_learning_a_folder_no_verdict_asks_again_and_none_changes(
    fence_database: str,
) -> None:
    texts = sorted(ACCEPTED.values())
    live = LiveFence()
    with psycopg.connect(fence_database) as conn:
        asking = {n for n, t in ACCEPTED.items() if live.still_to_ask(t)}
        assert {"cte and window", "view read", "jsonb operators"} <= asking
        live.learn(conn, texts)
        assert {n: live.still_to_ask(t) for n, t in ACCEPTED.items() if live.still_to_ask(t)} == {}
        # The view's own text was learned too, in a second round: 'view read' asks nothing.
        assert {n: live.problems(conn, t) for n, t in ACCEPTED.items()} == {
            n: fence(t, LiveCatalog(conn)) for n, t in ACCEPTED.items()
        }


def test_runner_learns_every_shipped_invariant_on_one_connection(schema_database: str) -> None:
    with Runner(schema_database, concurrency=2) as runner:
        assert {i.name for i in SHIPPED if runner.fence.still_to_ask(i.sql)} == {
            i.name for i in SHIPPED
        }
        runner.learn(SHIPPED)
        assert {i.name: runner.fence.still_to_ask(i.sql) for i in SHIPPED} == {
            i.name: Asked() for i in SHIPPED
        }


def test_a_catalog_that_cannot_be_read_in_time_delays_learning_by_the_lock_timeout_only(
    database: str,
) -> None:
    """pg_proc locked by another session: learning gives up at the lock timeout, raises
    nothing and learns nothing; the run itself then meets the lock and says so."""
    text = "SELECT lower('A') AS x WHERE false"
    held, release = threading.Event(), threading.Event()

    def hold_the_catalog() -> None:
        with psycopg.connect(database) as conn:
            conn.execute("LOCK TABLE pg_catalog.pg_proc IN ACCESS EXCLUSIVE MODE")
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold_the_catalog)
    holder.start()
    try:
        assert held.wait(30), "the lock on pg_proc was never taken"
        config = DatabaseConfig(lock_timeout=timedelta(milliseconds=200))
        with Runner(database, concurrency=1, database=config) as runner:
            runner.learn([invariant("lowered", text)])
            assert runner.fence.still_to_ask(text) == Asked(functions={("lower",)})
            result = runner.run_one(invariant("lowered", text))
        assert (result.status, "lock timeout" in (result.error or "")) == ("error", True), result
    finally:
        release.set()
        holder.join(30)
    assert not holder.is_alive(), "the session holding pg_proc did not end"
