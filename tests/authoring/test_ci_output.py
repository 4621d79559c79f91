"""CI-native output: JSON for test and explain, JUnit XML any CI reads, and GitHub
annotations at the file and line when running under GitHub Actions."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import cli

from monitor.authoring.ci_output import Finding, JunitCase, github_annotations, junit_xml


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "invariants"
    root.mkdir()
    (root / "negative.sql").write_text(
        "-- description: x\n-- key: [id]\nSELECT id FROM (VALUES (1, -5), (2, 3)) AS t(id, v)"
        " WHERE v < 0\n"
    )
    (root / "negative.test.yaml").write_text(
        "cases:\n  - name: fires\n    expect: {keys: [1]}\n"
        "  - name: wrong on purpose\n    expect: {keys: [2]}\n"
    )
    (root / "broken.sql").write_text("-- description: x\nSELECT nextval('s') AS n\n")
    return root


def test_test_writes_json_and_junit_and_annotations(folder: Path, database: str) -> None:
    (folder / "broken.sql").unlink()
    report = folder.parent / "test.xml"
    done = cli(
        "test",
        "--invariants",
        str(folder),
        "--format",
        "json",
        "--junit",
        str(report),
        env={"INVMON_TEST_DSN": database, "GITHUB_ACTIONS": "true"},
    )
    assert done.returncode == 1
    document = json.loads(done.stdout[: done.stdout.index("\n::")])
    [negative] = document["invariants"]
    assert [(c["name"], c["passed"]) for c in negative["cases"]] == [
        ("fires", True),
        ("wrong on purpose", False),
    ]
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    annotations = [line for line in done.stdout.splitlines() if line.startswith("::")]
    assert annotations == [
        f"::error file={folder}/negative.test.yaml,line=4,title=invmon test::"
        "❌ wrong on purpose: missing keys [2]; unexpected keys [1]"
    ]


def test_lint_annotates_each_problem_and_writes_junit(folder: Path) -> None:
    report = folder.parent / "lint.xml"
    done = cli("lint", str(folder), "--junit", str(report), env={"GITHUB_ACTIONS": "true"})
    assert done.returncode == 2
    assert any(
        line.startswith(f"::error file={folder}/broken.sql,line=2,title=invmon lint::function")
        for line in done.stdout.splitlines()
    )
    cases = ET.parse(report).getroot().findall("testsuite/testcase")
    assert {(c.get("name"), c.find("failure") is not None) for c in cases} == {
        (f"{folder}/broken.sql", True),
        (f"{folder}/negative.sql", False),
    }
    quiet = cli("lint", str(folder))
    assert not any(line.startswith("::") for line in quiet.stdout.splitlines())


def test_annotation_properties_and_messages_are_escaped() -> None:
    found = Finding(Path("a,b:c.sql"), 3, "warning", "t", "50% done\nnext line")
    assert github_annotations([found]) == (
        "::warning file=a%2Cb%3Ac.sql,line=3,title=t::50%25 done%0Anext line"
    )


def test_junit_holds_hostile_text_as_valid_xml() -> None:
    text = junit_xml("s", [JunitCase("inv", "case <&>", failure="bad \x00 byte\n]]> end")])
    case = ET.fromstring(text).find("testsuite/testcase")
    assert case is not None and case.get("name") == "case <&>"
    failure = case.find("failure")
    assert failure is not None and failure.text == "bad \\x00 byte\n]]> end"
