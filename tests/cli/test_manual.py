"""The manual's reference pages are made from the code: a committed page that differs from
what the code makes now (a new flag, a new config key, a changed default or comment) fails
here, with the command that writes it again."""

from __future__ import annotations

from pathlib import Path

from monitor.cli.commands import main
from monitor.cli.manual import commands_page, config_keys, config_page

DOCS = Path(__file__).resolve().parents[2] / "docs"
AGAIN = "the manual is out of date: run `python docs/generate.py` and commit docs/"


def test_the_committed_reference_pages_are_what_the_code_makes() -> None:
    assert (DOCS / "commands.md").read_text(encoding="utf-8") == commands_page(main), AGAIN
    assert (DOCS / "configuration.md").read_text(encoding="utf-8") == config_page(), AGAIN


def test_every_command_flag_and_config_key_is_in_the_manual() -> None:
    commands = (DOCS / "commands.md").read_text(encoding="utf-8")
    for name, command in main.commands.items():
        assert f"## `invmon {name}`" in commands, name
        for param in command.params:
            if getattr(param, "hidden", False):
                continue  # kept for old scripts, not offered: --help leaves it out too
            for flag in getattr(param, "opts", []):
                if flag.startswith("--"):
                    assert flag in commands, (name, flag)
    configuration = (DOCS / "configuration.md").read_text(encoding="utf-8")
    keys = [key for key, *_ in config_keys()]
    assert len(keys) == len(set(keys))
    for key in keys:
        assert f"| `{key}` |" in configuration, key
    assert {"daemon.jitter", "slack.routes.severity", "targets.NAME.dsn", "schema"} <= set(keys)


def test_every_config_key_says_what_it_means() -> None:
    """The reference's meaning column comes from the comment beside each model field: a new
    key without one would be listed with an empty meaning."""
    assert [key for key, _kind, _default, meaning in config_keys() if not meaning.strip()] == []
