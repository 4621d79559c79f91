"""The Slack app's manifest and the manual agree: every scope the app asks for is one the
Slack page lists."""

from __future__ import annotations

from pathlib import Path


def test_the_manual_lists_every_scope_the_slack_app_asks_for() -> None:
    import yaml

    root = Path(__file__).resolve().parents[2]
    manifest = yaml.safe_load((root / "deploy" / "slack" / "manifest.yaml").read_text())
    scopes = manifest["oauth_config"]["scopes"]["bot"]
    readme = (root / "docs" / "slack.md").read_text()
    assert [s for s in scopes if f"`{s}`" not in readme] == []
