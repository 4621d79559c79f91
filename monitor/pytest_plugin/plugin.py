"""The pytest plugin (entry point `pytest11: invmon`): the project's invariant files asserted
inside the application's own tests, after a concurrency soak or any test that writes.

- `invariants`: a fixture with `assert_hold()`, `results()` and `assert_hold_eventually()`
  (monitor/pytest_plugin/checks.py);
- `@pytest.mark.invariants(select=…, eventually=…)`: the same check after the test body;
- `invmon_dsn`: the test database, from `--invmon-dsn`, `INVMON_DSN` or the config's `dsn`;
  an application's conftest overrides it to return its own (per-test) database.

Everything heavy (the config, the loader, the fence, psycopg) is imported when a test first
asks for invariants, so a suite that never does pays nothing for the plugin being installed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from monitor.pytest_plugin.checks import InvariantChecks, Project
    from monitor.pytest_plugin.verdicts import Case, MarkerOptions

MARKER = "invariants"
_CHECKS = pytest.StashKey["InvariantChecks"]()
_OPTIONS = pytest.StashKey["MarkerOptions"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("invmon", "invariants (invmon)")
    group.addoption(
        "--invmon-invariants",
        metavar="DIR",
        help="the folder of invariant files (default: ini invmon_invariants, else the "
        "config's `invariants:`)",
    )
    group.addoption(
        "--invmon-config",
        metavar="FILE",
        help="invmon.yaml to read (default: ini invmon_config, else invmon.yaml in the rootdir "
        "if there is one)",
    )
    group.addoption(
        "--invmon-select",
        action="append",
        default=[],
        metavar="SELECTOR",
        help="only these invariants, as `invmon check --select` takes them (repeatable)",
    )
    group.addoption(
        "--invmon-dsn",
        metavar="DSN",
        help="the test database the invariants run against (default: INVMON_DSN, else the "
        "config's dsn); a conftest can override the `invmon_dsn` fixture instead",
    )
    parser.addini("invmon_invariants", "the folder of invariant files, from the rootdir")
    parser.addini("invmon_config", "invmon.yaml to read, from the rootdir")
    parser.addini("invmon_select", "invariants to assert (selectors)", type="linelist")
    parser.addini(
        "invmon_seed_param",
        "the name of the parameter that seeds a parametrized test",
        default="seed",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(select=None, eventually=False, timeout=10, poll=0.25, quiet=1): after the "
        "test body, assert that the selected invariants return no rows (invmon)",
    )


@pytest.fixture(scope="session")
def invmon_project(pytestconfig: pytest.Config) -> Project:
    """The config and the selected invariant files, read and fenced once per session. A file
    that does not load (refused by the fence, a bad header) fails every test that asks for
    invariants, at its setup: an error, never a pass."""
    from monitor.pytest_plugin.project import ProjectError, read_project

    try:
        return read_project(
            rootdir=Path(pytestconfig.rootpath),
            config_file=_option(pytestconfig, "--invmon-config", "invmon_config"),
            invariants=_option(pytestconfig, "--invmon-invariants", "invmon_invariants"),
            selectors=pytestconfig.getoption("--invmon-select")
            or pytestconfig.getini("invmon_select"),
        )
    except ProjectError as exc:
        message = str(exc)
    # Outside the except: failing inside it chains the two, and pytest printed the message
    # twice ("During handling of the above exception…").
    pytest.fail(message, pytrace=False)


@pytest.fixture
def invmon_dsn(pytestconfig: pytest.Config, invmon_project: Project) -> str:
    """The database the invariants run against. Override it in a conftest.py to return the
    application's own test database (a per-test one is fine: it is asked for each test)."""
    from monitor.config.values import check_dsn

    given = pytestconfig.getoption("--invmon-dsn") or os.environ.get("INVMON_DSN")
    dsn = given or invmon_project.config.dsn
    if not dsn:
        pytest.fail(
            "invmon: no test database for the invariants: pass --invmon-dsn, set INVMON_DSN, "
            "set dsn in invmon.yaml, or override the `invmon_dsn` fixture in conftest.py",
            pytrace=False,
        )
    try:
        check_dsn(dsn)
    except ValueError as exc:
        pytest.fail(f"invmon: the test database's DSN {exc}", pytrace=False)
    return dsn


