"""The one walk of the tree: each kind of node that becomes a reference or a problem has a
handler here; after it, what the walk gathered becomes problems. Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pglast import parser as pg_parser

from monitor.fence.bounds import (
    ARRAY_SET_OPERATORS,
    MAX_NUMERIC_WORK,
    NUMERIC_WORK_FUNCTIONS,
    NUMERIC_WORK_OPERATORS,
    POWERS,
    array_set_work,
    exponent,
    literal,
    string_value,
)
from monitor.fence.catalog import Name
from monitor.fence.tree import Analysis, Lines, Reference, first_location, names, relation_name
from monitor.problems import SqlProblem

JSON_SYNTAX: dict[str, str | dict[str, str]] = {
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


BETWEEN_OPERATORS: tuple[Name, ...] = ((">=",), ("<=",))


ORDERINGS = frozenset({"<", "<=", ">", ">="})


DML = {
    "InsertStmt": "INSERT",
    "UpdateStmt": "UPDATE",
    "DeleteStmt": "DELETE",
    "MergeStmt": "MERGE",
}


LOCK_WORDS = {
    "LCS_FORUPDATE": "FOR UPDATE",
    "LCS_FORNOKEYUPDATE": "FOR NO KEY UPDATE",
    "LCS_FORSHARE": "FOR SHARE",
    "LCS_FORKEYSHARE": "FOR KEY SHARE",
}


# The columns that hold settings: every role's and database's (`rolconfig`, `useconfig`,
# `setconfig`: ALTER ROLE … SET, where applications keep secrets) and every function's
# (`proconfig`: ALTER FUNCTION … SET, CREATE FUNCTION … SET, the same kind of value).
SETTING_COLUMNS = frozenset({"rolconfig", "useconfig", "setconfig", "proconfig"})


_ROLE_VIEW_COLUMNS = frozenset(
    {
        "oid", "rolname", "rolsuper", "rolinherit", "rolcreaterole", "rolcreatedb",
        "rolcanlogin", "rolreplication", "rolconnlimit", "rolpassword", "rolvaliduntil",
        "rolbypassrls", "usename", "usesysid", "usecreatedb", "usesuper", "userepl",
        "usebypassrls", "passwd", "valuntil",
    }
)  # fmt: skip

_PG_PROC_COLUMNS = frozenset(
    {
        "oid", "proname", "pronamespace", "proowner", "prolang", "procost", "prorows",
        "provariadic", "prosupport", "prokind", "prosecdef", "proleakproof", "proisstrict",
        "proretset", "provolatile", "proparallel", "pronargs", "pronargdefaults",
        "prorettype", "proargtypes", "proallargtypes", "proargmodes", "proargnames",
        "proargdefaults", "protrftypes", "prosrc", "probin", "prosqlbody", "proacl",
    }
)  # fmt: skip

# The catalog relations whose rows hold one of those columns, each with its other columns:
# read whole (`*`, `r.*`, `r`, or `r.name` with a name not among them, which is a call on
# the whole row: `r.to_jsonb` is to_jsonb(r)), a row holds its settings too.
SETTINGS_ROWS: dict[str, frozenset[str]] = {
    "pg_roles": _ROLE_VIEW_COLUMNS,
    "pg_user": _ROLE_VIEW_COLUMNS,
    "pg_shadow": _ROLE_VIEW_COLUMNS,
    "pg_proc": _PG_PROC_COLUMNS,
}


def routine_name(items: list[Any] | None) -> Name:
    """The name of a function, operator, type or tablesample method as PostgreSQL resolves
    it: `db.schema.name` is accepted only when db is the current database (else "cross-
    database references are not implemented"), so it names what `schema.name` names, and
    every rule keyed on `pg_catalog.x` must see it so (`mydb.pg_catalog.current_setting`)."""
    name = names(items)
    return name[1:] if len(name) == 3 else name


def char_to_byte(sql: str, offset: int) -> int:
    return len(sql[:offset].encode("utf-8"))


def lock_tokens(sql: str) -> list[Any]:
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
        # (alias or name, the relation's columns that hold no setting, line)
        self.settings_rows: list[tuple[str, frozenset[str], int]] = []
        # A join named as a whole (`(a JOIN b) AS j`): `j`, `to_jsonb(j)`, `j.x` can stand
        # for its rows, and `j(x, y, …)` renames its columns.
        self.join_aliased = False
        self.qualified: list[tuple[str, str, int]] = []  # `t.name`: (t, name, line)


@dataclass
class _Visit:
    """What a node handler adds to: the analysis, the walk's extras, the text's lines."""

    analysis: Analysis
    lines: Lines
    walk: _Walk

    @property
    def refs(self) -> list[Reference]:
        return self.analysis.references


def collect(tree: Any, analysis: Analysis, lines: Lines) -> None:
    visit = _Visit(analysis, lines, _Walk())
    tokens: list[Any] | None = None  # scanned only when a locking clause is found
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
            if tokens is None:
                tokens = lock_tokens(lines.sql)
            select_clauses(item, analysis, lines, tokens)
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


Handler = Callable[[str, dict[str, Any], int, _Visit], None]


def _on_func_call(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    name = routine_name(body["funcname"])
    v.refs.append(Reference("function", name, line))
    _function_facts(name, body.get("args") or [], line, v.analysis, v.walk)


def _on_expression(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    expr_kind = body.get("kind", "AEXPR_OP")
    if expr_kind.startswith(("AEXPR_BETWEEN", "AEXPR_NOT_BETWEEN")):
        v.refs.extend(Reference("operator", op, line) for op in BETWEEN_OPERATORS)
        return
    operator = routine_name(body.get("name"))
    v.refs.append(Reference("operator", operator, line))
    if expr_kind == "AEXPR_OP" and operator and operator[-1] in ORDERINGS:
        v.analysis.orderings.append(body)
    if operator and operator[-1] in NUMERIC_WORK_OPERATORS:
        v.walk.numeric_work.append(line)
    if operator and operator[-1] == "^":
        exponent(body.get("rexpr"), line, v.analysis)
    if operator and operator[-1] in ARRAY_SET_OPERATORS:
        array_set_work(body, line, v.analysis)


def _on_constant(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    literal(body, v.lines, v.analysis)


def _on_sublink(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    if body.get("operName"):
        v.refs.append(Reference("operator", routine_name(body["operName"]), line))
    elif body.get("subLinkType") in ("ANY_SUBLINK", "ALL_SUBLINK"):
        # `x IN (SELECT …)` names no operator: PostgreSQL looks `=` up by name.
        v.refs.append(Reference("operator", ("=",), line))


def _on_join(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    if body.get("alias"):
        v.walk.join_aliased = True
    if body.get("usingClause") or body.get("isNatural"):
        # JOIN … USING and NATURAL JOIN compare with `=`, looked up by name too.
        v.refs.append(Reference("operator", ("=",), v.lines.of_byte(first_location(body))))


def _on_json_syntax(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    # SQL/JSON syntax in the PostgreSQL 18 grammar; an older server reads the same words as
    # calls of whatever function has that name: both readings are judged.
    name_of = JSON_SYNTAX[kind]
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
        v.refs.append(Reference("operator", routine_name(body["useOp"]), line))


def _on_case(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    if body.get("arg"):
        v.refs.append(Reference("operator", ("=",), line))


def _on_column(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    # `t.fn` is also a call of fn(t) when fn takes one composite argument.
    parts = body.get("fields") or []
    fields = names(parts)
    v.refs.extend(Reference("attribute", (name,), line) for name in fields[1:])
    for name in fields[1:]:
        # `t.fn` calls fn(t): the value of a column, never a literal.
        _function_facts((name,), [None], line, v.analysis, v.walk)
    if any("A_Star" in part for part in parts if isinstance(part, dict)):
        v.walk.stars.append(line)
    elif len(fields) == 1:
        v.walk.bare_names.add(fields[0])
    else:
        v.walk.qualified.append((fields[-2], fields[-1], line))
    if fields and fields[-1] in SETTING_COLUMNS:
        v.refs.append(Reference("setting", ("*",), line))


def _on_indirection(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    fields = names(body.get("indirection"))
    at = v.lines.of_byte(first_location(body.get("arg")))
    v.refs.extend(Reference("attribute", (name,), at) for name in fields)
    # `(x).fn` calls fn(x), and `(x).f.g` calls g(f(x)): the rules on calls (which setting
    # current_setting reads, numeric work) hold for these too.
    for i, name in enumerate(fields):
        _function_facts((name,), [body.get("arg") if i == 0 else None], at, v.analysis, v.walk)


def _on_relation(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    # A CTE's name is judged as a relation too: telling a CTE from a view of the same name
    # needs the scoping rules, and judging both can only refuse more.
    relation = relation_name(body)
    v.refs.append(Reference("relation", relation, line))
    if relation[:-1] in ((), ("pg_catalog",)) and relation[-1] in SETTINGS_ROWS:
        alias = body.get("alias") or {}
        name = str(alias.get("aliasname") or relation[-1])
        v.walk.settings_rows.append((name, SETTINGS_ROWS[relation[-1]], line))
        if alias.get("colnames"):
            # `pg_roles AS r(a, b, …)` renames rolconfig: whichever name reads it, it is read.
            v.refs.append(Reference("setting", ("*",), line))


def _on_tablesample(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    v.refs.append(Reference("tablesample", routine_name(body.get("method")), line))
    relation_body = body.get("relation") or {}
    if "relname" in relation_body:
        at = v.lines.of_byte(relation_body.get("location"))
        v.refs.append(Reference("relation", relation_name(relation_body), at))


def _on_dml(kind: str, body: dict[str, Any], line: int, v: _Visit) -> None:
    relation_body = body.get("relation") or {}
    v.analysis.problems.append(
        SqlProblem(
            v.lines.of_byte(relation_body.get("location")),
            f"data-modifying {DML[kind]} inside the query is not allowed",
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
    **dict.fromkeys(JSON_SYNTAX, _on_json_syntax),
    **dict.fromkeys(DML, _on_dml),
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
    # A whole row of pg_roles or pg_proc (`*`, `r.*`, `r`, `r.to_jsonb`, which is
    # to_jsonb(r)) holds its settings: judged as reading them; and so is a named join of it
    # (its rows stand for the relation's too, and its alias list can rename the column).
    for alias, columns, line in walk.settings_rows:
        whole_row = any(t == alias and name not in columns for t, name, _ in walk.qualified)
        if walk.stars or alias in walk.bare_names or whole_row or walk.join_aliased:
            analysis.references.append(Reference("setting", ("*",), line))


def _type_reference(type_name: dict[str, Any], lines: Lines) -> Reference:
    return Reference(
        "cast", routine_name(type_name.get("names")), lines.of_byte(type_name.get("location"))
    )


def _function_facts(
    name: Name, args: list[Any], line: int, analysis: Analysis, walk: _Walk
) -> None:
    """What a call says beyond its name: the setting current_setting() reads, numeric work,
    a power's exponent."""
    builtin = name[:-1] in ((), ("pg_catalog",))
    if builtin and name[-1] in NUMERIC_WORK_FUNCTIONS:
        walk.numeric_work.append(line)
    if builtin and name[-1] in POWERS and len(args) == 2:
        exponent(args[1], line, analysis)
    if builtin and name[-1] == "current_setting" and args:
        first = args[0]
        if isinstance(first, dict) and "NamedArgExpr" in first:
            named = first["NamedArgExpr"]
            first = named.get("arg") if named.get("name") == "setting_name" else None
        value = string_value(first)
        setting = (value,) if value is not None else ()
        analysis.references.append(Reference("setting", setting, line))


def select_clauses(
    select: dict[str, Any], analysis: Analysis, lines: Lines, tokens: list[Any]
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
        words = LOCK_WORDS.get(strength, "FOR UPDATE/SHARE")
        where = tokens.pop(0).start if tokens else None
        analysis.problems.append(
            SqlProblem(lines.of_char(where), f"{words} takes row locks on the replica; not allowed")
        )
