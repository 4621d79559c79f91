"""PostgreSQL's own reading of an invariant's SQL: one statement or not, which kind, and
everything it asks the server to run or read (functions, operators, types, attribute
calls, relations, XML parsing, settings), each at its line; and the bounds on what the text
itself can hand the server (a NUL byte, long or DTD-holding literals, huge numbers and
exponents, how much numeric work). Pure; fence.py judges the references.

The parser is libpg_query (through pglast): names come out decoded exactly as the server
decodes them, whatever the quoting, `U&` escapes, dollar quotes or comments around them.
"""

from __future__ import annotations

import json
from typing import Any

from pglast import parser as pg_parser

from monitor.fence.catalog import Name
from monitor.fence.tree import Analysis, Lines, node_items
from monitor.fence.walk import DML, char_to_byte, collect
from monitor.problems import SqlProblem


def quote_identifier(name: str) -> str:
    """A name PostgreSQL reads back exactly as given (case, spaces and quotes kept)."""
    return '"' + name.replace('"', '""') + '"'


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


class TreeTooDeep(Exception):
    def __init__(self) -> None:
        super().__init__(
            "the query nests too deeply to judge (its parse tree is deeper than Python's "
            "reader goes: about 100 nested subqueries, or a thousand UNION arms); flatten "
            "it with a CTE or move the values into a table"
        )


def parse(sql: str) -> dict[str, Any]:
    """libpg_query's tree of `sql`; raises pglast's ParseError, TreeTooLarge or
    TreeTooDeep."""
    text = pg_parser.parse_sql_json(sql)
    if len(text) > MAX_TREE_BYTES:
        raise TreeTooLarge(len(text))
    try:
        # The decoder recurses once per level of nesting; past the interpreter's recursion
        # limit it raises, and that is the bound (everything after it walks iteratively).
        return dict(json.loads(text))
    except RecursionError:
        raise TreeTooDeep() from None


def analyze(sql: str) -> Analysis:
    """Read the text as PostgreSQL would: one SELECT, and what it calls."""
    lines = Lines(sql)
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
    except (TreeTooLarge, TreeTooDeep) as exc:
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
        word = next((t for t in tokens if char_to_byte(sql, t.start) >= start), None)
        keyword = sql[word.start : word.end + 1].upper() if word else kind
        keyword = DML.get(kind, keyword)  # WITH ... INSERT is an INSERT
        analysis.problems.append(
            SqlProblem(
                lines.of_byte(start),
                f"{keyword} statement is not allowed; an invariant must be one read-only "
                "query (SELECT, WITH ... SELECT, VALUES)",
            )
        )
        return analysis
    analysis.statement = body
    collect(raw["stmt"], analysis, lines)
    return analysis


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
