"""Reading invariant files: headers, defaults, names, and problems reported at path:line."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from helpers import cli

from monitor.durations import CronSchedule, IntervalSchedule, parse_duration, parse_schedule
from monitor.fence.sqltree import NUL_MESSAGE, analyze
from monitor.invariants.loader import (
    Defaults,
    Invariant,
    Loading,
    LoadMemo,
    load_directory,
)

GOOD = """\
-- description: >-
--   Every dispute has at most one
--   settled refund.
-- severity: critical
-- owner: "@payments"
-- runbook: https://example.com/runbook
-- schedule: every 5m
-- timeout: 10s
-- key: [dispute_id]
-- sample: 5
-- tags: [refunds]
-- for: 2
SELECT dispute_id FROM refunds WHERE status = 'settled'
GROUP BY dispute_id HAVING count(*) > 1;
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_complete_header_is_read_into_the_invariant(tmp_path: Path) -> None:
    write(tmp_path, "payments/duplicate_refunds.sql", GOOD)
    loaded = load_directory(tmp_path)
    assert loaded.problems == []
    [inv] = loaded.invariants
    assert isinstance(inv, Invariant)
    assert inv.name == "payments/duplicate_refunds"
    assert inv.description == "Every dispute has at most one settled refund."
    assert inv.severity == "critical"
    assert inv.header.owner == "@payments"
    assert inv.schedule == IntervalSchedule(timedelta(minutes=5))
    assert inv.timeout == timedelta(seconds=10)
    assert inv.key == ("dispute_id",)
    assert inv.sample == 5
    assert inv.header.for_runs == 2
    assert inv.sql.endswith("HAVING count(*) > 1")
    assert inv.sql_first_line == 13


def test_unset_header_keys_take_the_configured_defaults(tmp_path: Path) -> None:
    write(tmp_path, "a.sql", "-- description: x holds\nSELECT 1 WHERE false\n")
    defaults = Defaults(schedule="*/10 * * * *", timeout=timedelta(seconds=7), sample=3)
    [inv] = load_directory(tmp_path, Loading(defaults)).invariants
    assert (inv.severity, inv.schedule, inv.timeout, inv.sample, inv.key) == (
        "warning",
        CronSchedule("*/10 * * * *"),
        timedelta(seconds=7),
        3,
        (),
    )


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("SELECT 1\n", 1, "no header"),
        ("-- severity: critical\nSELECT 1\n", 1, "'description' is required"),
        ("-- description: x\n-- severty: critical\nSELECT 1\n", 2, "unknown header key 'severty'"),
        ("-- description: x\n-- severity: urgent\nSELECT 1\n", 2, "header key 'severity'"),
        ("-- description: x\n-- timeout: soon\nSELECT 1\n", 2, "'soon' is not a duration"),
        ("-- description: x\n-- schedule: hourly\nSELECT 1\n", 2, "is not a schedule"),
        ("-- description: x\n-- schedule: 61 * * * *\nSELECT 1\n", 2, "not a valid cron"),
        ("-- description: x\n-- runbook: wiki/page\nSELECT 1\n", 2, "http(s) URL"),
        ("-- description: x\n-- runbook: https://w/x|click\nSELECT 1\n", 2, "or '|' (got"),
        ("-- description: x\n-- sample: -1\nSELECT 1\n", 2, "header key 'sample'"),
        ("-- description: x\n-- for: 0\nSELECT 1\n", 2, "header key 'for'"),
        ("-- description: [unclosed\nSELECT 1\n", 1, "not valid YAML"),
        (  # an indented key is more of the value above: not a quoting matter
            "-- description: x\n-- owner: me\n--   severity: critical\nSELECT 1\n",
            3,
            "header key 'severity' is indented, so YAML reads it as more of the value above; "
            "start it right after the dashes, as the others: `-- severity: …`",
        ),
        (  # a source's own timeout is in its place: the failure is the owner line's
            "-- description: x\n-- source:\n--   receipts:\n--     kind: s3\n"
            "--     timeout: 20m\n-- owner: a: b\nSELECT 1\n",
            6,
            'a value that contains ": " must be quoted',
        ),
        (  # a line of a `|` description that reads like a key is the description's
            "-- description: |\n--   Refunds settle once.\n--   severity: see runbook\n"
            "-- owner: a: b\nSELECT 1\n",
            4,
            'a value that contains ": " must be quoted',
        ),
        (  # an indented line that is no key: the ": " in a value, which quoting fixes
            "-- description: Every order has\n--   exactly: one payment\nSELECT 1\n",
            2,
            'a value that contains ": " must be quoted',
        ),
        ("-- description: x\nSELECT 1;\nSELECT 2\n", 3, "exactly one statement"),
        ("-- description: x\n\nDELETE FROM t\n", 3, "DELETE statement is not allowed"),
        (
            "-- description: x\n-- key: [DisputeId]\nSELECT dispute_id, DisputeId FROM t\n",
            2,
            "key column 'DisputeId' not among the query's output columns (dispute_id, disputeid)",
        ),
    ],
)
def test_a_broken_file_is_reported_at_its_line(
    tmp_path: Path, text: str, line: int, fragment: str
) -> None:
    path = write(tmp_path, "broken.sql", text)
    loaded = load_directory(tmp_path)
    assert loaded.invariants == []
    assert len(loaded.problems) == 1, loaded.problems
    problem = loaded.problems[0]
    assert (problem.path, problem.line) == (path, line)
    assert fragment in problem.message
    assert str(problem).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize(
    ("key", "select", "message"),
    [
        (  # capitals in the key: the lower-casing hint, naming the column it explains
            "[Email]",
            "SELECT email FROM t",
            "key column 'Email' not among the query's output columns (email); unquoted names "
            "are lower-cased by PostgreSQL (the query's 'email' is 'Email' unquoted)",
        ),
        (  # capitals, but no column they fold to: no word of lower-casing
            "[Zzz]",
            "SELECT id FROM t",
            "key column 'Zzz' not among the query's output columns (id)",
        ),
        (  # none: a typo, and no word of lower-casing, which explains nothing here
            "[emial]",
            "SELECT email FROM t",
            "key column 'emial' not among the query's output columns (email); is the query's "
            "'email' a misspelling of 'emial'?",
        ),
        (  # two output columns of the key's name: the run reads half a key and refuses
            "[id]",
            "SELECT a.id, b.id FROM a JOIN b USING (x)",
            "key column 'id' names 2 of the query's output columns; give them distinct names "
            "(AS …)",
        ),
    ],
)
def test_lint_says_of_a_key_what_the_run_would(
    tmp_path: Path, key: str, select: str, message: str
) -> None:
    write(tmp_path, "k.sql", f"-- description: x\n-- key: {key}\n{select}\n")
    loaded = load_directory(tmp_path)
    assert [(p.line, p.message) for p in loaded.problems] == [(2, message)]


