"""lint's judgement of an invariant's SQL, with no database: the fence (fence.py) against
the built-in catalog, then the shapes that are valid SQL but meaningless as an invariant.

With a database, the runner judges the same text again against that database's own
catalog before every run (runner.py), so what lint could not know is decided there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from monitor.fence.allowances import OFFLINE, FencePolicy
from monitor.fence.builtin_catalog import builtin_catalog
from monitor.fence.fence import judge
from monitor.fence.sqltree import analyze
from monitor.fence.tree import Analysis, node_items
from monitor.problems import SqlProblem

_NOW_FUNCTIONS = frozenset(
    {"now", "clock_timestamp", "statement_timestamp", "transaction_timestamp"}
)
_NOW_VALUES = frozenset(
    {
        "SVFOP_CURRENT_TIMESTAMP",
        "SVFOP_CURRENT_TIMESTAMP_N",
        "SVFOP_LOCALTIMESTAMP",
        "SVFOP_LOCALTIMESTAMP_N",
    }
)


def validate_sql(sql: str, policy: FencePolicy = OFFLINE) -> list[SqlProblem]:
    """Every reason this text is not a single read-only query; empty when it is one."""
    return check_sql(sql, policy)[1]


def check_sql(sql: str, policy: FencePolicy = OFFLINE) -> tuple[Analysis, list[SqlProblem]]:
    """The parser's reading of the text and every problem with it, in line order."""
    analysis = analyze(sql)
    if analysis.statement is None:
        return analysis, analysis.problems
    judged = judge(analysis, policy.catalog or builtin_catalog(), policy.allow)
    if not policy.unknown_is_error:
        judged = [p for p in judged if p.rule != "unknown"]
    problems = [*analysis.problems, *judged, *_parameter_problems(analysis)]
    if not any(p.level == "error" for p in problems):
        problems += _shape_problems(analysis)
    return analysis, sorted(problems, key=lambda p: (p.line, p.message))


def _parameter_problems(analysis: Analysis) -> list[SqlProblem]:
    """An invariant has no parameters of its own; `$1` would name the first array of a
    source's listing (sources/binding.py), or fail at run time without one."""
    encoded = analysis.text.encode("utf-8")
    return [
        SqlProblem(
            encoded.count(b"\n", 0, int(body.get("location", 0))) + analysis.text_first_line,
            f"${body.get('number', '?')} is a parameter, and invmon passes an invariant none "
            "(a source's rows are named by its relation); write the value",
        )
        for kind, body in node_items(analysis.statement)
        if kind == "ParamRef"
    ][:1]


def _level_nodes(tree: Any) -> list[tuple[str, dict[str, Any]]]:
    """The nodes of this query level: a scalar subquery is a level of its own."""
    return list(node_items(tree, stop_at=frozenset({"SubLink"})))


def _is_aggregate(call: dict[str, Any]) -> bool:
    if any(call.get(k) for k in ("agg_star", "agg_distinct", "agg_order", "agg_filter")):
        return True
    names = [part["String"]["sval"] for part in call.get("funcname", []) if "String" in part]
    routines = builtin_catalog().functions([tuple(names)]).get(tuple(names), [])
    return any(r.kind == "a" for r in routines)


def _shape_problems(analysis: Analysis) -> list[SqlProblem]:
    statement = analysis.statement or {}
    problems: list[SqlProblem] = []
    targets = statement.get("targetList") or []
    single_row = (
        statement.get("op", "SETOP_NONE") == "SETOP_NONE"
        and not statement.get("groupClause")
        and not statement.get("havingClause")
        and targets
    )
    if single_row:
        aggregated = 0
        for target in targets:
            nodes = _level_nodes(target)
            calls = [body for kind, body in nodes if kind == "FuncCall"]
            if any(call.get("over") for call in calls):
                single_row = False
                break
            if any(_is_aggregate(call) for call in calls):
                aggregated += 1
            elif any(kind == "ColumnRef" for kind, _ in nodes):
                single_row = False  # a plain column: one row per row of the FROM clause
                break
        if single_row and aggregated:
            problems.append(
                SqlProblem(
                    analysis.text_first_line,
                    "this aggregate without GROUP BY always returns exactly one row, so the "
                    "invariant could never hold (zero rows means it holds); return the "
                    "offending rows, or add HAVING, e.g. HAVING count(*) > 0",
                )
            )
    for line in _now_comparisons(analysis):
        problems.append(
            SqlProblem(
                line,
                "compares with now() without a grace interval; on a lagging replica that can "
                "report a violation that is not there; write e.g. now() - interval '2 minutes'",
                "warning",
            )
        )
        break
    return problems


def _is_now(node: Any) -> int | None:
    """The byte location of a bare now()-like value, or None."""
    if not isinstance(node, dict) or len(node) != 1:
        return None
    (kind, body), *_ = node.items()
    if kind == "FuncCall" and not body.get("args"):
        names = [p["String"]["sval"] for p in body.get("funcname", []) if "String" in p]
        if names and names[-1] in _NOW_FUNCTIONS:
            return int(body.get("location", 0))
    if kind == "SQLValueFunction" and body.get("op") in _NOW_VALUES:
        return int(body.get("location", 0))
    return None


def _now_comparisons(analysis: Analysis) -> Iterator[int]:
    encoded = analysis.text.encode("utf-8")
    for body in analysis.orderings:
        where = _is_now(body.get("lexpr"))
        if where is None:
            where = _is_now(body.get("rexpr"))
        if where is not None:
            yield encoded.count(b"\n", 0, where) + analysis.text_first_line


def output_columns(sql: str) -> list[str] | None:
    """The names PostgreSQL gives the query's columns, or None when they cannot be known
    without a schema (a `*`, or an expression with no name of its own)."""
    return columns_of(analyze(sql).statement)


def columns_of(statement: dict[str, Any] | None) -> list[str] | None:
    while statement and statement.get("op", "SETOP_NONE") != "SETOP_NONE":
        statement = statement.get("larg")
    if not statement:
        return None
    values = statement.get("valuesLists")
    if values:
        first = values[0].get("List", {}).get("items", [])
        return [f"column{i}" for i in range(1, len(first) + 1)] or None
    names = []
    for target in statement.get("targetList") or []:
        result = target.get("ResTarget", {})
        name = result.get("name") or _figure_name(result.get("val"))
        if not name:
            return None
        names.append(str(name))
    return names or None


def _figure_name(node: Any) -> str | None:
    """PostgreSQL's FigureColname, for the cases an invariant's key can name."""
    if not isinstance(node, dict) or len(node) != 1:
        return None
    (kind, body), *_ = node.items()
    if kind == "ColumnRef":
        last = (body.get("fields") or [{}])[-1]
        return str(last["String"]["sval"]) if "String" in last else None
    if kind == "A_Indirection":
        strings = [p["String"]["sval"] for p in body.get("indirection", []) if "String" in p]
        return str(strings[-1]) if strings else _figure_name(body.get("arg"))
    if kind == "FuncCall":
        return str(body["funcname"][-1]["String"]["sval"])
    if kind == "TypeCast":
        inner = _figure_name(body.get("arg"))
        names = (body.get("typeName") or {}).get("names") or [{}]
        return inner or (str(names[-1]["String"]["sval"]) if "String" in names[-1] else None)
    simple = {"CaseExpr": "case", "CoalesceExpr": "coalesce", "A_ArrayExpr": "array"}
    return simple.get(kind)
