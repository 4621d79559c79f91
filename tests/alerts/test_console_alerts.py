"""Without Slack (the console transport): every printed item names its incident, so the
messages of two incidents, printed interleaved (one's CSV after the other's root), stay
readable; and `invmon ack` says where the update goes when there is no Slack."""

from __future__ import annotations

import getpass
import re

import pytest
from builders import build_daemon, config_file, daemon_config
from helpers import cli
from scenario import INVARIANT, World, script, settle

from monitor.cli.incidents import UPDATED_BY_THE_DAEMON
from monitor.config import SlackConfig
from monitor.daemon.daemon import Daemon

SECOND = INVARIANT.replace("No item is marked bad.", "No bad item has a note.").replace(
    "severity: critical", "severity: warning"
)


def console_daemon(world: World, **slack: object) -> Daemon:
    """A daemon of this process with no Slack token: its alerts go to the console."""
    (world.folder / "bad_notes.sql").write_text(SECOND)
    config = daemon_config(world.folder, slack=SlackConfig.model_validate(slack))
    daemon = build_daemon(config, world.dsn, world.store, world.clock)
    daemon.reload()
    return daemon


def both_open(world: World, daemon: Daemon) -> None:
    script(world, daemon, 0)  # rows 1 and 2 bad: both invariants violated
    daemon.evaluate("bad_notes")
    settle(daemon, world.clock, "opened")


def headlines(out: str) -> list[str]:
    """The line that introduces each printed item, each message timestamp (the console's
    own, from the clock) written as the order it first appeared in: TS1, TS2, …"""
    seen: dict[str, str] = {}

    def numbered(match: re.Match[str]) -> str:
        return seen.setdefault(match[0], f"TS{len(seen) + 1}")

    lines = [line for line in out.splitlines() if line.startswith(("──", "    📎"))]
    return [re.sub(r"\b\d{10}\.\d{6}\b", numbered, line) for line in lines]


