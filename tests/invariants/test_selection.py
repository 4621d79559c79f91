"""One selection syntax for lint, test, explain and check: names, folders, globs, tags and
file paths; a selector that matches nothing is an error that lists what there is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import CHECK, cli

from monitor.invariants.loader import load_directory
from monitor.invariants.selection import NothingSelected, select

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
