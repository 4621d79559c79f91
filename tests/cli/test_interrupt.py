"""Ctrl-C ends `invmon check` at once, and what it had running on the database with it:
the queries are cancelled on the server, where they went on until their statement timeout
(and the command waited for them)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import psycopg
from freezing_proxy import FreezingProxy
from helpers import CHECK, SLOW_INVARIANT, active_runs, interruptible, wait_for
from psycopg.conninfo import conninfo_to_dict, make_conninfo


def test_ctrl_c_ends_check_at_once_cancels_its_queries_and_starts_no_other(
    tmp_path: Path, database: str
) -> None:
    folder = tmp_path / "invariants"
    folder.mkdir()
    for name in ("slow_a", "slow_b", "slow_c"):
        (folder / f"{name}.sql").write_text(SLOW_INVARIANT)
    (tmp_path / "invmon.yaml").write_text("concurrency: 2\n")
    argv = [sys.executable, "-m", "monitor.cli", *CHECK, "--dsn", database]
    check = interruptible([*argv, "--invariants", str(folder)], tmp_path)
    try:
        wait_for(lambda: active_runs(database) == 2, 60, "two of the three queries to run")
        check.send_signal(signal.SIGINT)
        # Their statement timeout is 120 s: before, the command waited for both, then ran
        # the third.
        out, err = check.communicate(timeout=30)
    finally:
        check.kill()
        check.wait()
    assert (check.returncode, err.splitlines()[-1:]) == (130, ["invmon: interrupted"]), err
    assert out == ""
    # Cancelled, not left to notice the closed connection at the end of their timeout.
    wait_for(lambda: active_runs(database) == 0, 10, "the interrupted queries to end")


def test_ctrl_c_ends_check_when_the_server_has_stopped_answering(
    tmp_path: Path, database: str
) -> None:
    """The cancel of a server that stopped answering (a paused VM, a dropped link) raised
    CancellationTimeout in place of the interrupt, and the command waited for the query's
    own bound (a reviewer saw a traceback 35 and 56 s after Ctrl-C). The waits the cancel
    cannot end are cut."""
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "waits.sql").write_text(
        "-- description: waits on a lock\n-- timeout: 120s\nSELECT id FROM held\n"
    )
    (tmp_path / "invmon.yaml").write_text("database:\n  lock_timeout: 120s\n")
    with psycopg.connect(database, autocommit=True) as holder:
        holder.execute("CREATE TABLE held (id int)")
        holder.execute("BEGIN")
        holder.execute("LOCK TABLE held IN ACCESS EXCLUSIVE MODE")
        parts = conninfo_to_dict(database)
        host, port = str(parts.get("host", "127.0.0.1")), int(str(parts.get("port", 5432)))
        with FreezingProxy(host, port) as proxy:
            through = make_conninfo(database, host="127.0.0.1", port=proxy.port)
            argv = [sys.executable, "-m", "monitor.cli", *CHECK, "--dsn", through]
            check = interruptible([*argv, "--invariants", str(folder)], tmp_path)
            try:
                wait_for(lambda: active_runs(database) == 1, 60, "the query to wait on the lock")
                proxy.freeze()
                check.send_signal(signal.SIGINT)
                _, err = check.communicate(timeout=30)  # the query's bound is 130 s
            finally:
                check.kill()
                check.wait()
        holder.execute("ROLLBACK")
    assert (check.returncode, err.splitlines()[-1:]) == (130, ["invmon: interrupted"]), err
    assert "Traceback" not in err
