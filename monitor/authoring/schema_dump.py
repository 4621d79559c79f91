"""A production schema as `pg_dump --schema-only` writes it, made loadable into a scratch
database. Pure: text in, statements out.

A dump is a psql script, not plain SQL: it has meta-commands (`\\restrict KEY` since pg_dump
15.20/16.10/17.6, `\\connect`), owners and grants naming roles a scratch server does not
have, and extensions it may not have. For invmon's purposes only the shape matters (tables,
types, functions, views), so meta-commands, owners and privileges are left out, and
statements that may fail on a server without the production's extensions are tried and
reported as warnings instead of stopping the load.

Recommended: `pg_dump --schema-only --no-owner --no-privileges --no-comments`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

from pglast import parser as pg_parser

Handling = Literal["run", "try", "skip"]

# Statements about who may do what: meaningless on a scratch server.
_SKIPPED = {
    "GrantStmt",
    "GrantRoleStmt",
    "AlterOwnerStmt",
    "AlterDefaultPrivilegesStmt",
    "CreateRoleStmt",
    "AlterRoleStmt",
    "AlterRoleSetStmt",
    "CreatePublicationStmt",
    "AlterPublicationStmt",
    "CreateSubscriptionStmt",
    "SecLabelStmt",
}
# Statements that depend on what the scratch server has installed.
_TRIED = {"CreateExtensionStmt", "CommentStmt", "CreateEventTrigStmt", "AlterExtensionStmt"}
_META = re.compile(r"^[ \t]*\\[^\n]*$", re.M)
_COPY_DATA = re.compile(r"^COPY [^\n]* FROM stdin;\n.*?^\\\.$", re.M | re.S)


class DumpParseError(Exception):
    """The schema file is not SQL at `line` (psql meta-commands set aside)."""

    def __init__(self, line: int, message: str) -> None:
        self.line = line
        self.message = message
        super().__init__(f"{line}: {message}")


@dataclass(frozen=True)
class DumpStatement:
    text: str
    line: int  # where it starts in the dump
    handling: Handling


def meta_commands(text: str) -> int:
    """How many psql meta-command lines (`\\restrict`, `\\connect`, …) a dump has."""
    return len(_META.findall(_COPY_DATA.sub("", text)))


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def without_meta_commands(text: str) -> str:
    """`text` with its psql meta-command lines and `COPY … FROM stdin` data blanked in place
    (each line kept, so a line number still points into the file): what is left is SQL.
    A `COPY` block's data is ended by `\\.` and goes with the meta-commands."""
    return _META.sub(_blank, _COPY_DATA.sub(_blank, text))


def _owner_only(tree: dict[str, object]) -> bool:
    """`ALTER TABLE … OWNER TO role` is an AlterTableStmt whose commands all change owner."""
    statement = tree.get("AlterTableStmt")
    if not isinstance(statement, dict):
        return False
    commands = statement.get("cmds") or []
    return bool(commands) and all(
        isinstance(c, dict) and c.get("AlterTableCmd", {}).get("subtype") == "AT_ChangeOwner"
        for c in commands
    )


def dump_statements(text: str) -> list[DumpStatement]:
    """The dump's statements, each with its line and how to load it. Raises DumpParseError
    at the line of a text that is not SQL once meta-commands are blanked."""
    # psql-only syntax never reaches the parser.
    blanked = without_meta_commands(text)
    out = []
    try:
        pieces = pg_parser.split(blanked, with_parser=True, only_slices=True)
    except pg_parser.ParseError as exc:
        message, *where = exc.args
        at = where[0] if where and isinstance(where[0], int) else 0
        raise DumpParseError(blanked.count("\n", 0, max(at, 0)) + 1, str(message)) from None
    for piece in pieces:
        statement = blanked[piece]
        line = blanked.count("\n", 0, piece.start) + 1
        parsed = pg_parser.parse_sql_json(statement)
        kind = _kind(parsed)
        handling: Handling = "run"
        if kind in _SKIPPED or (kind == "AlterTableStmt" and _owner_only(_first(parsed))):
            handling = "skip"
        elif kind in _TRIED:
            handling = "try"
        out.append(DumpStatement(statement, line, handling))
    return out


def _first(parsed: str) -> dict[str, object]:
    statements = json.loads(parsed).get("stmts") or [{}]
    stmt = statements[0].get("stmt") or {}
    return dict(stmt)


def _kind(parsed: str) -> str:
    first = _first(parsed)
    return next(iter(first), "")
