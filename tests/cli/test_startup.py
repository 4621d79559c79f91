"""A command pays only for what it uses: `invmon --help` imports no command's machinery, and
`invmon lint` no database driver, Slack client, scheduler or web page. Checked by what a
fresh interpreter has imported (sys.modules), never by a timing; and the lazily imported
commands are the same commands, listed with the same words, as when all are imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import monitor
from monitor.cli.commands import COMMANDS, LazyCommands, LazyGroup, main

CHECKOUT = Path(monitor.__file__).resolve().parent.parent
SHIPPED = CHECKOUT / "invariants"

# What a command that touches no database must not load (each costs tens of milliseconds,
# psycopg alone a few hundred on a cold start).
SERVICES = frozenset(
    {"psycopg", "psycopg_pool", "slack_sdk", "apscheduler", "jinja2", "waitress"}
    | {"prometheus_client", "boto3", "sqlglot"}
)

# Runs the command line as `python -m monitor.cli ARGS` does, then prints sys.modules.
MODULES_AFTER = """
import json, runpy, sys
sys.argv = ["invmon", *sys.argv[1:]]
try:
    runpy.run_module("monitor.cli", run_name="__main__", alter_sys=True)
except SystemExit as exit:
    code = exit.code
else:
    code = 0
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def imported_by(*args: str, cwd: Path, whole: bool = False) -> tuple[object, set[str]]:
    """(exit code, the top-level packages imported) of `invmon ARGS` in a fresh process;
    `whole`: the modules' whole names."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVMON_")}
    env["PYTHONPATH"] = os.pathsep.join([str(CHECKOUT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", MODULES_AFTER, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )
    found = json.loads(done.stdout.splitlines()[-1])
    return found["code"], {name if whole else name.split(".")[0] for name in found["modules"]}


def test_help_imports_no_commands_machinery(tmp_path: Path) -> None:
    code, packages = imported_by("--help", cwd=tmp_path)
    assert code == 0
    assert packages.isdisjoint({*SERVICES, "pglast", "pydantic", "yaml"}), packages


def test_lint_of_one_file_loads_the_fence_but_no_database_driver_slack_or_web(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "expired_lease_jobs.sql").write_text(
        (SHIPPED / "expired_lease_jobs.sql").read_text(encoding="utf-8"), encoding="utf-8"
    )
    code, packages = imported_by("lint", str(folder), cwd=tmp_path)
    assert code == 0
    assert "pglast" in packages  # the fence read it: the check is not vacuous
    assert packages.isdisjoint(SERVICES), packages & SERVICES


def test_check_loads_nothing_only_the_daemon_needs(tmp_path: Path) -> None:
    """Its module is loaded by `check --help` as by `check`: the daemon's own (the state
    store, the build's version, which asks git in a checkout) stay out."""
    code, modules = imported_by("check", "--help", cwd=tmp_path, whole=True)
    assert code == 0
    assert "monitor.cli.evaluating" in modules  # the command's module was loaded
    daemons = {"monitor.cli.running", "monitor.version", "monitor.store.storage"}
    assert modules.isdisjoint(daemons), modules & daemons
    assert not {m for m in modules if m.startswith("monitor.daemon")}


def test_check_routes_without_loading_the_store_s_records(database: str, tmp_path: Path) -> None:
    """`check --format json` names each invariant's channel, which takes routing and the
    incident context it reads; neither the store's other records nor its incident state
    machine, which a one-shot command never uses (a few ms of every tick)."""
    folder = tmp_path / "invariants"
    folder.mkdir()
    text = "-- description: nothing is ever wrong\nSELECT 1 AS k WHERE false\n"
    (folder / "always_holds.sql").write_text(text, encoding="utf-8")
    argv = ["check", "--invariants", str(folder), "--dsn", database, "--format", "json"]
    code, modules = imported_by(*argv, "--allow-privileged-role", cwd=tmp_path, whole=True)
    assert code == 0  # it ran and held: the routes were worked out
    assert {"alerts.routing", "monitor.store.context"} <= modules
    store = {"monitor.store.records", "monitor.store.incidents", "monitor.store.storage"}
    assert modules.isdisjoint(store), modules & store


def test_every_command_is_where_the_table_says_and_listed_with_its_own_words() -> None:
    loaded = {name: main.commands[name] for name in COMMANDS}
    assert sorted(loaded) == sorted(main.commands)
    for name, command in loaded.items():
        assert command.name == name
        assert not command.hidden and command.short_help is None
        for limit in (30, 45, 72, 200):
            assert click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit) == (
                command.get_short_help_str(limit)
            ), name


def test_help_lists_the_same_lines_lazily_as_with_every_command_imported() -> None:
    lazy = LazyGroup(name="invmon", commands=LazyCommands(COMMANDS), help=main.help)
    lazy.params = main.params
    eager = click.Group(name="invmon", commands=dict(main.commands.items()), help=main.help)
    eager.params = main.params
    for width in (60, 80, 120):
        shown = [
            made.get_help(click.Context(made, info_name="invmon", terminal_width=width))
            for made in (lazy, eager)
        ]
        assert shown[0] == shown[1]
    assert isinstance(lazy.commands, LazyCommands)
    assert all(lazy.commands.summary(n) is not None for n in COMMANDS)  # none imported


def test_an_unknown_command_is_still_refused_with_click_s_words() -> None:
    result = CliRunner().invoke(main, ["chekc"])
    assert result.exit_code == 2
    assert "No such command 'chekc'" in result.output


@pytest.mark.parametrize("name", ["lint", "store"])
def test_a_command_s_help_loads_it(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert COMMANDS[name][2] in " ".join(result.output.split())


GC_PROBE = """
import gc, json, sys
from monitor.cli.commands import main
found = {"before": [gc.isenabled(), gc.get_freeze_count()]}
main.commands["check"]
found["loaded"] = [gc.isenabled(), gc.get_freeze_count()]
try:
    from monitor.cli.commands import import_quietly
    import_quietly("monitor.cli.no_such_module")
except ModuleNotFoundError:
    found["failed"] = [gc.isenabled()]
print(json.dumps(found))
"""


def test_a_command_loads_with_the_collector_paused_then_frozen_and_running_again() -> None:
    """What it loaded is frozen (never walked by a full collection again), and collection
    is on afterwards, even when the import fails."""
    done = subprocess.run(
        [sys.executable, "-c", GC_PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    found = json.loads(done.stdout)
    assert found["before"] == [True, 0]
    assert found["loaded"][0] is True and found["loaded"][1] > 10_000, found
    assert found["failed"] == [True]


PLUGINS_PROBE = """
import json
from monitor.cli.commands import main
main.commands["check"]
import os
from pydantic.plugin import _loader
print(json.dumps([os.environ.get("PYDANTIC_DISABLE_PLUGINS"), _loader._plugins is None]))
"""


@pytest.mark.parametrize(("given", "kept"), [(None, "__all__"), ("some_plugin", "some_plugin")])
def test_a_command_loads_without_pydantic_scanning_for_plugins(
    given: str | None, kept: str
) -> None:
    """Loading `check` builds pydantic models; pydantic would scan every installed package's
    entry points for plugins first, unless told there are none. An operator's own setting
    is left as it is (a named plugin disabled: the scan then runs)."""
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if given is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = given
    done = subprocess.run(
        [sys.executable, "-c", PLUGINS_PROBE],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    )
    assert json.loads(done.stdout) == [kept, given is None]
