"""`invmon run --once`, `invmon status` and `invmon history` through the real CLI, sharing a
state store by working folder with no config file at all."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import PRIVILEGED_YAML, cli, invmon, items_table

from monitor.logs import redact


def test_run_once_then_status_and_history_read_the_same_store(
    database: str, tmp_path: Path
) -> None:
    items_table(database, rows=3, bad=(1, 3))
    (tmp_path / "invariants").mkdir()
    (tmp_path / "invariants" / "bad_rows.sql").write_text(
        "-- description: nothing is bad\n-- key: [id]\nSELECT id FROM items WHERE bad\n"
    )
    (tmp_path / "invariants" / "fine.sql").write_text(
        "-- description: always holds\nSELECT 1 AS one WHERE false\n"
    )
    (tmp_path / "invmon.yaml").write_text(PRIVILEGED_YAML)
    once = invmon("run", "--once", cwd=tmp_path, env={"INVMON_DSN": database})
    assert once.returncode == 1, once.stderr
    assert (tmp_path / "invmon-state.db").exists()

    status = cli("status", "--format", "json", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    document = json.loads(status.stdout)
    assert [(i["invariant"], i["kind"], i["last_count"]) for i in document["open_incidents"]] == [
        ("bad_rows", "violation", 2)
    ]
    assert [(r["invariant"], r["status"], r["count"]) for r in document["last_runs"]] == [
        ("bad_rows", "violated", 2),
        ("fine", "ok", 0),
    ]
    assert document["last_runs"][0]["sample"] == [{"id": 1}, {"id": 3}]

    table = cli("status", cwd=tmp_path)
    assert "Open incidents (1):" in table.stdout
    assert "bad_rows" in table.stdout

    history = cli("history", "bad_rows", "--format", "json", cwd=tmp_path)
    assert history.returncode == 0, history.stderr
    runs = json.loads(history.stdout)["runs"]
    assert [(r["status"], r["count"]) for r in runs] == [("violated", 2)]

    quiet = cli("history", "fine", cwd=tmp_path)  # ran, held, never an incident
    assert quiet.stdout.endswith("\n\nincidents\nnone\n"), quiet.stdout

    unknown = cli("history", "nope", cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == (
        "invmon: no history for 'nope' in the state store; check the name with `invmon status`"
    )


def test_secrets_are_masked_in_every_log_line() -> None:
    assert redact("connect host=db password=hunter2 user=x") == (
        "connect host=db password=*** user=x"
    )
    assert (
        redact("postgresql://invmon:hunter2@db:5432/app") == "postgresql://invmon:***@db:5432/app"
    )
    assert redact("token xoxb-1234-abcd and xapp-1-A0-xyz") == "token xoxb-*** and xapp-***"


def test_status_somewhere_without_a_store_says_so_instead_of_all_clear(tmp_path: Path) -> None:
    done = cli("status", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"invmon: no state store at 'invmon-state.db' (looked for "
        f"'{tmp_path / 'invmon-state.db'}', from the working directory: no config file): "
        "pass the --config that `invmon run` uses, or start it first"
    )
    assert list(tmp_path.iterdir()) == []


def test_status_on_a_postgresql_store_no_daemon_started_on_says_so(
    database: str, tmp_path: Path
) -> None:
    """It said `relation "incidents" does not exist` and pointed at recovering a broken
    store, to a reviewer whose store was only new."""
    (tmp_path / "invmon.yaml").write_text(f"state:\n  dsn: {database!r}\n")
    shown = cli("status", "--config", str(tmp_path / "invmon.yaml"))
    assert shown.returncode == 2
    assert shown.stderr.startswith("invmon: the state store (state.dsn, ")
    assert shown.stderr.endswith(
        ") holds nothing yet: no daemon has started on it. `invmon run` creates its tables, "
        "or `invmon store migrate`\n"
    )


def test_a_port_in_use_is_a_clear_error_before_anything_runs(database: str, tmp_path: Path) -> None:
    import socket

    (tmp_path / "invariants").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / "invmon.yaml").write_text(f"http:\n  listen: 127.0.0.1:{port}\n")
        done = invmon("run", cwd=tmp_path, env={"INVMON_DSN": database})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"invmon: cannot listen on http.listen 127.0.0.1:{port}: Address already in use"
    )


def test_numbers_and_times_past_what_the_store_holds_are_refused_without_a_traceback(
    tmp_path: Path,
) -> None:
    """An incident or mute number past 64 bits was an OverflowError from the SQLite driver,
    and a mute ending after the year 9999 one from datetime: each with its traceback."""
    huge = str(2**63)
    said = {
        args: cli(*args, cwd=tmp_path)
        for args in (
            ("ack", huge),
            ("unack", huge),
            ("unmute", huge),
            ("snooze", huge, "1h"),
            ("mute", "a", "--from", "9999-12-31T23:00Z", "--for", "2h", "--reason", "x"),
        )
    }
    assert {args: done.returncode for args, done in said.items()} == dict.fromkeys(said, 2)
    assert all("Traceback" not in done.stderr for done in said.values())
    assert said[("snooze", huge, "1h")].stderr.strip() == (
        f"invmon: there is no incident #{huge}; `invmon status` lists the open ones"
    )
    mute = said[("mute", "a", "--from", "9999-12-31T23:00Z", "--for", "2h", "--reason", "x")]
    assert (
        mute.stderr.strip()
        == "invmon: --for: 2h from 9999-12-31 23:00 UTC ends after the year 9999"
    )
    assert "is not in the range 1<=x<=9223372036854775807" in said[("ack", huge)].stderr


def test_run_once_says_what_it_could_not_deliver() -> None:
    """Against a Slack it could not reach, `run --once` printed slack-sdk's own lines and
    exited with the invariants' code: nothing said the alerts were still queued, or which
    settings to check. (Seen whole by hand: 30 s of retries, then this line.)"""
    from monitor.cli.running import undelivered_note

    assert undelivered_note(0) is None
    assert undelivered_note(2) == (
        "invmon: 2 alerts not delivered yet (Slack's errors are above; check slack.api_url "
        "and slack.token); they stay queued in the state store, and `invmon run` delivers them"
    )
