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
import re
import warnings
from collections import Counter
from collections.abc import Iterator
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


class Dsn(str):
    """The test database's DSN, as a str whose repr masks its password: pytest prints a
    fixture's value wherever it shows a frame's locals (`-l`, `--full-trace`), and a test of
    the application's may take `invmon_dsn` itself."""

    __slots__ = ()

    def __repr__(self) -> str:
        from monitor.logs import redact

        return repr(redact(str(self)))


@pytest.fixture
def invmon_dsn(pytestconfig: pytest.Config, invmon_project: Project) -> str:
    """The database the invariants run against. Override it in a conftest.py to return the
    application's own test database (a per-test one is fine: it is asked for each test)."""
    from monitor.config.values import check_dsn

    given = pytestconfig.getoption("--invmon-dsn") or os.environ.get("INVMON_DSN")
    dsn = given or invmon_project.config.default_dsn()
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
    return Dsn(dsn)


@pytest.fixture
def invariants(
    request: pytest.FixtureRequest, invmon_project: Project, invmon_dsn: str
) -> InvariantChecks:
    """The project's invariants against this test's database: `assert_hold()`, `results()`
    and `assert_hold_eventually()`."""
    # This frame holds the DSN as an argument, which pytest prints for an error raised
    # through it (-l, or a warning made an error by `filterwarnings = error`); hidden, and
    # nothing is raised here but through a frame that holds no secret.
    __tracebackhide__ = True
    from monitor.pytest_plugin.checks import InvariantChecks

    flag = request.config.getoption("--invmon-dsn")
    if flag and flag != invmon_dsn:
        _flag_not_used()
    return InvariantChecks(invmon_project, invmon_dsn, _case(request, invmon_dsn))


def _flag_not_used() -> None:
    """A conftest's own `invmon_dsn` wins; the flag would otherwise be ignored unsaid."""
    warnings.warn(
        pytest.PytestWarning(
            "invmon: --invmon-dsn is not used: this project's invmon_dsn fixture "
            "returns another database, which wins"
        ),
        stacklevel=1,
    )


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


def _case(request: pytest.FixtureRequest, dsn_used: str) -> Case:
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
    options = _rerun_options(request.config, dsn_used)
    if name in params:
        return Case(node.nodeid, params[name], True, rerun_id, options)
    return Case(node.nodeid, rerun_id=rerun_id, rerun_options=options)


# Where this run writes its own files: the rerun writes its own, or none.
_RUN_FILES = ("--basetemp", "--junitxml", "--junit-xml")
# A word that holds a password: a URL with one (`scheme://user:password@host`), or a
# connection string's `password=`.
_PASSWORD = re.compile(r"://[^/@\s]*:[^/@\s]*@|password\s*=", re.IGNORECASE)
# An option whose value is a secret by its name (--db-password, --api-token, --stripe-key).
_SECRET_OPTION = re.compile(
    r"^--?[\w-]*(pass|secret|token|key|credential|auth|cookie|session|dsn)[\w-]*$",
    re.IGNORECASE,
)
HIDDEN = "<hidden: it holds a password>"


def _rerun_options(config: pytest.Config, dsn_used: str) -> tuple[str, ...]:
    """The session's command line as it was typed, less its test paths (the case's id takes
    their place) and where it wrote its files: an application's own options (its seed
    count, another ini file with -c) shape the case as much as invmon's do, and a rerun
    that dropped them passed. `--invmon-dsn` is named, never printed, and only when it is
    the database the case used (a conftest's `invmon_dsn` wins over it); any other word
    holding a password is hidden (so is the value of an option named for a secret), and
    that line is then not a copy to run as is."""
    # Test paths the command line gave; none when they came from the ini's testpaths or the
    # folder (an option's value equal to one of those was taken for it: `-m soak`).
    given_paths = config.args_source == pytest.Config.ArgsSource.ARGS
    positional = Counter(str(arg) for arg in config.args) if given_paths else Counter[str]()
    kept: list[str] = []
    for arg in reversed(config.invocation_params.args):  # test paths come last, as a rule
        if positional[arg] > 0:
            positional[arg] -= 1
        else:
            kept.append(arg)
    words: list[str] = []
    given = iter(reversed(kept))
    for word in given:
        name, eq, value = word.partition("=")
        if name in _RUN_FILES:
            if not eq:
                next(given, None)  # its value, the next word
        elif name == "--invmon-dsn":
            if (value if eq else next(given, "")) == dsn_used:
                words += ["--invmon-dsn", "<the same DSN>"]
        elif _SECRET_OPTION.match(name):
            words.append(f"{name}={HIDDEN}" if eq else name)
            if not eq:
                following = next(given, None)
                if following is not None:  # its value, unless it is the next option
                    words.append(following if following.startswith("-") else HIDDEN)
        else:
            words.append(HIDDEN if _PASSWORD.search(word) else word)
    return tuple(words)