@pytest.fixture
def invariants(
    request: pytest.FixtureRequest, invmon_project: Project, invmon_dsn: str
) -> InvariantChecks:
    """The project's invariants against this test's database: `assert_hold()`, `results()`
    and `assert_hold_eventually()`."""
    from monitor.pytest_plugin.checks import InvariantChecks

    return InvariantChecks(invmon_project, invmon_dsn, _case(request))


@pytest.fixture(autouse=True)
def _invmon_marked(request: pytest.FixtureRequest) -> None:
    """A test marked `invariants` gets the fixture even without naming it, so the check after
    its body (pytest_runtest_call below) has it."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        return
    from monitor.pytest_plugin.verdicts import marker_options

    try:
        options = marker_options(marker.args, marker.kwargs)
    except ValueError as exc:
        pytest.fail(f"invmon: {exc}", pytrace=False)
    checks: InvariantChecks = request.getfixturevalue("invariants")
    try:
        checks.chosen(options.select)  # a selector that matches nothing: said before the body
    except ValueError as exc:
        pytest.fail(f"invmon: the marker's {exc}", pytrace=False)
    request.node.stash[_OPTIONS] = options
    request.node.stash[_CHECKS] = checks


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    # After the body and inside the call phase: a violation fails the test itself (not its
    # teardown), and a body that already failed is reported as it failed, alone.
    __tracebackhide__ = True
    outcome = yield
    checks = item.stash.get(_CHECKS, None)
    options = item.stash.get(_OPTIONS, None)
    if checks is not None and options is not None:
        _check_marked(checks, options)
    return outcome


def _check_marked(checks: InvariantChecks, options: MarkerOptions) -> None:
    __tracebackhide__ = True
    if options.eventually:
        checks.assert_hold_eventually(
            timeout=options.timeout, poll=options.poll, quiet=options.quiet, select=options.select
        )
    else:
        checks.assert_hold(select=options.select)


def _option(config: pytest.Config, flag: str, ini: str) -> Path | None:
    """A path from the command line (from the working directory) or the ini (from the
    rootdir); None when neither says."""
    given = config.getoption(flag)
    if given:
        return Path(config.invocation_params.dir) / str(given)
    from_ini = config.getini(ini)
    return Path(config.rootpath) / str(from_ini) if from_ini else None


def _case(request: pytest.FixtureRequest) -> Case:
    from monitor.pytest_plugin.verdicts import Case

    node = request.node
    name = str(request.config.getini("invmon_seed_param"))
    params = getattr(getattr(node, "callspec", None), "params", {})
    # The rerun command is typed where pytest was started, which need not be the rootdir
    # (`pytest examples/soak` from the repository's root): the file as seen from there.
    _, sep, inside = node.nodeid.partition("::")
    try:
        where = Path(node.path).relative_to(request.config.invocation_params.dir).as_posix()
    except ValueError:
        where = str(node.path)
    rerun_id = where + sep + inside
    options = _rerun_options(request.config)
    if name in params:
        return Case(node.nodeid, params[name], True, rerun_id, options)
    return Case(node.nodeid, rerun_id=rerun_id, rerun_options=options)


def _overrides(args: Sequence[str]) -> Iterator[str]:
    """The ini values the session overrode on its command line (`-o key=value`, in any of
    its spellings), as `-o key=value` each: an ini key such as invmon_invariants changes
    which files are asserted, so the rerun must say it too."""
    taken = iter(args)
    for arg in taken:
        if arg in ("-o", "--override-ini"):
            value = next(taken, None)
        elif arg.startswith("--override-ini="):
            value = arg.removeprefix("--override-ini=")
        elif arg.startswith("-o") and len(arg) > 2:
            value = arg[2:]
        else:
            continue
        if value is not None:
            yield from ("-o", value)


def _rerun_options(config: pytest.Config) -> tuple[str, ...]:
    """The session's --invmon-* options and ini overrides, so the rerun finds the same files
    (ini keys in the ini file the rerun reads again). A DSN can hold a password: it is
    named, not printed."""
    words: list[str] = list(_overrides(config.invocation_params.args))
    for flag in ("--invmon-invariants", "--invmon-config"):
        if given := config.getoption(flag):
            words += [flag, str(given)]
    for selector in config.getoption("--invmon-select") or []:
        words += ["--invmon-select", str(selector)]
    if config.getoption("--invmon-dsn"):
        words += ["--invmon-dsn", "<the same DSN>"]
    return tuple(words)