def test_one_broken_file_does_not_stop_the_others_from_loading(tmp_path: Path) -> None:
    write(tmp_path, "a.sql", "-- description: a\nSELECT 1 WHERE false\n")
    write(tmp_path, "b.sql", "-- description: b\nUPDATE t SET x = 1\n")
    write(tmp_path, "c/d.sql", "-- description: d\nSELECT 2 WHERE false\n")
    loaded = load_directory(tmp_path)
    assert [i.name for i in loaded.invariants] == ["a", "c/d"]
    assert [p.path.name for p in loaded.problems] == ["b.sql"]


def test_header_and_sql_problems_in_one_file_are_both_reported(tmp_path: Path) -> None:
    write(tmp_path, "x.sql", "-- description: x\n-- colour: red\nSELECT pg_sleep(1)\n")
    loaded = load_directory(tmp_path)
    assert sorted((p.line, p.message.split(" ")[0]) for p in loaded.problems) == [
        (2, "unknown"),
        (3, "function"),
    ]


def test_a_header_key_past_the_header_is_an_error_never_a_silent_default(
    tmp_path: Path,
) -> None:
    """A blank line ended the header: the keys after it were read as plain comments, and the
    file loaded with severity warning, no key and the default timeout, lint saying valid."""
    write(
        tmp_path,
        "gap.sql",
        "-- description: Orders are never negative.\n-- owner: '@team'\n\n"
        "-- severity: critical\n-- key: [id]\n"
        "SELECT id FROM (VALUES (1)) AS o(id) WHERE false\n"
        "-- timeout: 5s\n-- note: a plain comment\n--keyword: also plain\n",
    )
    loaded = load_directory(tmp_path)
    assert loaded.invariants == []
    said = "reads as a header key, but the header ended at line 3 (the first line that is not"
    assert [(p.line, p.level, p.message.split("'")[1]) for p in loaded.problems] == [
        (4, "error", "severity:"),
        (5, "error", "key:"),
        (7, "error", "timeout:"),
    ]
    assert all(said in p.message for p in loaded.problems)


def test_names_that_differ_only_in_case_are_refused_as_duplicates(tmp_path: Path) -> None:
    write(tmp_path, "Refunds.sql", "-- description: a\nSELECT 1 WHERE false\n")
    write(tmp_path, "refunds.sql", "-- description: b\nSELECT 1 WHERE false\n")
    loaded = load_directory(tmp_path)
    assert loaded.invariants == []
    assert sorted(p.path.name for p in loaded.problems) == ["Refunds.sql", "refunds.sql"]
    assert all("duplicate invariant name" in p.message for p in loaded.problems)


