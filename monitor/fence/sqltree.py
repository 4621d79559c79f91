"""PostgreSQL's own reading of an invariant's SQL: one statement or not, which kind, and
everything it asks the server to run or read (functions, operators, types, attribute
calls, relations, XML parsing, settings), each at its line; and the bounds on what the text
itself can hand the server (a NUL byte, long or DTD-holding literals, huge numbers and
exponents, how much numeric work). Pure; fence.py judges the references.

The parser is libpg_query (through pglast): names come out decoded exactly as the server
decodes them, whatever the quoting, `U&` escapes, dollar quotes or comments around them.
"""

from __future__ import annotations

import bisect
import decimal
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from pglast import parser as pg_parser

from monitor.fence.pgcatalog import Name
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


def quote_identifier(name: str) -> str:
    """A name PostgreSQL reads back exactly as given (case, spaces and quotes kept)."""
    return '"' + name.replace('"', '""') + '"'


# --- bounds on what the parser sees ---------------------------------------------------------
# PostgreSQL's numeric multiplication and division never check for a cancel: 400 products of
# two 65,000-digit numbers in one expression ran 40-67 s under a 2 s timeout and outlived
# pg_terminate_backend. One product of 65,000-digit numbers takes ~0.1 s, one division of a
# 131,000-digit number by a 65,000-digit one ~0.8 s (PostgreSQL 15), and numeric allows no
# more digits than that. So the parser bounds what makes a huge operand cheap to write, and
# how many such operations a query may hold; a run that still overruns its timeout (operands
# built with repeat(), say) is quarantined.
MAX_NUMBER_DIGITS = 1_000  # in a numeric literal, or a run of digits in a string literal
MAX_EXPONENT = 1_000  # a literal exponent of ^ or power(): 10^1000 has 1,001 digits
MAX_NUMERIC_WORK = 16  # multiplications, divisions, powers, roots, logarithms in one query
# A string literal can become xml by type resolution (`coalesce(xml_col, '…')`) and reach
# libxml2's parser, which PostgreSQL cannot interrupt: a DTD's entities expand without
# bound, and 40,000 attributes on one element took 2.8 s. 10,000 characters parse in a few
# milliseconds in any shape, and no invariant needs a longer literal or a DTD.
MAX_STRING_CHARS = 10_000
_DTD = ("<!DOCTYPE", "<!ENTITY")
_NUMERIC_WORK_OPERATORS = frozenset({"*", "/", "%", "^", "|/", "||/"})
_NUMERIC_WORK_FUNCTIONS = frozenset(
    {
        "power",
        "pow",
        "exp",
        "ln",
        "log",
        "log10",
        "sqrt",
        "cbrt",
        "div",
        "mod",
        "gcd",
        "lcm",
        "width_bucket",
        "numeric_mul",
        "numeric_div",
        "numeric_div_trunc",
        "numeric_mod",
        "numeric_power",
        "numeric_exp",
        "numeric_ln",
        "numeric_log",
        "numeric_sqrt",
    }
)
_POWERS = frozenset({"power", "pow", "numeric_power"})
_LONG_DIGITS = re.compile(r"\d{" + str(MAX_NUMBER_DIGITS + 1) + ",}")
_BIG_EXPONENT = re.compile(r"\d[eE][+-]?0*(\d{" + str(len(str(MAX_NUMBER_DIGITS))) + ",})")
# The views that show every role's settings (`rolconfig`, `useconfig`: ALTER ROLE … SET,
# where applications keep secrets) when read whole, and those columns anywhere.
_ROLE_VIEWS = frozenset({"pg_roles", "pg_user", "pg_shadow"})
_SETTING_COLUMNS = frozenset({"rolconfig", "useconfig", "setconfig"})


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


