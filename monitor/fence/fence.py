"""The read-only fence: is this SQL one query that cannot change anything, that the server
can stop, and that reads no secret?

Invariant files come from pull requests and run against production replicas, so "read-only"
must be something the code can show, not a list of names it hopes is complete. Three
judges, all PostgreSQL's own:

1. **Its parser.** The text is parsed by libpg_query (through pglast), the parser of the
   server itself, so names are decoded exactly as the server will decode them: `U&"\0070g_…"`,
   quoted and schema-qualified names, dollar quotes, comments and `E''` strings cannot hide
   a call. Statement kinds, data-modifying CTEs, `SELECT INTO`, locking clauses, NUL bytes
   and the bounds on literals and numeric work (sqltree.py) are read off that tree, and so
   are the paths into libxml2 and the settings a query reads (this module).
2. **Its catalog.** Every function the query names (and every operator, type it names,
   relation it reads and `row.fn` attribute call it makes) must run only PostgreSQL's own
   code (created by initdb), unless the config trusts it: what user code declares is its
   author's claim. That code must be IMMUTABLE or STABLE, not PARALLEL UNSAFE (STABLE
   built-ins that assign state, such as a transaction id), and must not hand text to
   libxml2. A short, documented list of harmless VOLATILE functions is allowed
   (`HARMLESS_VOLATILE`); anything unknown is refused. With a database, its own catalog
   judges (views by what they run, types by the code their values run); without one, a table
   generated from the built-in catalogs (pgcatalog.py).
3. At run time the query runs in a READ ONLY transaction, under a role without EXECUTE on
   effectful functions (deploy/readonly-role.sql): what trusted code lies about is stopped
   there.

This module is pure: `analyze` reads the text, `judge` asks a `Catalog`.
"""

from __future__ import annotations

from monitor.fence.allowances import TRUST_NOTHING, Allowances
from monitor.fence.known import (
    ALL_SETTINGS,
    BUILTIN_TABLESAMPLE,
    HARMLESS_EXTENSION_FUNCTIONS,
    HARMLESS_SETTINGS,
    HARMLESS_VOLATILE,
    MAX_VIEW_DEPTH,
    POPULATES_ROWS,
    RUNS_A_TYPES_INPUT,
    RUNS_SQL_TEXT,
    SETTINGS_FUNCTIONS,
    SETTINGS_RELATIONS,
    STATE_FREE_PARALLEL_UNSAFE,
    UNINTERRUPTIBLE,
    XML_PARSING,
    XML_SYNTAX,
    XML_TYPE,
    in_system,
)
from monitor.fence.pgcatalog import SYSTEM_SCHEMAS, VOLATILITY_WORDS, Catalog, Name, Routine
from monitor.fence.sqltree import Analysis, Reference, RefKind, analyze
from monitor.problems import SqlProblem


def _display(name: Name) -> str:
    return ".".join(name)


# Where each kind of reference is trusted when the code behind it is not PostgreSQL's own.
_ALLOWANCE: dict[RefKind, str] = {
    "function": "fence.allow_functions",
    "syntax_function": "fence.allow_functions",
    "attribute": "fence.allow_functions",
    "operator": "fence.allow_operators",
    "cast": "fence.allow_types",
    "relation": "fence.allow_types",
}


_LIBXML_REASON = (
    "hands text to libxml2's parser, which PostgreSQL cannot interrupt: no statement "
    "timeout or cancel stops a crafted document (a DTD entity expanded a million times, "
    "thousands of attributes)"
)


