"""PostgreSQL's own reading of an invariant's SQL: one statement or not, which kind, and
everything it asks the server to run or read (functions, operators, casts, attribute
calls, relations), each at its line. Pure; fence.py judges what this finds.

The parser is libpg_query (through pglast): names come out decoded exactly as the server
decodes them, whatever the quoting, `U&` escapes, dollar quotes or comments around them.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from pglast import parser as pg_parser

from monitor.pgcatalog import Name
from monitor.problems import SqlProblem

RefKind = Literal[
    "function", "syntax_function", "operator", "cast", "attribute", "relation", "tablesample"
]
_JSON_SYNTAX: dict[str, str | dict[str, str]] = {
    "JsonFuncExpr": {
        "JSON_VALUE_OP": "json_value",
        "JSON_QUERY_OP": "json_query",
        "JSON_EXISTS_OP": "json_exists",
    },
    "JsonTable": "json_table",
    "JsonParseExpr": "json",
    "JsonScalarExpr": "json_scalar",
    "JsonSerializeExpr": "json_serialize",
    "JsonObjectConstructor": "json_object",
    "JsonArrayConstructor": "json_array",
    "JsonArrayQueryConstructor": "json_array",
    "JsonObjectAgg": "json_objectagg",
    "JsonArrayAgg": "json_arrayagg",
}
_BETWEEN_OPERATORS: tuple[Name, ...] = ((">=",), ("<=",))
_ORDERINGS = frozenset({"<", "<=", ">", ">="})
_DML = {
    "InsertStmt": "INSERT",
    "UpdateStmt": "UPDATE",
    "DeleteStmt": "DELETE",
    "MergeStmt": "MERGE",
}
_LOCK_WORDS = {
    "LCS_FORUPDATE": "FOR UPDATE",
    "LCS_FORNOKEYUPDATE": "FOR NO KEY UPDATE",
    "LCS_FORSHARE": "FOR SHARE",
    "LCS_FORKEYSHARE": "FOR KEY SHARE",
}


# The node types _collect turns into references or problems; the walk skips the rest.
_COLLECTED = frozenset(
    {
        "FuncCall",
        "A_Expr",
        "SubLink",
        "JoinExpr",
        "RangeTableFunc",
        "SortBy",
        "CaseExpr",
        "TypeCast",
        "ColumnRef",
        "A_Indirection",
        "RangeVar",
        "RangeTableSample",
        *_JSON_SYNTAX,
        *_DML,
    }
)


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


class _Lines:
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
    for item in _objects(tree, stop_at):
        if len(item) == 1:
            key = next(iter(item))
            value = item[key]
            if key[:1].isupper() and type(value) is dict:
                yield key, value


def _objects(tree: Any, stop_at: frozenset[str] = frozenset()) -> Iterator[dict[str, Any]]:
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


def _names(items: list[Any] | None) -> Name:
    """A qualified name from a list of String nodes (other nodes, e.g. `*`, are skipped)."""
    return tuple(
        str(part["String"]["sval"])
        for part in items or []
        if isinstance(part, dict) and "String" in part
    )


# The tree is read into Python objects (about 12 bytes of memory per byte of JSON), so its
# size is bounded before that: 2 MB of JSON is far beyond any real invariant (a 1,000-column
# query is 0.5 MB) and keeps judging a query within ~25 MB.
MAX_TREE_BYTES = 2_000_000


class TreeTooLarge(Exception):
    def __init__(self, size: int) -> None:
        self.size = size
        super().__init__(
            f"the query is too large to judge: its parse tree takes {size:,} bytes, over "
            f"{MAX_TREE_BYTES:,}; move long lists of values into a table"
        )


def parse(sql: str) -> dict[str, Any]:
    """libpg_query's tree of `sql`; raises pglast's ParseError, or TreeTooLarge."""
    text = pg_parser.parse_sql_json(sql)
    if len(text) > MAX_TREE_BYTES:
        raise TreeTooLarge(len(text))
    return dict(json.loads(text))


def analyze(sql: str) -> Analysis:
    """Read the text as PostgreSQL would: one SELECT, and what it calls."""
    lines = _Lines(sql)
    try:
        tree = parse(sql)
    except pg_parser.ParseError as exc:
        message, *where = exc.args
        line = lines.of_char(where[0]) if where and isinstance(where[0], int) else 1
        return Analysis([SqlProblem(line, f"cannot parse the query: {message}")])
    except TreeTooLarge as exc:
        return Analysis([SqlProblem(lines.of_char(len(sql) - len(sql.lstrip())), str(exc))])
    statements = tree.get("stmts") or []
    if not statements:
        first = lines.of_char(len(sql) - len(sql.lstrip()))
        return Analysis(
            [SqlProblem(first, "the file has no query; write a SELECT of the offending rows")]
        )
    if len(statements) > 1:
        second = statements[1].get("stmt_location", 0)
        return Analysis(
            [
                SqlProblem(
                    lines.of_byte(second),
                    f"expected exactly one statement, found {len(statements)}; an invariant "
                    "is one query returning the offending rows",
                )
            ]
        )
    raw = statements[0]
    start = int(raw.get("stmt_location", 0))
    length = int(raw.get("stmt_len", 0)) or len(lines.encoded) - start
    text = lines.encoded[start : start + length].decode("utf-8")
    analysis = Analysis(text=text, text_first_line=lines.of_byte(start))
    (kind, body), *_ = raw["stmt"].items()
    if kind != "SelectStmt":
        tokens = pg_parser.scan(sql)
        word = next((t for t in tokens if _char_to_byte(sql, t.start) >= start), None)
        keyword = sql[word.start : word.end + 1].upper() if word else kind
        keyword = _DML.get(kind, keyword)  # WITH ... INSERT is an INSERT
        analysis.problems.append(
            SqlProblem(
                lines.of_byte(start),
                f"{keyword} statement is not allowed; an invariant must be one read-only "
                "query (SELECT, WITH ... SELECT, VALUES)",
            )
        )
        return analysis
    analysis.statement = body
    _collect(raw["stmt"], analysis, lines)
    return analysis


def _char_to_byte(sql: str, offset: int) -> int:
    return len(sql[:offset].encode("utf-8"))


def _lock_tokens(sql: str) -> list[Any]:
    """Where each FOR UPDATE/SHARE clause is written (the tree does not say)."""
    tokens = pg_parser.scan(sql)
    return [
        t
        for i, t in enumerate(tokens)
        if t.name == "FOR"
        and i + 1 < len(tokens)
        and tokens[i + 1].name in ("UPDATE", "SHARE", "NO", "KEY")
    ]


def _collect(tree: Any, analysis: Analysis, lines: _Lines) -> None:
    refs = analysis.references
    lock_tokens: list[Any] | None = None  # scanned only when a locking clause is found
    # One walk of the tree does everything (a wrapped query has thousands of nodes, and this
    # runs for every text sent): only containers are stacked, and a line is worked out only
    # for the kinds of node that can become a reference.
    stack: list[Any] = [tree]
    while stack:
        item = stack.pop()
        if type(item) is list:
            stack.extend(reversed(item))
            continue
        if type(item) is not dict:
            continue
        stack.extend(v for v in reversed(item.values()) if type(v) in (dict, list))
        if "intoClause" in item or "lockingClause" in item:
            if lock_tokens is None:
                lock_tokens = _lock_tokens(lines.sql)
            _select_clauses(item, analysis, lines, lock_tokens)
        if len(item) != 1:
            continue
        kind = next(iter(item))
        body = item[kind]
        if type(body) is not dict or kind not in _COLLECTED:
            continue
        line = lines.of_byte(body.get("location"))
        if kind == "FuncCall":
            refs.append(Reference("function", _names(body["funcname"]), line))
        elif kind == "A_Expr":
            expr_kind = body.get("kind", "AEXPR_OP")
            if expr_kind.startswith(("AEXPR_BETWEEN", "AEXPR_NOT_BETWEEN")):
                refs += [Reference("operator", op, line) for op in _BETWEEN_OPERATORS]
            else:
                operator = _names(body.get("name"))
                refs.append(Reference("operator", operator, line))
                if expr_kind == "AEXPR_OP" and operator and operator[-1] in _ORDERINGS:
                    analysis.orderings.append(body)
        elif kind == "SubLink" and body.get("operName"):
            refs.append(Reference("operator", _names(body["operName"]), line))
        elif kind == "SubLink" and body.get("subLinkType") in ("ANY_SUBLINK", "ALL_SUBLINK"):
            # `x IN (SELECT …)` names no operator: PostgreSQL looks `=` up by name.
            refs.append(Reference("operator", ("=",), line))
        elif kind == "JoinExpr" and (body.get("usingClause") or body.get("isNatural")):
            # JOIN … USING and NATURAL JOIN compare with `=`, looked up by name too.
            refs.append(Reference("operator", ("=",), lines.of_byte(_first_location(body))))
        elif kind in _JSON_SYNTAX:
            # SQL/JSON syntax in the PostgreSQL 18 grammar; an older server reads the same
            # words as calls of whatever function has that name: both readings are judged.
            name = _JSON_SYNTAX[kind]
            if isinstance(name, dict):
                name = name.get(str(body.get("op")), "")
            if name:
                refs.append(Reference("syntax_function", (name,), line))
        elif kind == "RangeTableFunc":
            refs.append(Reference("function", ("xmltable",), line))
        elif kind == "SortBy" and body.get("useOp"):
            refs.append(Reference("operator", _names(body["useOp"]), line))
        elif kind == "CaseExpr" and body.get("arg"):
            refs.append(Reference("operator", ("=",), line))
        elif kind == "TypeCast":
            type_name = body.get("typeName") or {}
            refs.append(
                Reference(
                    "cast", _names(type_name.get("names")), lines.of_byte(type_name.get("location"))
                )
            )
        elif kind == "ColumnRef":
            # `t.fn` is also a call of fn(t) when fn takes one composite argument.
            fields = _names(body.get("fields"))
            refs += [Reference("attribute", (name,), line) for name in fields[1:]]
        elif kind == "A_Indirection":
            fields = _names(body.get("indirection"))
            line = lines.of_byte(_first_location(body.get("arg")))
            refs += [Reference("attribute", (name,), line) for name in fields]
        elif kind == "RangeVar":
            # A CTE's name is judged as a relation too: telling a CTE from a view of the same
            # name needs the scoping rules, and judging both can only refuse more.
            refs.append(Reference("relation", _relation_name(body), line))
        elif kind == "RangeTableSample":
            refs.append(Reference("tablesample", _names(body.get("method")), line))
            relation = body.get("relation") or {}
            if "relname" in relation:
                refs.append(
                    Reference(
                        "relation",
                        _relation_name(relation),
                        lines.of_byte(relation.get("location")),
                    )
                )
        elif kind in _DML:
            relation = body.get("relation") or {}
            analysis.problems.append(
                SqlProblem(
                    lines.of_byte(relation.get("location")),
                    f"data-modifying {_DML[kind]} inside the query is not allowed",
                )
            )


def _select_clauses(
    select: dict[str, Any], analysis: Analysis, lines: _Lines, lock_tokens: list[Any]
) -> None:
    """INTO and locking clauses, which can sit on a SELECT that the tree inlines (a UNION's
    arms) rather than under a typed node."""
    into = select.get("intoClause")
    if into:
        analysis.problems.append(
            SqlProblem(
                lines.of_byte((into.get("rel") or {}).get("location")),
                "SELECT ... INTO creates a table; not allowed",
            )
        )
    for clause in select.get("lockingClause") or []:
        strength = clause.get("LockingClause", {}).get("strength", "")
        words = _LOCK_WORDS.get(strength, "FOR UPDATE/SHARE")
        where = lock_tokens.pop(0).start if lock_tokens else None
        analysis.problems.append(
            SqlProblem(lines.of_char(where), f"{words} takes row locks on the replica; not allowed")
        )


def _relation_name(body: dict[str, Any]) -> Name:
    parts = [body.get("schemaname"), body.get("relname")]
    return tuple(str(p) for p in parts if p)


def _first_location(tree: Any) -> int | None:
    for _, body in node_items(tree):
        if "location" in body:
            return int(body["location"])
    return None


# --- the judgement --------------------------------------------------------------------------


def called_functions(sql: str) -> list[Name]:
    """The functions the query calls, in order, as PostgreSQL's parser names them."""
    analysis = analyze(sql)
    return [r.name for r in analysis.references if r.kind == "function"]


def tables_read(sql: str) -> list[str]:
    """The tables and views a query reads, as written (CTE names and the system catalogs
    left out): what a scratch database must have for the query to run."""
    analysis = analyze(sql)
    if analysis.statement is None:
        return []
    ctes = {
        str(body.get("ctename"))
        for kind, body in node_items(analysis.statement)
        if kind == "CommonTableExpr"
    }
    found: list[str] = []
    for ref in analysis.named("relation"):
        system = ref.name[0] in ("pg_catalog", "information_schema") or (
            len(ref.name) == 1 and ref.name[0].startswith("pg_")
        )
        name = ".".join(ref.name)
        if not system and not (len(ref.name) == 1 and name in ctes) and name not in found:
            found.append(name)
    return found