NUL_MESSAGE = (
    "a NUL byte: PostgreSQL's parser stops reading at it, so what follows would never be "
    "judged; remove it"
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
    if "\0" in sql:
        # libpg_query reads a C string, which ends at the first NUL: what follows it would
        # be sent unjudged. (The loader refuses such a file; this covers every other text.)
        return Analysis([SqlProblem(lines.of_char(sql.index("\0")), NUL_MESSAGE)])
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


class _Walk:
    """What one walk of the tree gathers beyond references: the places of numeric work, and
    what shows the settings of every role."""

    def __init__(self) -> None:
        self.numeric_work: list[int] = []  # the line of each
        self.stars: list[int] = []  # `*` and `t.*`
        self.bare_names: set[str] = set()  # one-field column references (a whole row)
        self.role_views: list[tuple[str, int]] = []  # (alias or name, line)


@dataclass
class _Visit:
    """What a node handler adds to: the analysis, the walk's extras, the text's lines."""

    analysis: Analysis
    lines: _Lines
    walk: _Walk

    @property
    def refs(self) -> list[Reference]:
        return self.analysis.references


def _collect(tree: Any, analysis: Analysis, lines: _Lines) -> None:
    visit = _Visit(analysis, lines, _Walk())
    lock_tokens: list[Any] | None = None  # scanned only when a locking clause is found
    # One walk of the tree does everything (a wrapped query has thousands of nodes, and this
    # runs for every text sent): only containers are stacked, and a line is worked out only
    # for the kinds of node that can become a reference (those with a handler).
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
        # A type named anywhere (a cast, a column definition list `AS r(a noisy)`, a
        # JSON_TABLE column): the grammar inlines the TypeName, so it is found by its key.
        type_name = item.get("typeName")
        if type(type_name) is dict:
            visit.refs.append(_type_reference(type_name, lines))
        if len(item) != 1:
            continue
        kind = next(iter(item))
        body = item[kind]
        handler = _HANDLERS.get(kind)
        if handler is not None and type(body) is dict:
            handler(kind, body, lines.of_byte(body.get("location")), visit)
    _after_walk(visit.walk, analysis)


# --- one handler per kind of node that can become a reference or a problem ------------------
# Each gets the node's kind, its body, the line it starts on and what to add to.

Handler = Callable[[str, dict[str, Any], int, _Visit], None]


def _on_func_call(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    name = _names(body["funcname"])
    v.refs.append(Reference("function", name, line))
    _function_facts(name, body.get("args") or [], line, v.analysis, v.walk)


def _on_expression(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    expr_kind = body.get("kind", "AEXPR_OP")
    if expr_kind.startswith(("AEXPR_BETWEEN", "AEXPR_NOT_BETWEEN")):
        v.refs.extend(Reference("operator", op, line) for op in _BETWEEN_OPERATORS)
        return
    operator = _names(body.get("name"))
    v.refs.append(Reference("operator", operator, line))
    if expr_kind == "AEXPR_OP" and operator and operator[-1] in _ORDERINGS:
        v.analysis.orderings.append(body)
    if operator and operator[-1] in _NUMERIC_WORK_OPERATORS:
        v.walk.numeric_work.append(line)
    if operator and operator[-1] == "^":
        _exponent(body.get("rexpr"), line, v.analysis)


def _on_constant(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    _literal(body, v.lines, v.analysis)


def _on_sublink(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    if body.get("operName"):
        v.refs.append(Reference("operator", _names(body["operName"]), line))
    elif body.get("subLinkType") in ("ANY_SUBLINK", "ALL_SUBLINK"):
        # `x IN (SELECT …)` names no operator: PostgreSQL looks `=` up by name.
        v.refs.append(Reference("operator", ("=",), line))


def _on_join(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    if body.get("usingClause") or body.get("isNatural"):
        # JOIN … USING and NATURAL JOIN compare with `=`, looked up by name too.
        v.refs.append(Reference("operator", ("=",), v.lines.of_byte(_first_location(body))))


def _on_json_syntax(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    # SQL/JSON syntax in the PostgreSQL 18 grammar; an older server reads the same words as
    # calls of whatever function has that name: both readings are judged.
    name_of = _JSON_SYNTAX[kind]
    if isinstance(name_of, dict):
        name_of = name_of.get(str(body.get("op")), "")
    if name_of:
        v.refs.append(Reference("syntax_function", (name_of,), line))


def _on_xmltable(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    v.refs.append(Reference("function", ("xmltable",), line))


def _on_xml_expression(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    v.refs.append(Reference("xml", (str(body.get("op")),), line))
    if body.get("op") in ("IS_XMLPARSE", "IS_DOCUMENT"):
        # XMLPARSE parses its text; IS DOCUMENT parses the value again to find out.
        word = "xmlparse" if body["op"] == "IS_XMLPARSE" else "is_document"
        v.refs.append(Reference("libxml", (word,), line))


def _on_xml_serialize(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    # Serializing a DOCUMENT checks that it is one, and INDENT re-formats it: both parse the
    # value again.
    if body.get("xmloption") == "XMLOPTION_DOCUMENT" or body.get("indent"):
        v.refs.append(Reference("libxml", ("xmlserialize",), line))


def _on_type_name(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    v.refs.append(_type_reference(body, v.lines))


def _on_sort_by(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    if body.get("useOp"):
        v.refs.append(Reference("operator", _names(body["useOp"]), line))


def _on_case(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    if body.get("arg"):
        v.refs.append(Reference("operator", ("=",), line))


def _on_column(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    # `t.fn` is also a call of fn(t) when fn takes one composite argument.
    parts = body.get("fields") or []
    fields = _names(parts)
    v.refs.extend(Reference("attribute", (name,), line) for name in fields[1:])
    if any("A_Star" in part for part in parts if isinstance(part, dict)):
        v.walk.stars.append(line)
    elif len(fields) == 1:
        v.walk.bare_names.add(fields[0])
    if fields and fields[-1] in _SETTING_COLUMNS:
        v.refs.append(Reference("setting", ("*",), line))


def _on_indirection(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    fields = _names(body.get("indirection"))
    at = v.lines.of_byte(_first_location(body.get("arg")))
    v.refs.extend(Reference("attribute", (name,), at) for name in fields)


def _on_relation(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    # A CTE's name is judged as a relation too: telling a CTE from a view of the same name
    # needs the scoping rules, and judging both can only refuse more.
    relation = _relation_name(body)
    v.refs.append(Reference("relation", relation, line))
    if relation[:-1] in ((), ("pg_catalog",)) and relation[-1] in _ROLE_VIEWS:
        alias = (body.get("alias") or {}).get("aliasname") or relation[-1]
        v.walk.role_views.append((str(alias), line))


def _on_tablesample(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    v.refs.append(Reference("tablesample", _names(body.get("method")), line))
    relation_body = body.get("relation") or {}
    if "relname" in relation_body:
        at = v.lines.of_byte(relation_body.get("location"))
        v.refs.append(Reference("relation", _relation_name(relation_body), at))


def _on_dml(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    relation_body = body.get("relation") or {}
    v.analysis.problems.append(
        SqlProblem(
            v.lines.of_byte(relation_body.get("location")),
            f"data-modifying {_DML[kind]} inside the query is not allowed",
        )
    )


_HANDLERS: dict[str, Handler] = {
    "FuncCall": _on_func_call,
    "A_Expr": _on_expression,
    "A_Const": _on_constant,
    "SubLink": _on_sublink,
    "JoinExpr": _on_join,
    "RangeTableFunc": _on_xmltable,
    "XmlExpr": _on_xml_expression,
    "XmlSerialize": _on_xml_serialize,
    "TypeName": _on_type_name,
    "SortBy": _on_sort_by,
    "CaseExpr": _on_case,
    "ColumnRef": _on_column,
    "A_Indirection": _on_indirection,
    "RangeVar": _on_relation,
    "RangeTableSample": _on_tablesample,
    **dict.fromkeys(_JSON_SYNTAX, _on_json_syntax),
    **dict.fromkeys(_DML, _on_dml),
}


def _after_walk(walk: _Walk, analysis: Analysis) -> None:
    if len(walk.numeric_work) > MAX_NUMERIC_WORK:
        analysis.problems.append(
            SqlProblem(
                sorted(walk.numeric_work)[MAX_NUMERIC_WORK],
                f"the query holds {len(walk.numeric_work)} multiplications, divisions, powers, "
                f"roots or logarithms, over {MAX_NUMERIC_WORK}: PostgreSQL's numeric "
                "arithmetic never checks for a cancel, so no timeout stops a long chain of "
                "it on huge numbers; split the query or precompute",
            )
        )
    # A whole row of pg_roles (`*`, `r.*`, `r`) holds rolconfig: judged as reading it.
    for alias, line in walk.role_views:
        if walk.stars or alias in walk.bare_names:
            analysis.references.append(Reference("setting", ("*",), line))


def _type_reference(type_name: dict[str, Any], lines: _Lines) -> Reference:
    return Reference(
        "cast", _names(type_name.get("names")), lines.of_byte(type_name.get("location"))
    )


def _function_facts(
    name: Name, args: list[Any], line: int, analysis: Analysis, walk: _Walk
) -> None:
    """What a call says beyond its name: the setting current_setting() reads, numeric work,
    a power's exponent."""
    builtin = name[:-1] in ((), ("pg_catalog",))
    if builtin and name[-1] in _NUMERIC_WORK_FUNCTIONS:
        walk.numeric_work.append(line)
    if builtin and name[-1] in _POWERS and len(args) == 2:
        _exponent(args[1], line, analysis)
    if builtin and name[-1] == "current_setting" and args:
        first = args[0]
        if isinstance(first, dict) and "NamedArgExpr" in first:
            named = first["NamedArgExpr"]
            first = named.get("arg") if named.get("name") == "setting_name" else None
        value = _string_value(first)
        setting = (value,) if value is not None else ()
        analysis.references.append(Reference("setting", setting, line))


def _string_value(node: Any) -> str | None:
    """The text of a string literal (through a cast, `'x'::text`), else None."""
    while isinstance(node, dict) and "TypeCast" in node:
        node = node["TypeCast"].get("arg")
    if isinstance(node, dict) and "A_Const" in node:
        sval = node["A_Const"].get("sval")
        if isinstance(sval, dict):
            return str(sval.get("sval", ""))
    return None


def _number_value(node: Any) -> decimal.Decimal | None:
    """The value of a numeric literal (through casts and a unary minus), else None."""
    sign = 1
    while isinstance(node, dict):
        if "TypeCast" in node:
            node = node["TypeCast"].get("arg")
        elif "A_Expr" in node and not node["A_Expr"].get("lexpr"):
            if _names(node["A_Expr"].get("name")) not in (("-",), ("+",)):
                return None
            if _names(node["A_Expr"].get("name")) == ("-",):
                sign = -sign
            node = node["A_Expr"].get("rexpr")
        elif "A_Const" in node:
            constant = node["A_Const"]
            text = (constant.get("ival") or {}).get("ival", 0) if "ival" in constant else None
            if "fval" in constant:
                text = constant["fval"].get("fval")
            if "sval" in constant:
                text = constant["sval"].get("sval")
            try:
                return sign * decimal.Decimal(str(text))
            except decimal.InvalidOperation:
                return None
        else:
            return None
    return None


def _exponent(node: Any, line: int, analysis: Analysis) -> None:
    value = _number_value(node)
    if value is not None and value.is_finite() and abs(value) > MAX_EXPONENT:
        _add(
            analysis,
            SqlProblem(
                line,
                f"an exponent of {value} is over {MAX_EXPONENT:,}: PostgreSQL's numeric "
                "arithmetic never checks for a cancel, and such a power makes numbers of "
                "tens of thousands of digits that no timeout stops working on",
            ),
        )


def _literal(body: dict[str, Any], lines: _Lines, analysis: Analysis) -> None:
    """Bounds on what a literal hands to an input function (MAX_STRING_CHARS, _DTD,
    MAX_NUMBER_DIGITS)."""
    where = body.get("location", -1)
    if where is None or where < 0:
        return  # made by the grammar (XMLPARSE's options), not written
    line = lines.of_byte(where)
    if "fval" in body:
        try:
            number = decimal.Decimal(str(body["fval"].get("fval")))
        except decimal.InvalidOperation:
            return
        if number.is_finite() and _digits(number) > MAX_NUMBER_DIGITS:
            _add(analysis, _too_many_digits(line))
        return
    sval = body.get("sval")
    if not isinstance(sval, dict):
        return
    text = str(sval.get("sval", ""))
    if len(text) > MAX_STRING_CHARS:
        _add(
            analysis,
            SqlProblem(
                line,
                f"a string literal of {len(text):,} characters, over {MAX_STRING_CHARS:,}: "
                "made into xml (or another type) its input function gets it whole, and "
                "libxml2's parser cannot be interrupted; move long values into a table",
            ),
        )
    elif any(marker in text for marker in _DTD):
        _add(
            analysis,
            SqlProblem(
                line,
                "a string literal holds a DTD (<!DOCTYPE or <!ENTITY): made into xml, libxml2 "
                "expands its entities without ever checking for a cancel; not allowed",
            ),
        )
    exponents = (int(m.group(1)) for m in _BIG_EXPONENT.finditer(text))
    if _LONG_DIGITS.search(text) or any(e >= MAX_NUMBER_DIGITS for e in exponents):
        _add(analysis, _too_many_digits(line))


def _digits(number: decimal.Decimal) -> int:
    """How many digits PostgreSQL's numeric needs for it: 1e1000 has 1,001, 1e-1000 1,000."""
    written = number.as_tuple()
    return max(len(written.digits), number.adjusted() + 1, -int(written.exponent))


def _add(analysis: Analysis, problem: SqlProblem) -> None:
    """A problem once per line: 800 huge powers on one line are one finding."""
    if problem not in analysis.problems:
        analysis.problems.append(problem)


def _too_many_digits(line: int) -> SqlProblem:
    return SqlProblem(
        line,
        f"a number of more than {MAX_NUMBER_DIGITS:,} digits: PostgreSQL's numeric arithmetic "
        "never checks for a cancel, so no timeout stops work on huge numbers; not allowed",
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
