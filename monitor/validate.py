"""Checks that an invariant's SQL is one read-only query, using sqlglot's Postgres parser.

The monitored database is a replica that must never be written to, locked, slowed on
purpose or used to reach other systems; the run itself is also wrapped in a READ ONLY
transaction, so this check is the first of two fences and the one that explains itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

_QUERY_TYPES = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Values, exp.Subquery)
_WRITES = (exp.Insert, exp.Update, exp.Delete, exp.Merge)

# Functions with side effects outside the query: they change settings or sequences, signal
# other backends, take locks, touch the server's files or other servers, or just sleep.
_FORBIDDEN_FUNCTIONS = {
    "pg_terminate_backend": "terminates another session",
    "pg_cancel_backend": "cancels another session's query",
    "pg_reload_conf": "reloads the server configuration",
    "pg_rotate_logfile": "rotates the server log",
    "pg_switch_wal": "forces a WAL switch",
    "pg_create_restore_point": "writes a restore point",
    "pg_promote": "promotes a standby",
    "pg_wal_replay_pause": "pauses replication",
    "pg_wal_replay_resume": "resumes replication",
    "pg_notify": "sends notifications",
    "set_config": "changes a server setting",
    "nextval": "advances a sequence",
    "setval": "changes a sequence",
    "pg_sleep": "sleeps on the server",
    "pg_sleep_for": "sleeps on the server",
    "pg_sleep_until": "sleeps on the server",
    "pg_read_file": "reads the server's files",
    "pg_read_binary_file": "reads the server's files",
    "pg_ls_dir": "lists the server's directories",
    "pg_stat_file": "reads the server's files",
    "txid_current": "assigns a transaction id",
    "pg_current_xact_id": "assigns a transaction id",
    "pg_current_logfile": "reads the server's files",
    "pg_import_system_collations": "changes the catalog",
    "ts_stat": "runs the SQL text it is given",
    "ts_rewrite": "runs the SQL text it is given",
}
_FORBIDDEN_PREFIXES = {
    "pg_advisory_": "takes an advisory lock",
    "pg_try_advisory_": "takes an advisory lock",
    "dblink": "reaches another server",
    "lo_": "touches large objects",
    "pg_ls_": "lists the server's directories",
    "pg_file_": "writes the server's files",
    "pg_stat_reset": "resets statistics",
    "pg_create_": "creates a replication slot or restore point",
    "pg_drop_": "drops a replication slot",
    "pg_copy_": "copies a replication slot",
    "pg_replication_": "moves a replication slot",
    "pg_logical_": "writes to the WAL or a replication slot",
    "pg_backup_": "starts or stops a backup",
    "pg_start_backup": "starts a backup",
    "pg_stop_backup": "stops a backup",
    "pg_log_backend": "writes to the server log",
    # These run the SQL text they are given, which lint cannot see.
    "query_to_xml": "runs the SQL text it is given",
    "cursor_to_xml": "reads a cursor",
    "table_to_xml": "reads whole tables outside the query",
    "schema_to_xml": "reads whole schemas outside the query",
    "database_to_xml": "reads the whole database outside the query",
}

# U&"..." spells an identifier with escapes (U&"\0070g_sleep" is pg_sleep): no name check
# can see through it, and no invariant needs it.
_UNICODE_IDENTIFIER = re.compile(r"\bu&[\"']", re.I)
_LOCK_TEXT = re.compile(r"\bfor\s+(no\s+key\s+update|key\s+share|update|share)\b", re.I)


@dataclass(frozen=True)
class SqlProblem:
    line: int  # 1-based, relative to the SQL text given
    message: str
    level: str = "error"  # a "warning" does not stop the invariant from running


def function_name(node: exp.Func) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return str(node.sql_name()).lower()


def _forbidden_reason(name: str) -> str | None:
    if name in _FORBIDDEN_FUNCTIONS:
        return _FORBIDDEN_FUNCTIONS[name]
    for prefix, reason in _FORBIDDEN_PREFIXES.items():
        if name.startswith(prefix):
            return reason
    return None


def _line_of(sql: str, pattern: str | re.Pattern[str], default: int) -> int:
    """Where a construct is, found in the text with comments blanked out."""
    code = re.sub(r"--[^\n]*", lambda m: " " * len(m.group(0)), sql)
    regex = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, re.I)
    match = regex.search(code)
    return code.count("\n", 0, match.start()) + 1 if match else default


def _first_code_line(sql: str) -> int:
    for number, line in enumerate(sql.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("--"):
            return number
    return 1


def parse_statements(sql: str) -> list[exp.Expr]:
    # A trailing "; -- comment" parses as a separate Semicolon node; it is not a statement.
    return [
        s
        for s in sqlglot.parse(sql, read="postgres")
        if s is not None and not isinstance(s, exp.Semicolon)
    ]


def _code_only(sql: str) -> str:
    """The text with comments and string literals blanked, lines kept."""
    pattern = re.compile(r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'", re.S)
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), sql)


def output_columns(sql: str) -> list[str] | None:
    """The names PostgreSQL gives the query's columns, or None when they cannot be known
    without a schema (a `*`, or an expression with no name of its own)."""
    try:
        [statement] = parse_statements(sql)
    except (ParseError, TokenError, ValueError):
        return None
    names = []
    for column in getattr(statement, "selects", []):
        if isinstance(column, exp.Star) or column.find(exp.Star):
            return None
        identifier = column.args.get("alias") if isinstance(column, exp.Alias) else column
        if isinstance(identifier, exp.Column):
            identifier = identifier.this
        if not isinstance(identifier, exp.Identifier) or not identifier.name:
            return None
        names.append(identifier.name if identifier.quoted else identifier.name.lower())
    return names or None


def validate_sql(sql: str) -> list[SqlProblem]:
    """Every reason this text is not a single read-only query; empty when it is one."""
    start = _first_code_line(sql)
    if not sql.strip() or all(
        not line.strip() or line.strip().startswith("--") for line in sql.splitlines()
    ):
        return [SqlProblem(start, "the file has no query; write a SELECT of the offending rows")]
    try:
        statements = parse_statements(sql)
    except (ParseError, TokenError) as exc:
        return [_parse_problem(exc, start)]
    if len(statements) != 1:
        return [
            SqlProblem(
                start,
                f"expected exactly one statement, found {len(statements)}; "
                "an invariant is one query returning the offending rows",
            )
        ]
    problems = _check_statement(statements[0], sql, start)
    if not problems:
        problems = _check_shape(statements[0], sql, start)
    escaped = _UNICODE_IDENTIFIER.search(_code_only(sql))
    if escaped:
        line = sql.count("\n", 0, escaped.start()) + 1
        problems.append(
            SqlProblem(line, 'U&"..." escaped identifiers are not allowed; write the name plainly')
        )
    return sorted(problems, key=lambda p: p.line)


def _parse_problem(exc: ParseError | TokenError, default_line: int) -> SqlProblem:
    line = default_line
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, ParseError) and exc.errors:
        first = exc.errors[0]
        line = int(first.get("line") or default_line)
        detail = str(first.get("description") or detail)
    return SqlProblem(line, f"cannot parse the query: {detail}")


_NOW = re.compile(
    r"\b(now\s*\(\s*\)|current_timestamp|clock_timestamp\s*\(\s*\)|"
    r"statement_timestamp\s*\(\s*\)|localtimestamp)",
    re.I,
)


def _is_now(node: exp.Expr) -> bool:
    if isinstance(node, exp.CurrentTimestamp):
        return True
    return isinstance(node, exp.Anonymous | exp.Func) and function_name(node) in (
        "now",
        "clock_timestamp",
        "statement_timestamp",
        "current_timestamp",
        "localtimestamp",
    )


def _check_shape(statement: exp.Expr, sql: str, start: int) -> list[SqlProblem]:
    """Queries that are valid SQL but meaningless as an invariant."""
    problems = []
    if (
        isinstance(statement, exp.Select)
        and not statement.args.get("group")
        and not statement.args.get("having")
        and statement.selects
        and all(s.find(exp.AggFunc) and not s.find(exp.Window) for s in statement.selects)
    ):
        problems.append(
            SqlProblem(
                start,
                "this aggregate without GROUP BY always returns exactly one row, so the "
                "invariant could never hold (zero rows means it holds); return the offending "
                "rows, or add HAVING, e.g. HAVING count(*) > 0",
            )
        )
    for comparison in statement.find_all(exp.LT, exp.LTE, exp.GT, exp.GTE):
        if _is_now(comparison.left) or _is_now(comparison.right):
            line = _line_of(sql, _NOW, start)
            problems.append(
                SqlProblem(
                    line,
                    "compares with now() without a grace interval; on a lagging replica that "
                    "can report a violation that is not there; write e.g. "
                    "now() - interval '2 minutes'",
                    "warning",
                )
            )
            break
    return problems


def _check_statement(statement: exp.Expr, sql: str, start: int) -> list[SqlProblem]:
    problems: list[SqlProblem] = []
    if not isinstance(statement, _QUERY_TYPES):
        code = sql.splitlines()[start - 1].split()
        keyword = code[0].upper().strip("(;") if code else statement.key.upper()
        return [
            SqlProblem(
                start,
                f"{keyword} statement is not allowed; an invariant must be one read-only "
                "query (SELECT, WITH ... SELECT, VALUES)",
            )
        ]
    for write in statement.find_all(*_WRITES):
        keyword = write.key.upper()
        line = _line_of(sql, rf"\b{keyword}\b", start)
        problems.append(
            SqlProblem(line, f"data-modifying {keyword} inside the query is not allowed")
        )
    for select in statement.find_all(exp.Select):
        if select.args.get("into"):
            line = _line_of(sql, r"\binto\b", start)
            problems.append(SqlProblem(line, "SELECT ... INTO creates a table; not allowed"))
        if select.args.get("locks"):
            line = _line_of(sql, _LOCK_TEXT, start)
            match = _LOCK_TEXT.search(sql)
            clause = " ".join(match.group(0).upper().split()) if match else "FOR UPDATE/SHARE"
            problems.append(
                SqlProblem(line, f"{clause} takes row locks on the replica; not allowed")
            )
    seen: set[str] = set()
    for func in statement.find_all(exp.Func):
        name = function_name(func)
        reason = _forbidden_reason(name)
        if reason and name not in seen:
            seen.add(name)
            line = _line_of(sql, rf"\b{re.escape(name)}\s*\(", start)
            problems.append(SqlProblem(line, f"function {name}() {reason}; not allowed"))
    return sorted(problems, key=lambda p: p.line)
