"""What every command shares: one name for each output format, and an exit code documented
in the manual's "Exit codes" table, a row for every command there is."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
from helpers import PRIVILEGED_YAML, cli

from monitor.cli.commands import main

ROOT = Path(__file__).resolve().parents[2]


def commands(group: click.Group = main, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    """Every command as typed (`store migrate` for one of a group), hidden ones too."""
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", command


def test_every_command_calls_its_human_format_text_and_table_still_works() -> None:
    formats = {}
    for name, command in commands():
        for param in command.params:
            if param.name == "fmt":
                assert isinstance(param.type, click.Choice)
                formats[name] = (list(param.type.choices), param.default)
                assert (
                    f"--format [{'|'.join(param.type.choices)}]"
                    in cli(*name.split(), "--help").stdout
                )
    assert formats["check"] == (["text", "json", "markdown"], "text")
    assert {n: f for n, f in formats.items() if n != "check"} == {
        n: (["text", "json"], "text") for n in formats if n != "check"
    }
    assert {"check", "status", "history", "lint", "test", "explain", "mutes"} <= set(formats)
    for name in ("check", "status", "history"):  # what scripts wrote before `text`
        [fmt] = [p for p in dict(commands())[name].params if p.name == "fmt"]
        assert fmt.type.convert("table", fmt, None) == "text"


def test_format_table_prints_what_format_text_prints(database: str, tmp_path: Path) -> None:
    (tmp_path / "invariants").mkdir()
    (tmp_path / "invariants" / "fine.sql").write_text(
        "-- description: x\nSELECT 1 AS a WHERE false\n"
    )
    (tmp_path / "invmon.yaml").write_text(PRIVILEGED_YAML)
    assert cli("run", "--once", "--dsn", database, cwd=tmp_path).returncode == 0
    for command in (("status",), ("history", "fine")):
        text = cli(*command, "--format", "text", cwd=tmp_path)
        table = cli(*command, "--format", "table", cwd=tmp_path)
        assert (table.returncode, table.stdout) == (0, text.stdout), command
        assert "fine" in text.stdout


def documented_exit_codes() -> dict[str, str]:
    """The manual's "Exit codes" table (docs/cli.md): each command named in a row's first
    cell (its flags dropped: `run --once` is `run`), and the row's text."""
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = page.split("\n## Exit codes\n", 1)[1]
    table = section[section.index("\n| command |") :].split("\n\n", 1)[0]  # the first table
    rows: dict[str, str] = {}
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 2, line
        for named in re.findall(r"`([^`]+)`", cells[0]):
            words = [w for w in named.split() if not w.startswith("-")]
            rows[" ".join(words)] = cells[1]
    return rows


def test_the_manual_documents_the_exit_codes_of_every_command_and_only_those() -> None:
    documented = documented_exit_codes()
    assert sorted(documented) == sorted(name for name, _ in commands())
    assert all(re.match(r"0 ", text) for text in documented.values()), documented
    assert "**70** wedged" in documented["run"]
    assert "1 with `--check`, migrations are pending" in documented["store migrate"]
