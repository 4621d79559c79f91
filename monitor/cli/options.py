"""The options every command shares, and the one error a command fails with.

Exit codes: 0 everything held (or the command succeeded), 1 a violation or a failing case,
2 the command could not do its job (a user error, an unreachable database, an invalid file):
`InvmonError`, one sentence on stderr, never a traceback.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn, TypeVar

import click

from monitor.authoring.ci_output import (
    Finding,
    JunitCase,
    github_annotations,
    junit_xml,
)
from monitor.config import check_dsn

F = TypeVar("F", bound=Callable[..., Any])


EXIT_INVALID = 2


class InvmonError(click.ClickException):
    """The command could not do its job: one sentence on stderr, exit 2."""

    exit_code = EXIT_INVALID

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"invmon: {self.format_message()}", err=True)


def fail(message: str) -> NoReturn:
    raise InvmonError(message)


# An incident's or a mute's number: the state store's integer holds no more (a larger one
# was an OverflowError from the SQLite driver, with its traceback).
STORE_ID = click.IntRange(1, 2**63 - 1)

CONFIG = click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="YAML config file (default: ./invmon.yaml when present).",
)


DSN = click.option(
    "--dsn",
    envvar="INVMON_DSN",
    help="libpq DSN of the monitored database (a read replica). Env: INVMON_DSN.",
)


INVARIANTS = click.option(
    "--invariants",
    "invariants_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder of invariant .sql files (default: from config, else ./invariants).",
)


SCHEMA = click.option(
    "--schema",
    "schema_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Schema file, e.g. `pg_dump --schema-only` (default: `schema:` in config).",
)


JUNIT = click.option(
    "--junit",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write the results as JUnit XML to this file (for any CI).",
)


TARGETS = click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="NAME",
    help="Only the invariants of this target (repeatable); see `targets:` in the config.",
)


SELECT = click.option(
    "--select",
    "selectors",
    multiple=True,
    metavar="SELECTOR",
    help="Only these (repeatable): a name, a folder `payments/`, a glob `pay*/*`, "
    "`tag:money`, or a file path.",
)


ALLOW_PRIVILEGED_ROLE = click.option(
    "--allow-privileged-role",
    is_flag=True,
    help="Run even as a role that can change the database (a superuser, an owner, …), e.g. "
    "your own on a development database. Without it such a target is refused, as by the "
    "daemon; deploy/readonly-role.sql makes a role that needs no such flag.",
)


TEST_SERVER = click.option(
    "--dsn",
    "admin_dsn",
    help="Admin DSN of a server for scratch databases "
    "(default: INVMON_TEST_DSN, else a throwaway server).",
)


class _Formats(click.Choice[str]):
    """The formats `--help` shows, and old names still accepted for what they are now."""

    def __init__(self, choices: Sequence[str], aliases: Mapping[str, str]) -> None:
        super().__init__(choices)
        self.aliases = dict(aliases)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value in self.aliases:
            return self.aliases[value]
        return super().convert(value, param, ctx)


def output_format(*choices: str, aliases: Mapping[str, str] | None = None) -> Callable[[F], F]:
    """`--format`, the first choice the default: `text` for people, `json` for programs, and
    any other the command has; one vocabulary for every command (tests/cli hold them to it).
    `aliases` are former names, accepted without being shown (`table`, which `text`
    replaced), so scripts keep working."""
    return click.option(
        "--format",
        "fmt",
        type=_Formats(choices, aliases or {}),
        default=choices[0],
        show_default=True,
    )


# `check`, `status` and `history` called their text format `table`: still accepted.
TABLE_ALIAS = {"table": "text"}


def write_junit(path: Path, suite: str, cases: Sequence[JunitCase]) -> None:
    try:
        path.write_text(junit_xml(suite, cases), encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write --junit {str(path)!r}: {exc.strerror}")


def annotate(found: Sequence[Finding]) -> None:
    """Under GitHub Actions, each finding also becomes an annotation at its file and line."""
    if os.environ.get("GITHUB_ACTIONS") == "true" and found:
        click.echo(github_annotations(found))


def quiet_libraries() -> None:
    # sqlglot warns on stderr when it falls back to a generic Command for statements lint
    # rejects anyway; the pool logs every failed connect, which `check` reports itself.
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)


def checked_dsn(dsn: str, where: str) -> str:
    try:
        check_dsn(dsn)
    except ValueError as exc:
        fail(f"{where}: {exc}")
    return dsn