def test_each_printed_message_and_csv_names_its_incident(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = console_daemon(world)
    both_open(world, daemon)
    script(world, daemon, 1)  # row 3 appears and row 1 goes, for both
    daemon.evaluate("bad_notes")
    settle(daemon, world.clock, "changed")
    daemon.databases.close()
    out = capsys.readouterr().out
    assert headlines(out) == [
        "── alert to #invariants · incident #1 (bad_items) ──",
        "── alert to #invariants · incident #2 (bad_notes) ──",
        # Both CSVs come after the second root: each says whose it is.
        "    📎 CSV of incident #1: bad_items: 2 offending rows",
        "    📎 CSV of incident #2: bad_notes: 2 offending rows",
        "── alert to #invariants (in thread TS1) · incident #1 (bad_items) ──",
        "── alert TS1 in #invariants updated · incident #1 (bad_items) ──",
        "── alert TS1 in #invariants updated · incident #1 (bad_items) ──",
        "── alert to #invariants (in thread TS2) · incident #2 (bad_notes) ──",
        "── alert TS2 in #invariants updated · incident #2 (bad_notes) ──",
        "── alert TS2 in #invariants updated · incident #2 (bad_notes) ──",
    ]
    # The thread reply itself says nothing of its incident: only its headline does.
    reply = out.split("── alert to #invariants (in thread ")[1].split("\n\n")[0]
    assert reply.splitlines()[1:] == [
        "    🔁 The offending rows changed; now 2 offending rows.",
        "    ➕ 1 new offending row: `[3]`",
        "    ➖ 1 row no longer offends: `[1]`",
    ]


def test_in_a_digests_thread_each_detail_and_csv_names_its_incident(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = console_daemon(world, digest_threshold=2)
    both_open(world, daemon)
    daemon.databases.close()
    out = capsys.readouterr().out
    assert "🚨 2 incidents opened at once" in out
    assert headlines(out) == [
        "── alert to #invariants ──",  # the digest: about both, so about neither
        # The thread is the digest's: each CSV is told apart by the invariant it names.
        "── alert to #invariants (in thread TS1) · incident #1 (bad_items) ──",
        "    📎 CSV of incident #1: bad_items: 2 offending rows",
        "── alert to #invariants (in thread TS1) · incident #2 (bad_notes) ──",
        "    📎 CSV of incident #2: bad_notes: 2 offending rows",
    ]


def test_invmon_ack_says_the_daemon_updates_the_alert_where_it_delivers(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = console_daemon(world)
    both_open(world, daemon)
    capsys.readouterr()
    home = world.folder.parent
    config = config_file(home, state={"path": home / "state.db"})
    done = cli("ack", "2", "--config", str(config))
    assert (done.returncode, done.stdout.splitlines()) == (
        0,
        [
            "You acknowledged incident #2 until resolved.",
            UPDATED_BY_THE_DAEMON,
        ],
    )
    settle(daemon, world.clock, "acked")
    daemon.databases.close()
    out = capsys.readouterr().out
    assert headlines(out) == ["── alert TS1 in #invariants updated · incident #2 (bad_notes) ──"]
    assert f"👀 Acknowledged by {getpass.getuser()} (command line) " in out
    # The shell's config says nothing of the daemon's Slack (its token is often in its own
    # environment only): the same words with a token in this config as without.
    with_slack = config_file(home, state={"path": home / "state.db"}, slack={"token": "xoxb-1"})
    unacked = cli("unack", "2", "--config", str(with_slack))
    assert (unacked.returncode, unacked.stdout.splitlines()) == (
        0,
        [
            "You removed the acknowledgement of incident #2; reminders resume.",
            UPDATED_BY_THE_DAEMON,
        ],
    )


@pytest.mark.parametrize(
    ("kind", "closed", "ended_as", "named"),
    [
        ("violation", False, None, "payments/odd name: (x)"),
        ("violation", True, None, "payments/odd name: (x)"),
        ("violation", True, "retired", "payments/odd name: (x)"),
        ("cannot_evaluate", False, None, "payments/odd name: (x)"),
        ("invalid_file", False, None, "payments/odd name: (x)"),
        ("quarantined", False, None, "payments/odd name: (x)"),
        # A target's incident is named for the target, not an invariant: the number only.
        ("target_unreachable", False, None, None),
    ],
)
def test_the_incident_is_read_from_the_message_itself(
    kind: str, closed: bool, ended_as: str | None, named: str | None
) -> None:
    from datetime import UTC, datetime, timedelta

    from alerts.console import About, about
    from alerts.messages import IncidentView, root_message, with_subject

    opened = datetime(2026, 5, 1, tzinfo=UTC)
    view = IncidentView(
        incident_id=7,
        invariant="(target payments)" if kind == "target_unreachable" else "payments/odd name: (x)",
        kind=kind,
        opened_at=opened,
        resolved_at=opened + timedelta(hours=1) if closed else None,
        ended_as=ended_as,
        count=3,
    )
    message = root_message(view, opened + timedelta(hours=2))
    assert about(message.blocks) == About(7, named)
    reply = with_subject(message, "*a &lt;b&gt; &amp; c* (incident #8)")
    assert about(reply.blocks) == About(8, "a <b> & c")


def test_terminal_escapes_in_rows_and_names_are_printed_as_escapes(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row value or a file name holding ESC, an OSC title sequence or a bell reached the
    terminal as is from the console's alerts, while the log and `check` escaped them."""
    (world.folder / "bad_items.sql").unlink()
    (world.folder / "n\x1b[31mame.sql").write_text(
        "-- description: x holds\n-- key: [k]\nSELECT E'row\\x1b[31mRED\\x1b]0;pwn\\x07' AS k\n"
    )
    config = daemon_config(world.folder, slack=SlackConfig.model_validate({}))
    daemon = build_daemon(config, world.dsn, world.store, world.clock)
    daemon.reload()
    result = daemon.evaluate("n\x1b[31mame")
    settle(daemon, world.clock, "opened")
    daemon.databases.close()
    out = capsys.readouterr().out
    assert result is not None and result.count == 1
    assert "\x1b" not in out and "\x07" not in out
    # The row's value as its JSON literal, cut to the cell with a digest of the whole.
    assert '"row\\u001b[31m…#' in out
    assert "n\\x1b[31mame" in out
