"""Judging the code a name resolves to: a routine's owner, volatility, parallel safety and
libxml2 use, what the config trusts, and the problems for XML and settings. Pure."""

from __future__ import annotations

from monitor.fence.allowances import Allowances
from monitor.fence.catalog import SYSTEM_SCHEMAS, VOLATILITY_WORDS, Catalog, Name, Routine
from monitor.fence.known import (
    ALL_SETTINGS,
    FUNCTION_SETTINGS_FUNCTIONS,
    HARMLESS_EXTENSION_FUNCTIONS,
    HARMLESS_SETTINGS,
    HARMLESS_VOLATILE,
    SETTINGS_FUNCTIONS,
    SETTINGS_RELATIONS,
    STATE_FREE_PARALLEL_UNSAFE,
    XML_TYPE,
    in_system,
)
from monitor.fence.tree import Analysis, Reference, RefKind
from monitor.problems import SqlProblem


def display(name: Name) -> str:
    return ".".join(name)


# Where each kind of reference is trusted when the code behind it is not PostgreSQL's own.
ALLOWANCE: dict[RefKind, str] = {
    "function": "fence.allow_functions",
    "syntax_function": "fence.allow_functions",
    "attribute": "fence.allow_functions",
    "operator": "fence.allow_operators",
    "cast": "fence.allow_types",
    "relation": "fence.allow_types",
}


LIBXML_REASON = (
    "hands text to libxml2's parser, which PostgreSQL cannot interrupt: no statement "
    "timeout or cancel stops a crafted document (a DTD entity expanded a million times, "
    "thousands of attributes)"
)


def routine_problem(
    routine: Routine, allow: Allowances, trusted: bool, allowance: str
) -> tuple[str, str] | None:
    """(level, what is wrong with it) when this candidate may not run; None when harmless.
    `trusted`: named by the allowance that fits how it is reached (`allowance`)."""
    if routine.kind == "p":
        return "error", "is a procedure; not allowed"
    if routine.libxml and not (allow.function(routine) or allow.named((XML_TYPE,))):
        return "error", (
            f"{LIBXML_REASON}; not allowed unless trusted in fence.allow_functions "
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


def is_trusted(ref: Reference, routine: Routine, allow: Allowances) -> bool:
    """Is this routine trusted by the allowance that fits how the query reaches it?"""
    if ref.kind in ("cast", "relation"):
        written = ref.kind == "cast" and allow.type(display(ref.name))
        return allow.function(routine) or written or allow.type(routine.of_type)
    if ref.kind == "operator":
        return False  # a trusted operator is not judged at all
    return allow.function(routine)


def judge_routines(ref: Reference, routines: list[Routine], allow: Allowances) -> SqlProblem | None:
    allowance = ALLOWANCE.get(ref.kind, "fence.allow_functions")
    verdicts = [
        (r, v)
        for r in routines
        if (v := routine_problem(r, allow, is_trusted(ref, r, allow), allowance))
    ]
    if not verdicts:
        return None
    errors = [(r, v) for r, v in verdicts if v[0] == "error"]
    routine, (level, reason) = (errors or verdicts)[0]
    # The catalog's own signature says which overload (or which function behind an operator
    # or a cast) is meant when it is not simply the name that was written.
    written = f"{display(ref.name)}()"
    resolved = (
        f" ({routine.signature})"
        if routine.signature not in (written, "") and "(" in routine.signature
        else ""
    )
    # What the code is to a type: the cast into it, its input function, a domain's CHECK.
    part = f" ({routine.role} {routine.of_type})" if routine.role else ""
    if ref.kind == "function":
        what = f"function {display(ref.name)}(){resolved}"
    elif ref.kind == "attribute":
        what = f"`.{ref.name[-1]}` calls {routine.signature} on the row (attribute notation); it"
    elif ref.kind == "cast":
        what = f"a cast to {display(ref.name)} runs {routine.signature}{part}, which"
    elif ref.kind == "relation":
        what = f"reading {display(ref.name)} runs {routine.signature}{part}, which"
    else:
        # Not "operator = is citext_eq": for `id = 1` on integers that read as a claim
        # about the query. Without its operands' types, every function an operator of
        # that name may run is judged: each one's code, and the planner's estimators.
        what = f"using operator {display(ref.name)} may run {routine.signature}, which"
        reason += (
            f" (the fence cannot see the types of an operator's operands, so it judges "
            f"every function using one named {display(ref.name)} may run, the planner's "
            "estimators included)"
        )
    return SqlProblem(ref.line, f"{what} {reason}", level)


def xml_problem(line: int, what: str, entry: str) -> SqlProblem:
    return SqlProblem(
        line,
        f"{what} {LIBXML_REASON}; not allowed unless trusted in fence.allow_functions "
        f"(e.g. [{entry}])",
    )


def implicit_xml_problems(
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
            f"value made into xml {LIBXML_REASON}; not allowed unless trusted in "
            f"fence.allow_functions (e.g. [{XML_TYPE}])",
        )
    ]


def setting_problems(analysis: Analysis, allow: Allowances) -> list[SqlProblem]:
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
                        "the settings of every role, database and function (rolconfig, "
                        "useconfig, setconfig, proconfig) can hold secrets; not allowed unless "
                        f'fence.allow_settings holds "{ALL_SETTINGS}"',
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
        (ref, f"reading {display(ref.name)}")
        for ref in analysis.named("relation")
        if in_system(ref.name, SETTINGS_RELATIONS)
    ] + [
        (ref, f"function {display(ref.name)}()")
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
    for ref in analysis.named("function"):
        if in_system(ref.name, FUNCTION_SETTINGS_FUNCTIONS):
            problems.append(
                SqlProblem(
                    ref.line,
                    f"function {display(ref.name)}() shows a function's SET clauses "
                    "(ALTER FUNCTION … SET app.key = …), which can hold secrets; not allowed "
                    f'unless fence.allow_settings holds "{ALL_SETTINGS}"',
                )
            )
    return problems