def _routine_problem(
    routine: Routine, allow: Allowances, trusted: bool, allowance: str
) -> tuple[str, str] | None:
    """(level, what is wrong with it) when this candidate may not run; None when harmless.
    `trusted`: named by the allowance that fits how it is reached (`allowance`)."""
    if routine.kind == "p":
        return "error", "is a procedure; not allowed"
    if routine.libxml and not (allow.function(routine) or allow.named((XML_TYPE,))):
        return "error", (
            f"{_LIBXML_REASON}; not allowed unless trusted in fence.allow_functions "
            f"(e.g. [{XML_TYPE}] for every cast into xml, or [{routine.name}])"
        )
    if routine.security_definer and routine.schema not in SYSTEM_SCHEMAS:
        reason = "is SECURITY DEFINER: it runs with its owner's rights, past the role's fence"
        if trusted:
            return "warning", f"{reason}; trusted by {allowance}"
        return "error", f"{reason}; not allowed"
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
        if trusted:
            return "warning", (
                f"{reason}; trusted by {allowance}, so the READ ONLY transaction "
                "and the database role are the only fences left for it"
            )
        return "error", f"{reason}; not allowed"
    if not routine.builtin and not (
        trusted
        or allow.extension(routine)
        or (routine.extension, routine.name) in HARMLESS_EXTENSION_FUNCTIONS
    ):
        # The catalog records what the author declared: a function labelled STABLE whose
        # body calls pg_notify or pg_advisory_lock ran as a superuser and acted. Only
        # PostgreSQL's own code is vouched for by the server.
        label = VOLATILITY_WORDS[routine.volatility]
        if routine.extension:
            origin = f"extension {routine.extension} installed it"
            where = f"fence.trust_extensions (e.g. [{routine.extension}]) or {allowance}"
        else:
            origin = f"it was created in this database, in schema {routine.schema}"
            where = allowance
        return "error", (
            f"is not PostgreSQL's own code ({origin}): its {label} label is its author's "
            f"claim, not the server's; not allowed unless trusted in {where}"
        )
    # PARALLEL UNSAFE is informative for built-ins (it marks those that assign state); it
    # is also the default of CREATE FUNCTION, so for user functions it says nothing.
    if (
        routine.parallel_unsafe
        and routine.schema == "pg_catalog"
        and routine.name not in STATE_FREE_PARALLEL_UNSAFE
    ):
        word = VOLATILITY_WORDS[routine.volatility]
        return (
            "error",
            f"is {word} but PARALLEL UNSAFE: it assigns state (a transaction id); not allowed",
        )
    return None


def _trusted(ref: Reference, routine: Routine, allow: Allowances) -> bool:
    """Is this routine trusted by the allowance that fits how the query reaches it?"""
    if ref.kind in ("cast", "relation"):
        written = ref.kind == "cast" and allow.type(_display(ref.name))
        return allow.function(routine) or written or allow.type(routine.of_type)
    if ref.kind == "operator":
        return False  # a trusted operator is not judged at all
    return allow.function(routine)


def _judge_routines(
    ref: Reference, routines: list[Routine], allow: Allowances
) -> SqlProblem | None:
    allowance = _ALLOWANCE.get(ref.kind, "fence.allow_functions")
    verdicts = [
        (r, v)
        for r in routines
        if (v := _routine_problem(r, allow, _trusted(ref, r, allow), allowance))
    ]
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
    # What the code is to a type: the cast into it, its input function, a domain's CHECK.
    part = f" ({routine.role} {routine.of_type})" if routine.role else ""
    if ref.kind == "function":
        what = f"function {_display(ref.name)}(){resolved}"
    elif ref.kind == "attribute":
        what = f"`.{ref.name[-1]}` calls {routine.signature} on the row (attribute notation); it"
    elif ref.kind == "cast":
        what = f"a cast to {_display(ref.name)} runs {routine.signature}{part}, which"
    elif ref.kind == "relation":
        what = f"reading {_display(ref.name)} runs {routine.signature}{part}, which"
    else:
        what = f"operator {_display(ref.name)}{resolved}"
    return SqlProblem(ref.line, f"{what} {reason}", level)


def _xml_problem(line: int, what: str, entry: str) -> SqlProblem:
    return SqlProblem(
        line,
        f"{what} {_LIBXML_REASON}; not allowed unless trusted in fence.allow_functions "
        f"(e.g. [{entry}])",
    )


def _implicit_xml_problems(
    analysis: Analysis,
    catalog: Catalog,
    functions: dict[Name, list[Routine]],
    row_code: dict[Name, list[Routine]],
) -> list[SqlProblem]:
    """A cast into xml that PostgreSQL applies unasked (none is built in; a database owner
    can add one, e.g. WITH INOUT from a text-like type) turns a computed value into xml
    through libxml2 wherever xml is expected. Judged when the query makes or reads xml: XML
    syntax, a function of xml, a relation with an xml column."""
    xml_type = f"pg_catalog.{XML_TYPE}"
    lines = [r.line for r in analysis.named("xml")]
    lines += [
        r.line
        for r in analysis.named("function")
        if r.name[-1].startswith(XML_TYPE)
        or any(XML_TYPE in routine.signature for routine in functions.get(r.name, []))
    ]
    lines += [
        r.line
        for r in analysis.named("relation")
        if any(routine.of_type == xml_type for routine in row_code.get(r.name, []))
    ]
    if not lines:
        return []
    casts = catalog.implicit_casts([(XML_TYPE,)]).get((XML_TYPE,), [])
    if not casts:
        return []
    return [
        SqlProblem(
            min(lines),
            f"this database makes values into xml unasked ({', '.join(sorted(casts))}), and a "
            f"value made into xml {_LIBXML_REASON}; not allowed unless trusted in "
            f"fence.allow_functions (e.g. [{XML_TYPE}])",
        )
    ]


