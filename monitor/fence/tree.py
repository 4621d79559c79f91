"""libpg_query's JSON tree as the fence reads it: the references a query makes, what the
parser saw (`Analysis`), line numbers from offsets, and walking the nodes. Pure."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from monitor.fence.catalog import Name
from monitor.problems import SqlProblem

RefKind = Literal[
    "function",
    "syntax_function",
    "operator",
    "cast",  # every type named (a cast, a column definition list): values are made into it
    "attribute",
    "relation",
    "tablesample",
    "libxml",  # XML syntax that parses: ("xmlparse",), ("is_document",), ("xmlserialize",)
    "xml",  # any XML syntax (xmlelement, XMLPARSE…): the query makes xml values
    "setting",  # current_setting('name'): (name,); () when not a literal; ("*",) for all
]


@dataclass(frozen=True)
class Reference:
    """Something the query asks PostgreSQL to run or read, where it is written."""

    kind: RefKind
    name: Name
    line: int


@dataclass
class Analysis:
    """What the parser saw: structural problems, and what the query calls and reads."""

    problems: list[SqlProblem] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)
    statement: dict[str, Any] | None = None  # the one SelectStmt, as libpg_query's JSON
    text: str = ""  # exactly the statement, without a trailing `;` or what follows it
    text_first_line: int = 1  # the line of the given SQL where `text` starts
    # Every `a < b` (<, <=, >, >=) as libpg_query's A_Expr, for lint's rules: found on the
    # one walk of the tree rather than by walking it again.
    orderings: list[dict[str, Any]] = field(default_factory=list)

    def named(self, kind: RefKind) -> list[Reference]:
        return [r for r in self.references if r.kind == kind]

    def without_tree(self) -> Analysis:
        """The same reading without the parse tree (which only lint's shape rules read):
        small enough to keep for every text a daemon sends. An empty statement still says
        there was one SELECT."""
        return Analysis(
            self.problems,
            self.references,
            None if self.statement is None else {},
            self.text,
            self.text_first_line,
        )


class Lines:
    """Line numbers from libpg_query's byte offsets and the scanner's character offsets."""

    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.encoded = sql.encode("utf-8")
        # Where each line starts, so a big query's many nodes cost a bisect each.
        self._bytes = [m.start() for m in re.finditer(b"\n", self.encoded)]
        self._chars = [m.start() for m in re.finditer("\n", sql)]

    def of_byte(self, offset: int | None) -> int:
        return bisect.bisect_left(self._bytes, max(0, offset or 0)) + 1

    def of_char(self, offset: int | None) -> int:
        return bisect.bisect_left(self._chars, max(0, offset or 0)) + 1


def node_items(
    tree: Any, stop_at: frozenset[str] = frozenset()
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every node of libpg_query's JSON tree as (type, fields), depth first, not entering
    nodes whose type is in `stop_at`.

    A node is a one-key object whose key is its type (`{"FuncCall": {...}}`); fields whose
    type is fixed by the grammar are inlined without that wrapper and are walked too."""
    for item in objects(tree, stop_at):
        if len(item) == 1:
            key = next(iter(item))
            value = item[key]
            if key[:1].isupper() and type(value) is dict:
                yield key, value


def objects(tree: Any, stop_at: frozenset[str] = frozenset()) -> Iterator[dict[str, Any]]:
    """Every JSON object in the tree, depth first (iteratively: no recursion limit). Only
    containers are stacked: a tree has many more strings and numbers than objects."""
    stack = [tree]
    while stack:
        item = stack.pop()
        if type(item) is list:
            stack.extend(v for v in reversed(item) if type(v) in (dict, list))
        elif type(item) is dict:
            if stop_at and len(item) == 1 and next(iter(item)) in stop_at:
                continue
            yield item
            stack.extend(v for v in reversed(item.values()) if type(v) in (dict, list))


def names(items: list[Any] | None) -> Name:
    """A qualified name from a list of String nodes (other nodes, e.g. `*`, are skipped)."""
    return tuple(
        str(part["String"]["sval"])
        for part in items or []
        if isinstance(part, dict) and "String" in part
    )


def relation_name(body: dict[str, Any]) -> Name:
    parts = [body.get("schemaname"), body.get("relname")]
    return tuple(str(p) for p in parts if p)


def first_location(tree: Any) -> int | None:
    for _, body in node_items(tree):
        if "location" in body:
            return int(body["location"])
    return None
