"""Ctrl-C ends `invmon check` at once, and what it had running on the database with it:
the queries are cancelled on the server, where they went on until their statement timeout
(and the command waited for them)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from helpers import CHECK, SLOW_INVARIANT, active_runs, interruptible, wait_for


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
