"""What lint, test and explain found, in the forms CI systems read: GitHub Actions
annotations (`::error file=…,line=…::…`, shown on the PR's diff) and JUnit XML (read by
nearly every CI). Pure: findings in, text out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from monitor.problems import Problem
from monitor.text import printable

Level = Literal["error", "warning", "notice"]


@dataclass(frozen=True)
class Finding:
    """One thing to show at a place: a lint problem, a failing case, a plan over budget."""

    path: Path | None
    line: int | None
    level: Level
    title: str
    message: str


# A hint is advice, not a defect: GitHub shows it as a notice, not a warning.
LEVELS: dict[str, Level] = {"error": "error", "warning": "warning", "hint": "notice"}


def from_problems(problems: Sequence[Problem], title: str = "invmon lint") -> list[Finding]:
    return [
        Finding(p.path, p.line or None, LEVELS.get(p.level, "warning"), title, m)
        for p in problems
        for m in [p.message]
    ]


def _property(value: str) -> str:
    # GitHub's workflow-command escaping: properties also escape ':' and ','.
    return _data(value).replace(":", "%3A").replace(",", "%2C")


def _data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_annotations(findings: Sequence[Finding]) -> str:
    lines = []
    for f in findings:
        props = []
        if f.path is not None:
            props.append(f"file={_property(f.path.as_posix())}")
        if f.line:
            props.append(f"line={f.line}")
        props.append(f"title={_property(f.title)}")
        lines.append(f"::{f.level} {','.join(props)}::{_data(f.message)}")
    return "\n".join(lines)


@dataclass(frozen=True)
class JunitCase:
    classname: str  # the invariant
    name: str  # the case
    seconds: float = 0.0
    failure: str | None = None  # it ran and did not pass
    error: str | None = None  # it could not run
    file: str | None = None
    line: int | None = None


def junit_xml(suite: str, cases: Sequence[JunitCase]) -> str:
    """One <testsuite>; control characters escaped (XML 1.0 cannot hold them)."""
    failures = sum(c.failure is not None for c in cases)
    errors = sum(c.error is not None for c in cases)
    import xml.etree.ElementTree as ET  # only JUnit needs it; every command loads this module

    root = ET.Element("testsuites", name="invmon")
    element = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(cases)),
        failures=str(failures),
        errors=str(errors),
        time=f"{sum(c.seconds for c in cases):.3f}",
    )
    for case in cases:
        attributes = {
            "classname": printable(case.classname),
            "name": printable(case.name),
            "time": f"{case.seconds:.3f}",
        }
        if case.file:
            attributes["file"] = case.file
        if case.line:
            attributes["line"] = str(case.line)
        node = ET.SubElement(element, "testcase", attributes)
        for tag, text in (("failure", case.failure), ("error", case.error)):
            if text is not None:
                shown = printable(text, keep_newlines=True)
                first = shown.splitlines()[0][:200] if shown else ""
                ET.SubElement(node, tag, message=first).text = shown
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