def test_a_missing_folder_is_a_problem_not_an_empty_pass(tmp_path: Path) -> None:
    loaded = load_directory(tmp_path / "nope")
    assert loaded.invariants == []
    assert len(loaded.errors) == 1


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("2d", 172800), (45, 45)],
)
def test_durations_are_read_in_human_units(text: str | int, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize(
    "text", ["", "0s", "-5m", "5 minutes", "m5", "1x", 10**330, -(10**330), "9" * 330]
)
def test_malformed_durations_are_refused(text: str | int) -> None:
    # An integer past a float's range raised OverflowError: a traceback that stopped lint,
    # check and the daemon for every file.
    with pytest.raises(ValueError):
        parse_duration(text)


def test_a_header_duration_past_any_float_is_a_problem_at_its_line(tmp_path: Path) -> None:
    write(tmp_path, "a.sql", GOOD)
    write(tmp_path, "huge.sql", GOOD.replace("-- timeout: 10s", "-- timeout: " + "9" * 330))
    loaded = load_directory(tmp_path)
    assert [i.name for i in loaded.invariants] == ["a"]
    assert [(p.path.name, "under 100 years" in p.message) for p in loaded.errors] == [
        ("huge.sql", True)
    ]


def test_schedules_are_intervals_or_five_field_cron() -> None:
    assert parse_schedule("every 15m") == IntervalSchedule(timedelta(minutes=15))
    assert parse_schedule("0 * * * *") == CronSchedule("0 * * * *")
    with pytest.raises(ValueError, match="five-field cron"):
        parse_schedule("0 0 * * * *")


def test_a_reload_parses_only_the_files_whose_text_or_settings_changed(tmp_path: Path) -> None:
    memo = LoadMemo()
    write(tmp_path, "a.sql", GOOD)
    write(tmp_path, "b.sql", GOOD.replace("every 5m", "every 10m"))
    first = {i.name: i for i in load_directory(tmp_path, memo=memo).invariants}
    write(tmp_path, "b.sql", GOOD.replace("every 5m", "every 20m"))
    second = {i.name: i for i in load_directory(tmp_path, memo=memo).invariants}
    assert set(second) == {"a", "b"}
    assert second["a"] is first["a"]  # the same text: the earlier result, not parsed again
    assert second["b"] is not first["b"]
    assert second["b"].schedule == parse_schedule("every 20m")
    slower = Loading(Defaults(timeout=timedelta(seconds=7)))
    third = {i.name: i for i in load_directory(tmp_path, slower, memo).invariants}
    assert third["a"] is not second["a"]  # other settings: parsed again


def test_a_removed_file_is_forgotten_and_a_broken_one_stays_broken(tmp_path: Path) -> None:
    memo = LoadMemo()
    write(tmp_path, "a.sql", GOOD)
    broken = write(tmp_path, "b.sql", GOOD.replace("SELECT", "SELEC", 1))
    first = load_directory(tmp_path, memo=memo)
    assert [i.name for i in first.invariants] == ["a"]
    again = load_directory(tmp_path, memo=memo)
    assert [(p.path, p.line) for p in again.errors] == [(p.path, p.line) for p in first.errors]
    assert {p.path for p in again.errors} == {broken}
    (tmp_path / "a.sql").unlink()
    assert load_directory(tmp_path, memo=memo).invariants == []


@pytest.mark.parametrize(
    ("schedule", "found"),
    [
        ("every 1ms", [(2, "error", "'every 1ms' is shorter than a second")]),
        ("every 10s", [(2, "warning", "runs every 10s against the replica")]),
        ("every 1m", []),
        ("'* * * * *'", []),  # cron cannot go under a minute
    ],
)
def test_a_schedule_under_a_second_is_refused_and_under_a_minute_is_questioned(
    tmp_path: Path, schedule: str, found: list[tuple[int, str, str]]
) -> None:
    write(tmp_path, "x.sql", f"-- description: x\n-- schedule: {schedule}\nSELECT 1 AS a\n")
    problems = load_directory(tmp_path).problems
    assert [(p.line, p.level) for p in problems] == [(line, level) for line, level, _ in found]
    assert all(text in p.message for p, (_, _, text) in zip(problems, found, strict=True))


NUL_FILE = "-- description: x holds\n-- owner: '@a'\nSELECT 1 AS x\0; SELECT pg_sleep(10)\n"


def test_a_nul_byte_is_refused_at_its_line_when_the_file_is_loaded(tmp_path: Path) -> None:
    """PostgreSQL's parser reads a C string: it would judge `SELECT 1 AS x` and stop, while
    the driver refuses the whole text at run time. Loading refuses it, so lint and run agree."""
    write(tmp_path, "a.sql", NUL_FILE)
    loaded = load_directory(tmp_path)
    assert [(p.line, p.message) for p in loaded.problems] == [(3, NUL_MESSAGE)]
    assert loaded.invariants == []


def test_lint_refuses_a_nul_byte_at_its_path_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "a.sql", NUL_FILE)
    done = cli("lint", str(tmp_path))
    assert (done.returncode, f"{path}:3: {NUL_MESSAGE}" in done.stdout) == (2, True), done


def test_the_fence_refuses_a_text_with_a_nul_byte_wherever_it_comes_from() -> None:
    [problem] = analyze("SELECT 1 AS x\n\0; SELECT pg_sleep(10)").problems
    assert (problem.line, problem.message) == (2, NUL_MESSAGE)


def test_a_message_that_quotes_the_value_does_not_quote_it_twice(tmp_path: Path) -> None:
    write(tmp_path, "x.sql", "-- description: x\n-- schedule: every 0s\nSELECT 1 AS a\n")
    [problem] = load_directory(tmp_path).problems
    assert problem.message == (
        "header key 'schedule': a duration must be positive and under 100 years, got '0s'"
    )
