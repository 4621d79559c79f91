"""Bounds on what a query hands the server that no timeout can stop once it runs: digits
in a number, exponents, numeric work, long strings and DTDs in XML text. Pure, read off
the tree's literals and calls."""

from __future__ import annotations

import decimal
import re
from typing import Any

from monitor.fence.tree import Analysis, Lines, names, node_items
from monitor.problems import SqlProblem

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


DTD = ("<!DOCTYPE", "<!ENTITY")


NUMERIC_WORK_OPERATORS = frozenset({"*", "/", "%", "^", "|/", "||/"})


NUMERIC_WORK_FUNCTIONS = frozenset(
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


POWERS = frozenset({"power", "pow", "numeric_power"})


LONG_DIGITS = re.compile(r"\d{" + str(MAX_NUMBER_DIGITS + 1) + ",}")


BIG_EXPONENT = re.compile(r"\d[eE][+-]?0*(\d{" + str(len(str(MAX_NUMBER_DIGITS))) + ",})")


def string_value(node: Any) -> str | None:
    """The text of a string literal (through a cast, `'x'::text`), else None."""
    while isinstance(node, dict) and "TypeCast" in node:
        node = node["TypeCast"].get("arg")
    if isinstance(node, dict) and "A_Const" in node:
        sval = node["A_Const"].get("sval")
        if isinstance(sval, dict):
            return str(sval.get("sval", ""))
    return None


def number_value(node: Any) -> decimal.Decimal | None:
    """The value of a numeric literal (through casts and a unary minus), else None."""
    sign = 1
    while isinstance(node, dict):
        if "TypeCast" in node:
            node = node["TypeCast"].get("arg")
        elif "A_Expr" in node and not node["A_Expr"].get("lexpr"):
            if names(node["A_Expr"].get("name")) not in (("-",), ("+",)):
                return None
            if names(node["A_Expr"].get("name")) == ("-",):
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


# Array containment and overlap compare every element of one array with every element of
# the other, and PostgreSQL 15 checks for no cancel while it does: two arrays of 150,000
# elements a query built ran 31.9 s past a 1 s timeout. An array in a column is the data's
# size; one the query aggregates itself is as large as its author wants.
ARRAY_SET_OPERATORS = frozenset({"@>", "<@", "&&"})


# What makes an array of any length the query chooses (from rows, a count or a string).
ARRAY_BUILDERS = frozenset({"array_agg", "array_fill", "string_to_array", "regexp_split_to_array"})


def builds_an_array(node: Any) -> bool:
    """Whether an operand builds an array as long as the query wants: array_agg(…),
    array_fill(…), string_to_array(…), ARRAY(SELECT …), anywhere inside it (a subquery's
    included). An array a row holds is the data's size, and stays accepted."""
    for kind, body in node_items(node):
        if kind == "FuncCall" and names(body.get("funcname"))[-1:] in {
            (n,) for n in ARRAY_BUILDERS
        }:
            return True
        if kind == "SubLink" and body.get("subLinkType") == "ARRAY_SUBLINK":
            return True
    return False


def array_set_work(body: dict[str, Any], line: int, analysis: Analysis) -> None:
    if builds_an_array(body.get("lexpr")) or builds_an_array(body.get("rexpr")):
        add_problem(
            analysis,
            SqlProblem(
                line,
                "array containment or overlap (@>, <@, &&) on an array the query builds "
                "(array_agg, array_fill, ARRAY(SELECT …), …): PostgreSQL compares every "
                "element with every other and never checks for a cancel, so no timeout "
                "stops it on large arrays; join or use EXISTS instead",
            ),
        )


def exponent(node: Any, line: int, analysis: Analysis) -> None:
    value = number_value(node)
    if value is not None and value.is_finite() and abs(value) > MAX_EXPONENT:
        add_problem(
            analysis,
            SqlProblem(
                line,
                f"an exponent of {value} is over {MAX_EXPONENT:,}: PostgreSQL's numeric "
                "arithmetic never checks for a cancel, and such a power makes numbers of "
                "tens of thousands of digits that no timeout stops working on",
            ),
        )


def literal(body: dict[str, Any], lines: Lines, analysis: Analysis) -> None:
    """Bounds on what a literal hands to an input function (MAX_STRING_CHARS, DTD,
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
        if number.is_finite() and digits(number) > MAX_NUMBER_DIGITS:
            add_problem(analysis, too_many_digits(line))
        return
    sval = body.get("sval")
    if not isinstance(sval, dict):
        return
    text = str(sval.get("sval", ""))
    if len(text) > MAX_STRING_CHARS:
        add_problem(
            analysis,
            SqlProblem(
                line,
                f"a string literal of {len(text):,} characters, over {MAX_STRING_CHARS:,}: "
                "made into xml (or another type) its input function gets it whole, and "
                "libxml2's parser cannot be interrupted; move long values into a table",
            ),
        )
    elif any(marker in text for marker in DTD):
        add_problem(
            analysis,
            SqlProblem(
                line,
                "a string literal holds a DTD (<!DOCTYPE or <!ENTITY): made into xml, libxml2 "
                "expands its entities without ever checking for a cancel; not allowed",
            ),
        )
    exponents = (int(m.group(1)) for m in BIG_EXPONENT.finditer(text))
    if LONG_DIGITS.search(text) or any(e >= MAX_NUMBER_DIGITS for e in exponents):
        add_problem(analysis, too_many_digits(line))


def digits(number: decimal.Decimal) -> int:
    """How many digits PostgreSQL's numeric needs for it: 1e1000 has 1,001, 1e-1000 1,000."""
    written = number.as_tuple()
    return max(len(written.digits), number.adjusted() + 1, -int(written.exponent))


def add_problem(analysis: Analysis, problem: SqlProblem) -> None:
    """A problem once per line: 800 huge powers on one line are one finding."""
    if problem not in analysis.problems:
        analysis.problems.append(problem)


def too_many_digits(line: int) -> SqlProblem:
    return SqlProblem(
        line,
        f"a number of more than {MAX_NUMBER_DIGITS:,} digits: PostgreSQL's numeric arithmetic "
        "never checks for a cancel, so no timeout stops work on huge numbers; not allowed",
    )
