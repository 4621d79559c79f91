"""A state store that stops working is never a silent outage: the daemon goes on, says so
on /healthz and /metrics and in one log line a minute, and `status` says what is wrong; a
read-only store file can still be looked at."""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import pytest
from builders import build_daemon, config_file, daemon_config
from helpers import cli, items_table

from monitor.config import StateConfig
from monitor.store.state import StateStore

INVARIANT = "-- description: no item is bad\n-- key: [id]\nSELECT id FROM items WHERE bad\n"


def damage(path: Path) -> None:
    """Garbage over the file's first page, header included: SQLite notices on its next
    transaction (the header's change counter no longer matches its page cache)."""
    with path.open("r+b") as handle:
        handle.write(os.urandom(4096))


def test_a_damaged_store_makes_the_daemon_unhealthy_and_it_keeps_evaluating(
    database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    items_table(database, bad=(2,))
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "bad.sql").write_text(INVARIANT)
    state = tmp_path / "state.db"
    store = StateStore.open(path=state)
    daemon = build_daemon(daemon_config(folder, state=StateConfig(path=state)), database, store)
    try:
        daemon.reload()
        assert daemon.evaluate("bad") is not None
        assert daemon.store_health.problem is None
        # Everything into the main file first, so the damage is where SQLite will read.
        with sqlite3.connect(state) as other:
            other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        damage(state)
        with caplog.at_level(logging.ERROR, logger="invmon.state"):
            first = daemon.evaluate("bad")
            second = daemon.evaluate("bad")
            daemon.deliver()
        assert first is not None and (first.status, first.count) == ("violated", 1)
        assert second is not None
        problem = daemon.store_health.problem
        assert problem is not None
        assert problem.startswith(f"the state store (state.path {str(state)!r}) failed while ")
        assert daemon.probes.health_problem() == problem
        assert b"invmon_state_store_ok 0.0" in daemon.metrics.render()
        said = [r.getMessage() for r in caplog.records if r.name == "invmon.state"]
        assert len(said) == 1  # per minute
        assert "Recovering the state store" in said[0]
    finally:
        daemon.close()
        store.close()
    done = cli("status", "--config", str(config_file(tmp_path, state={"path": state})))
    assert done.returncode == 2
    assert done.stderr.startswith("invmon: cannot ") and "state.path" in done.stderr
    assert "Traceback" not in done.stderr


def test_status_reads_a_store_it_may_not_write(database: str, tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    store = StateStore.open(path=state)
    store.close()
    state.chmod(0o444)
    tmp_path.chmod(0o555)  # no -wal or -shm file may be created beside it either
    try:
        config_folder = tmp_path.parent / f"{tmp_path.name}-config"
        config_folder.mkdir()
        done = cli("status", "--config", str(config_file(config_folder, state={"path": state})))
    finally:
        tmp_path.chmod(0o755)
        state.chmod(0o644)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("No open incidents.")