def _setting_problems(analysis: Analysis, allow: Allowances) -> list[SqlProblem]:
    """current_setting() of a setting outside HARMLESS_SETTINGS, a name the parser cannot
    read, and what shows every setting."""
    problems = []
    for ref in analysis.named("setting"):
        if not ref.name:
            problems.append(
                SqlProblem(
                    ref.line,
                    "current_setting() with a name that is not a string literal: which "
                    "setting it reads cannot be judged; write the name as a literal",
                )
            )
        elif ref.name == (ALL_SETTINGS,):
            if not allow.setting(ALL_SETTINGS):
                problems.append(
                    SqlProblem(
                        ref.line,
                        "the settings of every role and database (rolconfig, useconfig, "
                        "setconfig) can hold secrets; not allowed unless fence.allow_settings "
                        f'holds "{ALL_SETTINGS}"',
                    )
                )
        elif ref.name[0].lower() not in HARMLESS_SETTINGS and not allow.setting(ref.name[0]):
            problems.append(
                SqlProblem(
                    ref.line,
                    f"current_setting('{ref.name[0]}') reads a setting that is not on the "
                    "fence's list of harmless built-in ones; custom settings often hold "
                    "secrets; not allowed unless named in fence.allow_settings "
                    f"(e.g. [{ref.name[0].lower()}])",
                )
            )
    if allow.setting(ALL_SETTINGS):
        return problems
    every = [
        (ref, f"reading {_display(ref.name)}")
        for ref in analysis.named("relation")
        if in_system(ref.name, SETTINGS_RELATIONS)
    ] + [
        (ref, f"function {_display(ref.name)}()")
        for ref in analysis.named("function")
        if in_system(ref.name, SETTINGS_FUNCTIONS)
    ]
    for ref, what in every:
        problems.append(
            SqlProblem(
                ref.line,
                f"{what} shows every setting, custom ones too, which often hold secrets; "
                f'not allowed unless fence.allow_settings holds "{ALL_SETTINGS}"',
            )
        )
    return problems


def judge(
    analysis: Analysis, catalog: Catalog, allow: Allowances = TRUST_NOTHING, depth: int = 0
) -> list[SqlProblem]:
    """Every reason the catalog gives to refuse what the query calls; one per name."""
    problems: list[SqlProblem] = _setting_problems(analysis, allow)
    seen: set[tuple[RefKind, Name]] = set()

    def first(kind: RefKind) -> list[Reference]:
        unique = []
        for ref in analysis.named(kind):
            if (kind, ref.name) not in seen:
                seen.add((kind, ref.name))
                unique.append(ref)
        return unique

    for ref in first("libxml"):
        entry = ref.name[-1]
        if not allow.named(ref.name):
            problems.append(_xml_problem(ref.line, XML_SYNTAX.get(entry, entry), entry))

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
        elif name in XML_PARSING and not allow.named(ref.name):
            functions.remove(ref)
            problems.append(_xml_problem(ref.line, f"function {_display(ref.name)}()", name))
        elif name in RUNS_SQL_TEXT or name.startswith("dblink"):
            functions.remove(ref)
            problems.append(
                SqlProblem(
                    ref.line,
                    f"function {_display(ref.name)}() runs SQL given to it as text (or reads a "
                    "relation named in a string), which the fence cannot judge; not allowed",
                )
            )
        elif in_system(ref.name, RUNS_A_TYPES_INPUT) and not allow.named(ref.name):
            functions.remove(ref)
            problems.append(
                SqlProblem(
                    ref.line,
                    f"function {_display(ref.name)}() runs the input function of a type given "
                    "as a value, with the constraints of its domains, which the fence cannot "
                    "see; not allowed (write a cast, which is judged)",
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

    casts = []
    for ref in first("cast"):
        if in_system(ref.name, frozenset({XML_TYPE})):
            if not allow.named((XML_TYPE,)):
                problems.append(_xml_problem(ref.line, "a cast to xml", XML_TYPE))
        elif ref.name:
            # pg_catalog.text too: the cast function is chosen by the source type, and a
            # user type's cast into a built-in one is its owner's code.
            casts.append(ref)
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
    # The code of each relation's column types: the output functions send its rows, and
    # the input functions and domain constraints run when a row of it is built from JSON.
    populates = any(in_system(r.name, POPULATES_ROWS) for r in analysis.named("function"))
    row_code = catalog.row_types(r.name for r in relations)
    for ref in relations:
        code = [
            r for r in row_code.get(ref.name, []) if populates or r.role == "the output function of"
        ]
        if problem := _judge_routines(ref, code, allow):
            problems.append(problem)
    if not allow.named((XML_TYPE,)):
        problems += _implicit_xml_problems(analysis, catalog, found, row_code)
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
