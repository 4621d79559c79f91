"""The functions, aggregates and operators a schema file defines, for `invmon lint --schema`.

A `pg_dump --schema-only` file declares every function's volatility (`STABLE`,
`IMMUTABLE`; VOLATILE when it says nothing, as PostgreSQL does), so lint can judge an
invariant that calls the application's own functions without a database. What the file
does not define (an extension's functions, say) stays unknown offline and is judged by the
database's own catalog when the invariant runs. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pglast import parser as pg_parser

from monitor.fence.catalog import Catalog, Name, Routine, worst

_VOLATILITY = {"immutable": "i", "stable": "s", "volatile": "v"}
_DEFINED = ("OBJECT_AGGREGATE", "OBJECT_OPERATOR")
# The functions an aggregate or an operator runs (CREATE AGGREGATE / CREATE OPERATOR).
_SUPPORT = frozenset(
    {
        "sfunc",
        "finalfunc",
        "combinefunc",
        "msfunc",
        "minvfunc",
        "mfinalfunc",
        "function",
        "procedure",
    }
)
_INPUT_MODES = {"FUNC_PARAM_DEFAULT", "FUNC_PARAM_IN", "FUNC_PARAM_INOUT", "FUNC_PARAM_VARIADIC"}


def _strings(items: list[Any] | None) -> Name:
    return tuple(str(i["String"]["sval"]) for i in items or [] if "String" in i)


def _statements(text: str) -> Iterable[dict[str, Any]]:
    """Each statement of a schema file that parses; psql's backslash commands (pg_dump
    writes `\\restrict`, `\\connect`) and whatever does not parse are skipped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("\\")]
    try:
        pieces = pg_parser.split("\n".join(lines), with_parser=False)
    except pg_parser.ParseError:
        return
    for piece in pieces:
        try:
            tree = json.loads(pg_parser.parse_sql_json(piece))
        except pg_parser.ParseError:
            continue
        for raw in tree.get("stmts") or []:
            yield raw["stmt"]


class SchemaCatalog:
    """The built-in catalog plus what a schema file defines."""

    def __init__(self, builtin: Catalog, schema_sql: str) -> None:
        self._builtin = builtin
        self._functions: dict[str, list[Routine]] = {}
        self._operators: dict[str, list[Routine]] = {}
        pending: list[tuple[str, dict[str, Any]]] = []
        for statement in _statements(schema_sql):
            (kind, body), *_ = statement.items()
            if kind == "CreateFunctionStmt":
                self._add_function(body)
            elif kind == "DefineStmt" and body.get("kind") in (
                "OBJECT_AGGREGATE",
                "OBJECT_OPERATOR",
            ):
                pending.append((body["kind"], body))
        # Aggregates and operators name functions that may be defined further down.
        for kind, body in pending:
            self._add_defined(kind, body)

    @property
    def source(self) -> str:
        return f"{self._builtin.source} or the schema file"

    def _add_function(self, body: dict[str, Any]) -> None:
        name = _strings(body.get("funcname"))
        options = {
            o["DefElem"]["defname"]: o["DefElem"].get("arg", {}).get("String", {}).get("sval")
            for o in body.get("options") or []
        }
        params = [p["FunctionParameter"] for p in body.get("parameters") or []]
        inputs = [p for p in params if p.get("mode", "FUNC_PARAM_DEFAULT") in _INPUT_MODES]
        required = [p for p in inputs if "defexpr" not in p]
        routine = Routine(
            schema=name[0] if len(name) > 1 else "public",
            name=name[-1],
            signature=".".join(name) + "(...)",
            kind="p" if body.get("is_procedure") else "f",
            volatility=_VOLATILITY.get(str(options.get("volatility")), "v"),
            parallel_unsafe=options.get("parallel") not in ("safe", "restricted"),
            one_arg=len(required) <= 1 <= len(inputs),
            builtin=False,  # judged as the database will judge it: user code
        )
        self._functions.setdefault(name[-1], []).append(routine)

    def _add_defined(self, kind: str, body: dict[str, Any]) -> None:
        name = _strings(body.get("defnames"))
        support: list[Name] = []
        for element in body.get("definition") or []:
            item = element["DefElem"]
            if item["defname"] in _SUPPORT:
                support.append(_strings(item.get("arg", {}).get("TypeName", {}).get("names")))
        found = self.functions(support)
        # A support function nobody defined is judged the worst: VOLATILE.
        volatility = worst(r.volatility for n in support for r in found.get(n, [_unknown(n)]))
        schema = name[0] if len(name) > 1 else "public"
        routine = Routine(
            schema,
            name[-1],
            ".".join(name),
            "a" if kind == "OBJECT_AGGREGATE" else "f",
            volatility,
            False,
            False,
            builtin=False,
        )
        table = self._functions if kind == "OBJECT_AGGREGATE" else self._operators
        table.setdefault(name[-1], []).append(routine)

    def _defined(self, table: dict[str, list[Routine]], name: Name) -> list[Routine]:
        candidates = table.get(name[-1], [])
        if len(name) > 1:
            candidates = [r for r in candidates if r.schema == name[-2]]
        return candidates

    def _with_defined(
        self, found: dict[Name, list[Routine]], table: dict[str, list[Routine]], wanted: list[Name]
    ) -> dict[Name, list[Routine]]:
        """The built-in answer, with what the schema file defines under each name added."""
        for name in wanted:
            defined = self._defined(table, name)
            if defined:
                found[name] = [*found.get(name, []), *defined]
        return found

    def functions(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        wanted = list(names)
        return self._with_defined(self._builtin.functions(wanted), self._functions, wanted)

    def operators(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        wanted = list(names)
        return self._with_defined(self._builtin.operators(wanted), self._operators, wanted)

    def casts(self, types: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._builtin.casts(types)

    def view_definitions(self, relations: Iterable[Name]) -> dict[Name, str]:
        return {}

    def row_types(self, relations: Iterable[Name]) -> dict[Name, list[Routine]]:
        return {}

    def implicit_casts(self, types: Iterable[Name]) -> dict[Name, list[str]]:
        return {}

    def system_view_calls(self, relations: Iterable[Name]) -> dict[Name, list[str]]:
        return self._builtin.system_view_calls(relations)


def _unknown(name: Name) -> Routine:
    return Routine("", ".".join(name), ".".join(name), "f", "v", False, False, builtin=False)
