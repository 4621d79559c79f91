"""One selection syntax for lint, test, explain and check: names, folders, globs, tags and
file paths; a selector that matches nothing is an error that lists what there is."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import CHECK, cli

from monitor.invariants.loader import load_directory
from monitor.invariants.selection import NothingSelected, problem_name, select, select_loaded
from monitor.problems import Problem

QUERY = "SELECT 1 AS a WHERE false\n"
FILES = {
    "payments/duplicate_refunds.sql": "-- description: x\n-- tags: [money]\n" + QUERY,
    "payments/negative_balance.sql": "-- description: x\n-- tags: [money, ledger]\n" + QUERY,
    "jobs/stuck.sql": "-- description: x\n-- tags: [jobs]\n" + QUERY,
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "invariants"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("selectors", "chosen"),
    [
        ((), {"jobs/stuck", "payments/duplicate_refunds", "payments/negative_balance"}),
        (("jobs/stuck",), {"jobs/stuck"}),
        (("payments/",), {"payments/duplicate_refunds", "payments/negative_balance"}),
        (("payments",), {"payments/duplicate_refunds", "payments/negative_balance"}),
        (("*/neg*",), {"payments/negative_balance"}),
        (("tag:ledger",), {"payments/negative_balance"}),
        (("tag:jobs", "payments/duplicate_refunds"), {"jobs/stuck", "payments/duplicate_refunds"}),
    ],
)
def test_selectors_choose_by_name_folder_glob_and_tag(
    folder: Path, selectors: tuple[str, ...], chosen: set[str]
) -> None:
    loaded = load_directory(folder).invariants
    assert {i.name for i in select(loaded, selectors, folder)} == chosen


def test_a_file_path_selects_that_file(folder: Path) -> None:
    loaded = load_directory(folder).invariants
    previous = Path.cwd()
    os.chdir(folder.parent)
    try:
        chosen = select(loaded, ["invariants/jobs/stuck.sql"], folder)
        under = select(loaded, ["invariants/payments/"], folder)
    finally:
        os.chdir(previous)
    assert [i.name for i in chosen] == ["jobs/stuck"]
    assert len(under) == 2


def test_a_selector_that_matches_nothing_lists_what_there_is(folder: Path) -> None:
    with pytest.raises(NothingSelected) as refused:
        select(load_directory(folder).invariants, ["tag:nope"], folder)
    assert str(refused.value) == (
        "--select 'tag:nope' matches no invariant; names: jobs/stuck, "
        "payments/duplicate_refunds, payments/negative_balance; tags: jobs, ledger, money"
    )


def test_every_command_takes_the_same_selection(folder: Path, database: str) -> None:
    (folder / "jobs" / "broken.sql").write_text("-- description: x\nSELECT nextval('s') AS n\n")
    linted = cli("lint", "--invariants", str(folder), "--select", "payments/")
    assert linted.returncode == 0 and "broken" not in linted.stdout
    broken = cli("lint", "--invariants", str(folder), "--select", "jobs/broken")
    assert broken.returncode == 2 and "broken.sql:2:" in broken.stdout
    checked = cli(
        *CHECK,
        "--dsn",
        database,
        "--invariants",
        str(folder),
        "--select",
        "tag:money",
        "--format",
        "json",
    )
    assert checked.stdout.count('"invariant":') == 2, checked.stdout + checked.stderr
    (folder / "jobs" / "broken.sql").unlink()
    tested = cli(
        "test",
        "--invariants",
        str(folder),
        "--select",
        "tag:jobs",
        env={"INVMON_TEST_DSN": database},
    )
    assert tested.stdout.splitlines()[0] == "jobs/stuck"


def test_a_name_holding_glob_characters_is_chosen_and_muted_by_its_own_name(
    folder: Path,
) -> None:
    """`x[1]/d` read as a glob matched nothing, so neither `check --select` nor `mute` could
    name it; the name itself is tried first, and a glob still works beside it."""
    from monitor.store.mutes import name_covered

    (folder / "x[1]").mkdir()
    (folder / "x[1]" / "d.sql").write_text("-- description: x\n" + QUERY)
    loaded = load_directory(folder).invariants
    assert [i.name for i in select(loaded, ["x[1]/d"], folder)] == ["x[1]/d"]
    assert [i.name for i in select(loaded, ["x*/d"], folder)] == ["x[1]/d"]
    assert (name_covered("x[1]/d", "x[1]/d"), name_covered("x[1]/d", "x1/d")) == (True, True)


# Each file that does not load, and what makes it fail: a header never read, a header read
# (tagged) with a query the fence refuses, a file in a folder of its own.
BROKEN = {
    "payments/typo.sql": "-- description: x\n-- severty: high\n-- tags: [money]\n" + QUERY,
    "payments/writes.sql": "-- description: x\n-- tags: [money]\nSELECT nextval('s') AS n\n",
    "jobs/counter.sql": "-- description: x\n-- tags: [jobs]\nSELECT nextval('s') AS n\n",
}


@pytest.mark.parametrize(
    ("selectors", "chosen", "reported"),
    [
        # By tag: a header read says whether; one never read may hold the tag.
        (("tag:money",), 2, {"payments/typo", "payments/writes"}),
        (("tag:jobs",), 1, {"payments/typo", "jobs/counter"}),
        # By name, folder or glob: the file's name says, loaded or not.
        (("payments/",), 2, {"payments/typo", "payments/writes"}),
        (("jobs/counter",), 0, {"jobs/counter"}),
        (("jobs/c*",), 0, {"jobs/counter"}),
        (("payments/duplicate_refunds",), 1, set()),
        ((), 3, {"payments/typo", "payments/writes", "jobs/counter"}),
    ],
)
def test_a_selection_keeps_the_problems_of_every_file_it_may_name(
    folder: Path, selectors: tuple[str, ...], chosen: int, reported: set[str]
) -> None:
    for name, text in BROKEN.items():
        (folder / name).write_text(text)
    selected = select_loaded(load_directory(folder), selectors, folder)
    assert len(selected.invariants) == chosen
    assert {problem_name(p.path, folder) for p in selected.errors} == reported


def test_a_problem_of_the_folder_itself_is_kept_whatever_is_selected(folder: Path) -> None:
    loaded = load_directory(folder)
    loaded.problems.append(Problem(folder, 0, "more than 10,000 files; the rest are not read"))
    selected = select_loaded(loaded, ["jobs/stuck"], folder)
    assert [p.message for p in selected.problems] == [
        "more than 10,000 files; the rest are not read"
    ]


def test_check_reports_a_selected_file_that_did_not_load_and_runs_the_rest(
    folder: Path, database: str
) -> None:
    for name, text in BROKEN.items():
        (folder / name).write_text(text)
    argv = [*CHECK, "--dsn", database, "--invariants", str(folder), "--format", "json"]
    checked = cli(*argv, "--select", "tag:money")
    results = json.loads(checked.stdout)["results"]
    assert {(r["invariant"], r["status"]) for r in results} == {
        ("payments/duplicate_refunds", "ok"),
        ("payments/negative_balance", "ok"),
        ("payments/typo", "error"),
        ("payments/writes", "error"),
    }
    assert checked.returncode == 2
    # A target narrows what loaded; a file that did not load may be of any target.
    by_target = cli(*argv, "--select", "jobs/", "--target", "default")
    assert {r["invariant"] for r in json.loads(by_target.stdout)["results"]} == {
        "jobs/stuck",
        "jobs/counter",
    }


def test_a_folder_that_could_not_be_read_is_kept_by_a_selector_naming_it_or_inside_it(
    folder: Path,
) -> None:
    """Its name is its path as it is: `v1.2` lost its `.2` as if it were a file's suffix,
    and a selector naming the folder itself said it matched nothing."""
    loaded = load_directory(folder)
    unread = Problem(folder / "payments" / "v1.2", 0, "cannot read this folder")
    loaded.problems.append(unread)
    assert problem_name(unread.path, folder) == "payments/v1.2"
    for selector in ("payments/v1.2", "payments/v1.2/", "payments/v1.2/dup_refunds"):
        assert select_loaded(loaded, [selector], folder).problems == [unread], selector
    assert select_loaded(loaded, ["jobs/"], folder).problems == []


def test_files_that_collide_are_chosen_by_their_own_tags(folder: Path) -> None:
    """Two files of one name both fail (`duplicate invariant name`): their headers were
    read, so a selection by another tag leaves them out. A `.SQL` file beside a loaded
    `.sql` of the same name is never read: the loaded one's tags are not its."""
    (folder / "dup").mkdir()
    for name in ("A", "a"):
        (folder / "dup" / f"{name}.sql").write_text("-- description: x\n-- tags: [ops]\n" + QUERY)
    loaded = load_directory(folder)
    with pytest.raises(NothingSelected):
        select_loaded(loaded, ["tag:nosuch"], folder)
    ops = select_loaded(loaded, ["tag:ops"], folder)
    assert sorted(p.path.name for p in ops.errors) == ["A.sql", "a.sql"]
    (folder / "jobs" / "stuck.SQL").write_text("-- description: x\n-- tags: [money]\n" + QUERY)
    money = select_loaded(load_directory(folder), ["tag:money"], folder)
    assert [p.path.name for p in money.errors] == ["stuck.SQL"]
    assert sorted(i.name for i in money.invariants) == [
        "payments/duplicate_refunds",
        "payments/negative_balance",
    ]
