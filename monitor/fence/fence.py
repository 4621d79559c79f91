"""The read-only fence: is this SQL one query that cannot change anything, that the server
can stop, and that reads no secret?

Invariant files come from pull requests and run against production replicas, so "read-only"
must be something the code can show, not a list of names it hopes is complete. Three
judges, all PostgreSQL's own:

1. **Its parser.** The text is parsed by libpg_query (through pglast), the parser of the
   server itself, so names are decoded exactly as the server will decode them: `U&"0g_…"`,
   quoted and schema-qualified names, dollar quotes, comments and `E''` strings cannot hide
   a call. Statement kinds, data-modifying CTEs, `SELECT INTO`, locking clauses, NUL bytes
   and the bounds on literals and numeric work (walk.py, bounds.py) are read off that tree,
   and so are the paths into libxml2 and the settings a query reads (this module).
2. **Its catalog.** Every function the query names (and every operator, type it names,
   relation it reads and `row.fn` attribute call it makes) must run only PostgreSQL's own
   code (created by initdb), unless the config trusts it: what user code declares is its
   author's claim. That code must be IMMUTABLE or STABLE, not PARALLEL UNSAFE (STABLE
   built-ins that assign state, such as a transaction id), and must not hand text to
   libxml2. A short, documented list of harmless VOLATILE functions is allowed
   (`HARMLESS_VOLATILE`); anything unknown is refused. With a database, its own catalog
   judges (views by what they run, types by the code their values run); without one, a table
   generated from the built-in catalogs (builtin_catalog.py).
3. At run time the query runs in a READ ONLY transaction, under a role without EXECUTE on
   effectful functions (deploy/readonly-role.sql): what trusted code lies about is stopped
   there.

This module is pure: `analyze` reads the text, `judge` asks a `Catalog`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from monitor.fence.allowances import TRUST_NOTHING, Allowances
from monitor.fence.catalog import Catalog, Name, Routine
from monitor.fence.known import (
    BUILTIN_TABLESAMPLE,
    MAX_VIEW_DEPTH,
    POPULATES_ROWS,
    RUNS_A_TYPES_INPUT,
    RUNS_SQL_TEXT,
    UNINTERRUPTIBLE,
    XML_PARSING,
    XML_SYNTAX,
    XML_TYPE,
    in_system,
)
from monitor.fence.routines import (
    display,
    implicit_xml_problems,
    judge_routines,
    setting_problems,
    xml_problem,
)
from monitor.fence.sqltree import analyze
from monitor.fence.tree import Analysis, Reference, RefKind
from monitor.problems import SqlProblem


@dataclass
class _Judging:
    """One query before the catalog: each kind of name it uses, once per name, and what the
    catalog says about the functions and relations, asked once and shared by the checks."""

    analysis: Analysis
    catalog: Catalog
    allow: Allowances
    depth: int
    _unique: dict[RefKind, list[Reference]] = field(default_factory=dict)

    def refs(self, kind: RefKind) -> list[Reference]:
        """The references of one kind, the first of each name (one problem per name)."""
        if kind not in self._unique:
            seen: set[Name] = set()
            unique = []
            for ref in self.analysis.named(kind):
                if ref.name not in seen:
                    seen.add(ref.name)
                    unique.append(ref)
            self._unique[kind] = unique
        return self._unique[kind]

    @cached_property
    def functions(self) -> list[Reference]:
        """The functions left for the catalog to judge: those not refused by name."""
        return [r for r in self.refs("function") if _refused_by_name(r, self.allow) is None]

    @cached_property
    def found_functions(self) -> dict[Name, list[Routine]]:
        return self.catalog.functions(r.name for r in self.functions)

    @cached_property
    def row_code(self) -> dict[Name, list[Routine]]:
        """The code of each relation's column types: the output functions send its rows,
        and the input functions and domain constraints run when a row is built from JSON."""
        return self.catalog.row_types(r.name for r in self.refs("relation"))


Check = Callable[[_Judging], list[SqlProblem]]


def _refused_by_name(ref: Reference, allow: Allowances) -> SqlProblem | None:
    """A function refused for what its name is known to do, whatever the catalog says."""
    name = ref.name[-1]
    if name in UNINTERRUPTIBLE and not allow.named(ref.name):
        return SqlProblem(
            ref.line,
            f"{name} evaluates XPath in libxml2, which PostgreSQL cannot interrupt: no "
            "statement timeout or cancel stops a costly expression; not allowed unless "
            f"trusted in fence.allow_functions (e.g. [{name}])",
        )
    if name in XML_PARSING and not allow.named(ref.name):
        return xml_problem(ref.line, f"function {display(ref.name)}()", name)
    if name in RUNS_SQL_TEXT or name.startswith("dblink"):
        return SqlProblem(
            ref.line,
            f"function {display(ref.name)}() runs SQL given to it as text (or reads a "
            "relation named in a string), which the fence cannot judge; not allowed",
        )
    if in_system(ref.name, RUNS_A_TYPES_INPUT) and not allow.named(ref.name):
        return SqlProblem(
            ref.line,
            f"function {display(ref.name)}() runs the input function of a type given "
            "as a value, with the constraints of its domains, which the fence cannot "
            "see; not allowed (write a cast, which is judged)",
        )
    return None


def _settings(j: _Judging) -> list[SqlProblem]:
    return setting_problems(j.analysis, j.allow)


def _libxml_syntax(j: _Judging) -> list[SqlProblem]:
    """XML syntax (XMLPARSE, IS DOCUMENT, ...) that hands text to libxml2."""
    return [
        xml_problem(ref.line, XML_SYNTAX.get(ref.name[-1], ref.name[-1]), ref.name[-1])
        for ref in j.refs("libxml")
        if not j.allow.named(ref.name)
    ]


def _functions_by_name(j: _Judging) -> list[SqlProblem]:
    return [p for r in j.refs("function") if (p := _refused_by_name(r, j.allow)) is not None]


def _functions_by_catalog(j: _Judging) -> list[SqlProblem]:
    problems = []
    for ref in j.functions:
        if ref.name not in j.found_functions:
            if j.allow.named(ref.name):
                continue
            problems.append(
                SqlProblem(
                    ref.line,
                    f"function {display(ref.name)}() is unknown to {j.catalog.source}; an "
                    "unknown function is refused (give lint the schema that defines it with "
                    "--schema, or trust it by name in fence.allow_functions)",
                    rule="unknown",
                )
            )
        elif problem := judge_routines(ref, j.found_functions[ref.name], j.allow):
            problems.append(problem)
    return problems


def _syntax_functions(j: _Judging) -> list[SqlProblem]:
    """Words that are syntax to this parser and may be functions on an older server: judged
    when the database has a function of that name, and fine when it has none."""
    syntax = j.refs("syntax_function")
    found = j.catalog.functions(r.name for r in syntax)
    calls = (Reference("function", ref.name, ref.line) for ref in syntax)
    return [p for c in calls if (p := judge_routines(c, found.get(c.name, []), j.allow))]


def _attributes(j: _Judging) -> list[SqlProblem]:
    """`row.fn`: a one-argument function called as if it were a column."""
    attributes = j.refs("attribute")
    callable_ = j.catalog.functions(r.name for r in attributes)
    problems = []
    for ref in attributes:
        one_arg = [r for r in callable_.get(ref.name, []) if r.one_arg]
        if one_arg and (problem := judge_routines(ref, one_arg, j.allow)):
            problems.append(problem)
    return problems


def _operators(j: _Judging) -> list[SqlProblem]:
    operators = [r for r in j.refs("operator") if r.name]
    found = j.catalog.operators(r.name for r in operators)
    problems = []
    for ref in operators:
        if ref.name not in found:
            if not j.allow.operator(ref.name):
                problems.append(
                    SqlProblem(
                        ref.line,
                        f"operator {display(ref.name)} is unknown to {j.catalog.source}; "
                        "trust it by name in fence.allow_operators if your database has it",
                        rule="unknown",
                    )
                )
        elif not j.allow.operator(ref.name) and (
            problem := judge_routines(ref, found[ref.name], j.allow)
        ):
            problems.append(problem)
    return problems


def _casts(j: _Judging) -> list[SqlProblem]:
    problems, casts = [], []
    for ref in j.refs("cast"):
        if in_system(ref.name, frozenset({XML_TYPE})):
            if not j.allow.named((XML_TYPE,)):
                problems.append(xml_problem(ref.line, "a cast to xml", XML_TYPE))
        elif ref.name:
            # pg_catalog.text too: the cast function is chosen by the source type, and a
            # user type's cast into a built-in one is its owner's code.
            casts.append(ref)
    found = j.catalog.casts(r.name for r in casts)
    return problems + [p for r in casts if (p := judge_routines(r, found.get(r.name, []), j.allow))]


def _tablesample(j: _Judging) -> list[SqlProblem]:
    return [
        SqlProblem(ref.line, f"TABLESAMPLE {display(ref.name)} is not a built-in method")
        for ref in j.refs("tablesample")
        if not (ref.name[:-1] in ((), ("pg_catalog",)) and ref.name[-1] in BUILTIN_TABLESAMPLE)
    ]


def _relation_rows(j: _Judging) -> list[SqlProblem]:
    """The code a relation's rows run: their output functions, and, when the query builds
    rows from JSON (POPULATES_ROWS), their input functions and domain constraints too."""
    populates = any(in_system(r.name, POPULATES_ROWS) for r in j.analysis.named("function"))
    problems = []
    for ref in j.refs("relation"):
        code = [
            r
            for r in j.row_code.get(ref.name, [])
            if populates or r.role == "the output function of"
        ]
        if problem := judge_routines(ref, code, j.allow):
            problems.append(problem)
    return problems


def _implicit_xml(j: _Judging) -> list[SqlProblem]:
    if j.allow.named((XML_TYPE,)):
        return []
    return implicit_xml_problems(j.analysis, j.catalog, j.found_functions, j.row_code)


def _system_views(j: _Judging) -> list[SqlProblem]:
    """A system view is judged by the functions it calls (the built-in table lists those
    worth a look)."""
    relations = j.refs("relation")
    calls = j.catalog.system_view_calls(r.name for r in relations)
    implied = [(ref, (fn,)) for ref in relations for fn in calls.get(ref.name, [])]
    found = j.catalog.functions(fn for _, fn in implied)
    problems = []
    for ref, fn in implied:
        problem = judge_routines(Reference("function", fn, ref.line), found.get(fn, []), j.allow)
        if problem and problem.level == "error":
            problems.append(
                SqlProblem(
                    ref.line,
                    f"reading view {display(ref.name)} runs {problem.message}",
                    problem.level,
                )
            )
    return problems


def _user_views(j: _Judging) -> list[SqlProblem]:
    """A user-defined view by its whole definition, read from the database and fenced like
    the query itself, to a bounded depth."""
    relations = j.refs("relation")
    views = j.catalog.view_definitions(r.name for r in relations)
    problems = []
    for ref in relations:
        if ref.name not in views:
            continue
        if j.depth >= MAX_VIEW_DEPTH:
            problems.append(
                SqlProblem(ref.line, f"view {display(ref.name)} nests views too deeply to judge")
            )
            continue
        inner = fence(views[ref.name], j.catalog, j.allow, j.depth + 1)
        refused = [p for p in inner if p.level == "error"]
        if refused:
            problems.append(
                SqlProblem(
                    ref.line,
                    f"view {display(ref.name)} runs what is not allowed: {refused[0].message}",
                )
            )
    return problems


# Each check judges one kind of thing the query reaches; together they are the catalog's
# judgement. Independent: the problems are sorted by line at the end.
CHECKS: tuple[Check, ...] = (
    _settings,
    _libxml_syntax,
    _functions_by_name,
    _functions_by_catalog,
    _syntax_functions,
    _attributes,
    _operators,
    _casts,
    _tablesample,
    _relation_rows,
    _implicit_xml,
    _system_views,
    _user_views,
)


def judge(
    analysis: Analysis, catalog: Catalog, allow: Allowances = TRUST_NOTHING, depth: int = 0
) -> list[SqlProblem]:
    """Every reason the catalog gives to refuse what the query calls; one per name."""
    judging = _Judging(analysis, catalog, allow, depth)
    problems = [problem for check in CHECKS for problem in check(judging)]
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
