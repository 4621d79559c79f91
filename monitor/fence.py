"""The read-only fence: is this SQL one query that cannot change anything?

Invariant files come from pull requests and run against production replicas, so "read-only"
must be something the code can show, not a list of names it hopes is complete. Three
judges, all PostgreSQL's own:

1. **Its parser.** The text is parsed by libpg_query (through pglast), the parser of the
   server itself, so names are decoded exactly as the server will decode them: `U&"\\0070g_…"`,
   quoted and schema-qualified names, dollar quotes, comments and `E''` strings cannot hide
   a call. Statement kinds, data-modifying CTEs, `SELECT INTO` and locking clauses are read
   off that tree.
2. **Its catalog.** Every function the query names (and every operator, explicit cast and
   `row.fn` attribute call it makes) must be one the catalog declares IMMUTABLE or STABLE,
   and not PARALLEL UNSAFE (STABLE functions that assign state, such as a transaction id).
   A short, documented list of harmless VOLATILE functions is allowed (`HARMLESS_VOLATILE`);
   anything unknown is refused. With a database, its own catalog judges (user-defined and
   extension functions by what they declare, views by what they run); without one, a table
   generated from the built-in catalogs (pgcatalog.py).
3. At run time the query runs in a READ ONLY transaction, under a role without EXECUTE on
   effectful functions (deploy/readonly-role.sql): what a function lies about is stopped there.

This module is pure: `analyze` reads the text, `judge` asks a `Catalog`.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.pgcatalog import SYSTEM_SCHEMAS, VOLATILITY_WORDS, Catalog, Name, Routine
from monitor.problems import SqlProblem
from monitor.sqltree import Analysis, Reference, RefKind, analyze

# VOLATILE only because their answer changes between calls; none of them writes, signals,
# locks or reaches outside the server. Monitoring queries use them. Judged in pg_catalog
# only: a user function of the same name elsewhere is judged on its own.
HARMLESS_VOLATILE = frozenset(
    {
        "clock_timestamp",
        "timeofday",
        "random",
        "random_normal",
        "gen_random_uuid",
        "uuidv4",
        "uuidv7",
        "pg_relation_size",
        "pg_table_size",
        "pg_indexes_size",
        "pg_total_relation_size",
        "pg_database_size",
        "pg_tablespace_size",
        "pg_is_in_recovery",
        "pg_last_wal_receive_lsn",
        "pg_last_wal_replay_lsn",
        "pg_last_xact_replay_timestamp",
        "pg_current_wal_lsn",
        "pg_current_wal_insert_lsn",
        "pg_current_wal_flush_lsn",
        "pg_is_wal_replay_paused",
        "pg_get_wal_replay_pause_state",
        "pg_blocking_pids",
        "pg_safe_snapshot_blocking_pids",
        "pg_lock_status",
        "pg_xact_commit_timestamp",
        "pg_last_committed_xact",
        "pg_xact_status",
        "txid_status",
        "pg_partition_tree",
        "pg_partition_ancestors",
        "pg_jit_available",
        "pg_notification_queue_usage",
        "pg_sequence_last_value",
        "pg_prepared_xact",
        "pg_show_replication_origin_status",
        "pg_stat_get_recovery_prefetch",
        "pg_stat_get_xact_numscans",
        "pg_stat_get_xact_tuples_returned",
        "pg_stat_get_xact_tuples_fetched",
        "pg_stat_get_xact_tuples_inserted",
        "pg_stat_get_xact_tuples_updated",
        "pg_stat_get_xact_tuples_deleted",
        "pg_stat_get_xact_tuples_hot_updated",
        "pg_stat_get_xact_tuples_newpage_updated",
        "pg_stat_get_io",
        "pg_stat_get_xact_blocks_fetched",
        "pg_stat_get_xact_blocks_hit",
        "pg_stat_get_xact_function_calls",
        "pg_stat_get_xact_function_total_time",
        "pg_stat_get_xact_function_self_time",
        "pg_get_backend_memory_contexts",
        "pg_get_shmem_allocations",
        "array_shuffle",
        "array_sample",
    }
)
# The same, installed by an extension: (extension, function). Reading pg_stat_statements is
# how one finds slow queries.
HARMLESS_EXTENSION_FUNCTIONS = frozenset(
    {
        ("pg_stat_statements", "pg_stat_statements"),
        ("pg_stat_statements", "pg_stat_statements_info"),
    }
)
# PARALLEL UNSAFE but STABLE, and assigning nothing: they only read the session's state.
STATE_FREE_PARALLEL_UNSAFE = frozenset(
    {
        "current_schema",
        "current_schemas",
        "txid_current_if_assigned",
        "pg_current_xact_id_if_assigned",
    }
)
BUILTIN_TABLESAMPLE = frozenset({"bernoulli", "system", "system_rows", "system_time"})
MAX_VIEW_DEPTH = 8  # views over views; PostgreSQL itself has no limit, a fence needs one

# Functions whose work PostgreSQL cannot interrupt: XPath runs inside libxml2, which never
# checks for a cancel, so neither a statement timeout nor pg_terminate_backend stops a
# crafted expression (one ran 24 s past a 1 s timeout, and grows as N^4). Refused unless
# trusted by name in fence.allow_functions.
UNINTERRUPTIBLE = frozenset({"xpath", "xpath_exists", "xmlexists", "xmltable"})
# Functions that run SQL handed to them as text (or read a relation named in a string), which
# the fence never sees: a view or a SECURITY DEFINER function behind them would run unjudged.
RUNS_SQL_TEXT = frozenset(
    {
        "query_to_xml",
        "query_to_xmlschema",
        "query_to_xml_and_xmlschema",
        "cursor_to_xml",
        "cursor_to_xmlschema",
        "table_to_xml",
        "table_to_xmlschema",
        "table_to_xml_and_xmlschema",
        "schema_to_xml",
        "schema_to_xmlschema",
        "schema_to_xml_and_xmlschema",
        "database_to_xml",
        "database_to_xmlschema",
        "database_to_xml_and_xmlschema",
        "ts_stat",
        "ts_rewrite",
        "crosstab",
        "crosstab2",
        "crosstab3",
        "crosstab4",
        "connectby",
    }
)


@dataclass(frozen=True)
class Allowances:
    """Names an operator chose to trust (config `fence.allow_functions` / `allow_operators`):
    an entry `fn` trusts that name in any schema, `schema.fn` only there."""

    functions: frozenset[str] = frozenset()
    operators: frozenset[str] = frozenset()

    @staticmethod
    def _trusted(entries: frozenset[str], routine: Routine) -> bool:
        return routine.name.lower() in entries or (
            f"{routine.schema}.{routine.name}".lower() in entries
        )

    def function(self, routine: Routine) -> bool:
        return self._trusted(self.functions, routine)

    def named(self, name: Name) -> bool:
        """A function name, as written, that is trusted."""
        return ".".join(name).lower() in self.functions or name[-1].lower() in self.functions

    def operator(self, name: Name) -> bool:
        return ".".join(name).lower() in self.operators or name[-1] in self.operators


TRUST_NOTHING = Allowances()


@dataclass(frozen=True)
class FencePolicy:
    """How lint judges a query with no database at hand."""

    allow: Allowances = TRUST_NOTHING
    # What the offline judge looks names up in; None is the built-in table (pgcatalog.py).
    catalog: Catalog | None = None
    # False for commands that run against a database: a name the offline table does not
    # know is left to that database's own catalog, which judges it before every run.
    unknown_is_error: bool = True


OFFLINE = FencePolicy()


def _display(name: Name) -> str:
    return ".".join(name)


def _routine_problem(routine: Routine, allow: Allowances) -> tuple[str, str] | None:
    """(level, what is wrong with it) when this candidate may not run; None when harmless."""
    if routine.kind == "p":
        return "error", "is a procedure"
    if routine.security_definer and routine.schema not in SYSTEM_SCHEMAS:
        reason = "is SECURITY DEFINER: it runs with its owner's rights, past the role's fence"
        if allow.function(routine):
            return "warning", f"{reason}; trusted by fence.allow_functions"
        return "error", reason
    if routine.volatility == "v":
        if routine.schema == "pg_catalog" and routine.name in HARMLESS_VOLATILE:
            return None
        if (routine.extension, routine.name) in HARMLESS_EXTENSION_FUNCTIONS:
            return None
        reason = (
            "is VOLATILE: PostgreSQL's catalog says it may change the database or act "
            "outside the query"
        )
        if routine.kind == "a":
            reason = "is an aggregate with a VOLATILE support function"
        if allow.function(routine):
            return "warning", (
                f"{reason}; trusted by fence.allow_functions, so the READ ONLY transaction "
                "and the database role are the only fences left for it"
            )
        return "error", reason
    # PARALLEL UNSAFE is informative for built-ins (it marks those that assign state); it
    # is also the default of CREATE FUNCTION, so for user functions it says nothing.
    if (
        routine.parallel_unsafe
        and routine.schema == "pg_catalog"
        and routine.name not in STATE_FREE_PARALLEL_UNSAFE
    ):
        word = VOLATILITY_WORDS[routine.volatility]
        return "error", f"is {word} but PARALLEL UNSAFE: it assigns state (a transaction id)"
    return None


def _judge_routines(
    ref: Reference, routines: list[Routine], allow: Allowances
) -> SqlProblem | None:
    verdicts = [(r, v) for r in routines if (v := _routine_problem(r, allow))]
    if not verdicts:
        return None
    errors = [(r, v) for r, v in verdicts if v[0] == "error"]
    routine, (level, reason) = (errors or verdicts)[0]
    # The catalog's own signature says which overload (or which function behind an operator
    # or a cast) is meant when it is not simply the name that was written.
    written = f"{_display(ref.name)}()"
    resolved = (
        f" ({routine.signature})"
        if routine.signature not in (written, "") and "(" in routine.signature
        else ""
    )
    if ref.kind == "function":
        what = f"function {_display(ref.name)}(){resolved}"
    elif ref.kind == "attribute":
        what = f"`.{ref.name[-1]}` calls {routine.signature} on the row (attribute notation); it"
    elif ref.kind == "cast":
        what = f"a cast to {_display(ref.name)} runs {routine.signature}, which"
    else:
        what = f"operator {_display(ref.name)}{resolved}"
    suffix = "; not allowed" if level == "error" else ""
    return SqlProblem(ref.line, f"{what} {reason}{suffix}", level)


def judge(
    analysis: Analysis, catalog: Catalog, allow: Allowances = TRUST_NOTHING, depth: int = 0
) -> list[SqlProblem]:
    """Every reason the catalog gives to refuse what the query calls; one per name."""
    problems: list[SqlProblem] = []
    seen: set[tuple[RefKind, Name]] = set()

    def first(kind: RefKind) -> list[Reference]:
        unique = []
        for ref in analysis.named(kind):
            if (kind, ref.name) not in seen:
                seen.add((kind, ref.name))
                unique.append(ref)
        return unique

    functions = first("function")
    for ref in list(functions):
        name = ref.name[-1]
        if name in UNINTERRUPTIBLE and not allow.named(ref.name):
            functions.remove(ref)
            problems.append(
                SqlProblem(
                    ref.line,
                    f"{name} evaluates XPath in libxml2, which PostgreSQL cannot interrupt: no "
                    "statement timeout or cancel stops a costly expression; not allowed unless "
                    f"trusted in fence.allow_functions (e.g. [{name}])",
                )
            )
        elif name in RUNS_SQL_TEXT or name.startswith("dblink"):
            functions.remove(ref)
            problems.append(
                SqlProblem(
                    ref.line,
                    f"function {_display(ref.name)}() runs SQL given to it as text (or reads a "
                    "relation named in a string), which the fence cannot judge; not allowed",
                )
            )
    found = catalog.functions(r.name for r in functions)
    for ref in functions:
        if ref.name not in found:
            if allow.named(ref.name):
                continue
            problems.append(
                SqlProblem(
                    ref.line,
                    f"function {_display(ref.name)}() is unknown to {catalog.source}; an "
                    "unknown function is refused (give lint the schema that defines it with "
                    "--schema, or trust it by name in fence.allow_functions)",
                    rule="unknown",
                )
            )
        elif problem := _judge_routines(ref, found[ref.name], allow):
            problems.append(problem)

    # Words that are syntax to this parser and may be functions on an older server: judged
    # when the database has a function of that name, and fine when it has none.
    syntax = first("syntax_function")
    found_syntax = catalog.functions(r.name for r in syntax)
    for ref in syntax:
        as_function = Reference("function", ref.name, ref.line)
        if problem := _judge_routines(as_function, found_syntax.get(ref.name, []), allow):
            problems.append(problem)

    attributes = first("attribute")
    callable_ = catalog.functions(r.name for r in attributes)
    for ref in attributes:
        one_arg = [r for r in callable_.get(ref.name, []) if r.one_arg]
        if one_arg and (problem := _judge_routines(ref, one_arg, allow)):
            problems.append(problem)

    operators = [r for r in first("operator") if r.name]
    found_ops = catalog.operators(r.name for r in operators)
    for ref in operators:
        if ref.name not in found_ops:
            if not allow.operator(ref.name):
                problems.append(
                    SqlProblem(
                        ref.line,
                        f"operator {_display(ref.name)} is unknown to {catalog.source}; "
                        "trust it by name in fence.allow_operators if your database has it",
                        rule="unknown",
                    )
                )
        elif not allow.operator(ref.name) and (
            problem := _judge_routines(ref, found_ops[ref.name], allow)
        ):
            problems.append(problem)

    casts = [r for r in first("cast") if r.name and r.name[0] != "pg_catalog"]
    found_casts = catalog.casts(r.name for r in casts)
    for ref in casts:
        if problem := _judge_routines(ref, found_casts.get(ref.name, []), allow):
            problems.append(problem)

    for ref in first("tablesample"):
        builtin = ref.name[:-1] in ((), ("pg_catalog",)) and ref.name[-1] in BUILTIN_TABLESAMPLE
        if not builtin:
            problems.append(
                SqlProblem(ref.line, f"TABLESAMPLE {_display(ref.name)} is not a built-in method")
            )

    relations = first("relation")
    # A system view is judged by the functions it calls (the built-in table lists those
    # worth a look); a user-defined view by its whole definition, read from the database.
    system_views = catalog.system_view_calls(r.name for r in relations)
    implied = [(ref, (fn,)) for ref in relations for fn in system_views.get(ref.name, [])]
    found_implied = catalog.functions(fn for _, fn in implied)
    for ref, fn in implied:
        call = Reference("function", fn, ref.line)
        problem = _judge_routines(call, found_implied.get(fn, []), allow)
        if problem and problem.level == "error":
            problems.append(
                SqlProblem(
                    ref.line,
                    f"reading view {_display(ref.name)} runs {problem.message}",
                    problem.level,
                )
            )
    views = catalog.view_definitions(r.name for r in relations)
    for ref in relations:
        if ref.name not in views:
            continue
        if depth >= MAX_VIEW_DEPTH:
            problems.append(
                SqlProblem(ref.line, f"view {_display(ref.name)} nests views too deeply to judge")
            )
            continue
        inner = fence(views[ref.name], catalog, allow, depth + 1)
        refused = [p for p in inner if p.level == "error"]
        if refused:
            problems.append(
                SqlProblem(
                    ref.line,
                    f"view {_display(ref.name)} runs what is not allowed: {refused[0].message}",
                )
            )
    return sorted(problems, key=lambda p: (p.line, p.message))


def fence(
    sql: str, catalog: Catalog, allow: Allowances = TRUST_NOTHING, depth: int = 0
) -> list[SqlProblem]:
    """The whole judgement of one text: its structure, then what it calls."""
    return verdict(analyze(sql), catalog, allow, depth)


def verdict(
    analysis: Analysis, catalog: Catalog, allow: Allowances = TRUST_NOTHING, depth: int = 0
) -> list[SqlProblem]:
    """The judgement of a text the parser has read (`analyze`)."""
    if analysis.statement is None:
        return analysis.problems
    return sorted(
        [*analysis.problems, *judge(analysis, catalog, allow, depth)], key=lambda p: p.line
    )
