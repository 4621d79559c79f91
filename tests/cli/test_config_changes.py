"""Which keys of a re-read config a running daemon takes at once, and which wait for a
restart: pure, on Config values."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from monitor.config.changes import config_change, with_live
from monitor.config.loading import parse_config


def test_live_keys_are_taken_and_the_others_kept_and_named() -> None:
    old = parse_config(
        {"targets": {"default": {"dsn": "host=a"}, "jobs": {"dsn": "host=b"}}}, "old.yaml"
    )
    new = parse_config(
        {
            "log": {"level": "DEBUG"},
            "slack": {"routes": {"owner": {"@ops": "#ops"}}, "token": "xoxb-new-secret"},
            "http": {"page_refresh": "5s", "listen": "0.0.0.0:9999"},
            "database": {"lock_timeout": "2s", "connect_timeout": "3s"},
            "invariants": "elsewhere",
            "targets": {
                "default": {"dsn": "host=a", "lock_timeout": "1s"},
                "jobs": {"dsn": "host=other"},
                "new": {"dsn": "host=c"},
            },
        },
        "new.yaml",
    )
    change = config_change(old, new)
    assert change.live == (
        "database.lock_timeout",
        "http.page_refresh",
        "invariants",
        "log.level",
        "slack.routes.owner.@ops",
        "targets.default.lock_timeout",
    )
    assert change.restart == (
        "database.connect_timeout",
        "http.listen",
        "slack.token",
        "targets.jobs.dsn",
        "targets.new.dsn",  # a target added: its pool and workers start with the daemon
    )
    assert all("secret" not in key and "host=" not in key for key in change.live + change.restart)
    merged = with_live(old, new)
    assert (merged.log.level, merged.http.page_refresh, merged.invariants) == (
        "DEBUG",
        timedelta(seconds=5),
        Path("elsewhere"),
    )
    assert merged.slack.routes.owner == {"@ops": "#ops"}
    assert merged.database.lock_timeout == timedelta(seconds=2)
    assert merged.targets["default"].lock_timeout == timedelta(seconds=1)
    # What waits for a restart stays as the daemon started with it.
    assert (merged.slack.token, merged.http.listen) == (None, "127.0.0.1:9187")
    assert merged.database.connect_timeout == timedelta(seconds=10)
    assert (sorted(merged.targets), merged.targets["jobs"].dsn) == (["default", "jobs"], "host=b")
    assert not config_change(merged, with_live(merged, merged))
