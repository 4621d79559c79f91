"""What `invmon test` found, for people (text), for programs (JSON) and for CI (JUnit XML,
GitHub annotations at the case's line). Pure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from monitor.authoring.ci_output import Finding, JunitCase, Level, from_problems
from monitor.authoring.fixtures import fixture_path
from monitor.authoring.tester import InvariantReport
from monitor.problems import Problem
from monitor.text import counted


def untested_message(report: InvariantReport) -> str:
    """Why `report`'s invariant is untested, naming its fixture only where there is one:
    "no case in x.test.yaml" about a file that does not exist sends the reader looking."""
    name = fixture_path(report.invariant.path).name
    why = (
        f"no case in {name} shows it firing"
        if report.fixture
        else f"it has no {name}, so no case shows it firing"
    )
    return f"untested: {why}; an invariant that never returns a row is a check that cannot fail"


def report_text(reports: Sequence[InvariantReport], strict: bool) -> tuple[str, int]:
    """The report and the exit code: 0 all pass; 1 a case failed; 2 untested under --strict."""
    lines: list[str] = []
    problems: list[Problem] = []
    for report in reports:
        lines.append(f"{report.invariant.name}")
        if report.fixture:
            problems += report.fixture.problems
            lines += [f"  {r.describe()}" for r in report.results]
        if report.untested:
            level = "error" if strict else "warning"
            lines.append(f"  {level}: {untested_message(report)}")
    lines += [str(p) for p in problems]
    failed = sum(r.failed for r in reports)
    untested = sum(r.untested for r in reports)
    cases = sum(len(r.results) for r in reports)
    passed = sum(r.passed for rep in reports for r in rep.results)
    # A case its fixture file refused never ran: "1 of 1 case passed" beside it read as if
    # every case had, so the problems that kept cases from running are counted too.
    refused = f"; {counted(len(problems), 'fixture problem')} above" if problems else ""
    lines.append(
        f"\n{passed} of {counted(cases, 'case')} passed; "
        f"{counted(failed, 'invariant')} failing, {untested} untested{refused}"
    )
    return "\n".join(lines), exit_code(reports, strict)


def exit_code(reports: Sequence[InvariantReport], strict: bool) -> int:
    """2 for what is wrong before any case can say anything (an invalid fixture file, an
    untested invariant under --strict), as `check` puts an error before a violation; 1
    when a case failed; 0 when all passed."""
    invalid = any(r.fixture is not None and r.fixture.problems for r in reports)
    untested = any(r.untested for r in reports)
    if invalid or (strict and untested):
        return 2
    return 1 if any(not case.passed for r in reports for case in r.results) else 0


def report_document(reports: Sequence[InvariantReport], strict: bool) -> dict[str, Any]:
    invariants = []
    for report in reports:
        fixture = fixture_path(report.invariant.path)
        invariants.append(
            {
                "invariant": report.invariant.name,
                "fixture": str(fixture),
                "untested": report.untested,
                "cases": [
                    {
                        "name": r.case.name,
                        "line": r.case.line,
                        "passed": r.passed,
                        "error": r.error,
                        "missing": _parsed(r.missing),
                        "unexpected": _parsed(r.unexpected),
                        "count": r.count,
                        "warnings": r.warnings,
                        "hint": r.hint,
                        "seconds": round(r.seconds, 4),
                    }
                    for r in report.results
                ],
                "problems": [
                    {"path": str(p.path), "line": p.line, "level": p.level, "message": p.message}
                    for p in (report.fixture.problems if report.fixture else [])
                ],
            }
        )
    return {"invariants": invariants, "exit_code": exit_code(reports, strict)}


def _parsed(found: Sequence[str]) -> dict[str, list[Any]]:
    """Keys and rows as JSON values, not as the strings the text report shows."""
    return {
        "keys": [json.loads(k) for k in found if not k.startswith("row ")],
        "rows": [json.loads(k.removeprefix("row ")) for k in found if k.startswith("row ")],
    }


def junit_cases(reports: Sequence[InvariantReport], strict: bool) -> list[JunitCase]:
    cases = []
    for report in reports:
        name = report.invariant.name
        fixture = str(fixture_path(report.invariant.path))
        for r in report.results:
            failure = None if r.passed or r.error else r.describe()
            cases.append(
                JunitCase(name, r.case.name, r.seconds, failure, r.error, fixture, r.case.line)
            )
        for p in report.fixture.problems if report.fixture else []:
            cases.append(JunitCase(name, f"{fixture} line {p.line}", error=p.message, file=fixture))
        if report.untested and strict:
            cases.append(JunitCase(name, "fires in some case", failure=untested_message(report)))
    return cases


def findings(reports: Sequence[InvariantReport], strict: bool) -> list[Finding]:
    out: list[Finding] = []
    for report in reports:
        fixture = fixture_path(report.invariant.path)
        out += from_problems(report.fixture.problems if report.fixture else [], "invmon test")
        for r in report.results:
            if not r.passed:
                out.append(Finding(fixture, r.case.line, "error", "invmon test", r.describe()))
            for warning in r.warnings:
                out.append(Finding(fixture, r.case.line, "warning", "invmon test", warning))
        if report.untested:
            level: Level = "error" if strict else "warning"
            out.append(
                Finding(
                    report.invariant.path,
                    1,
                    level,
                    "invmon test",
                    untested_message(report),
                )
            )
    return out
