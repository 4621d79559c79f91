"""The plugin's pure decisions: when a wait for an asynchronous system is over, and what its
failure says. Times are given, so no test waits."""

from __future__ import annotations

import re

import pytest

from monitor.execution.results import RunResult
from monitor.pytest_plugin.verdicts import (
    Case,
    Cut,
    MarkerOptions,
    Settling,
    cut_short,
    failure_text,
    marker_options,
)

HOLDS = [RunResult.counted("a", 0, [], []), RunResult.counted("b", 0, [], [])]
VIOLATED = [RunResult.counted("a", 0, [], []), RunResult.counted("b", 2, ["id"], [{"id": 1}])]
ERRORED = [RunResult.counted("a", 0, [], []), RunResult.failed("b", "canceling statement")]


def test_it_fails_at_once_on_a_violation_or_an_error() -> None:
    state = Settling.start(now=0.0, timeout=10.0, quiet=1.0)
    assert state.step(0.0, VIOLATED)[1] == "violated"
    assert state.step(0.0, ERRORED)[1] == "error"
    # Even after holding for a while: a late violation is one.
    state, outcome = state.step(0.0, HOLDS)
    assert outcome == "wait"
    assert state.step(0.5, VIOLATED)[1] == "violated"


def test_it_accepts_holding_only_after_a_quiet_window() -> None:
    state = Settling.start(now=100.0, timeout=10.0, quiet=1.0)
    outcomes = []
    for now in (100.0, 100.4, 100.8, 101.0):
        state, outcome = state.step(now, HOLDS)
        outcomes.append(outcome)
    assert outcomes == ["wait", "wait", "wait", "holds"]
    assert state.polls == 4


def test_a_change_in_the_watched_activity_restarts_the_window() -> None:
    state = Settling.start(now=0.0, timeout=10.0, quiet=1.0)
    seen = []
    for now, activity in ((0.0, 1), (0.9, 2), (1.5, 2), (1.9, 2), (2.0, 2)):
        state, outcome = state.step(now, HOLDS, activity)
        seen.append(outcome)
    assert seen == ["wait", "wait", "wait", "wait", "holds"]
    assert state.changes == 1


def test_a_system_that_never_settles_fails_at_the_deadline() -> None:
    state = Settling.start(now=0.0, timeout=2.0, quiet=1.0)
    outcome = "wait"
    now, activity = 0.0, 0
    while outcome == "wait":
        state, outcome = state.step(now, HOLDS, activity)
        now, activity = now + 0.5, activity + 1
    assert (outcome, state.polls, state.changes) == ("unsettled", 5, 4)
    assert state.unsettled_reason(2.0, watching=True) == (
        "the system did not settle within 2 s: the invariants held, but the watched activity "
        "changed 4 times and never stayed the same for the 1 s quiet window"
    )


def test_a_window_longer_than_the_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="could never settle"):
        Settling.start(now=0.0, timeout=1.0, quiet=2.0)
    # As long as the timeout: the window starts at the first poll's result, so it was
    # accepted and then failed at random, saying the invariants had not held.
    with pytest.raises(ValueError, match="is not shorter than the timeout"):
        Settling.start(now=0.0, timeout=1.0, quiet=1.0)


def test_a_window_the_deadline_cut_says_the_invariants_held() -> None:
    """Every poll held and nothing moved, but the first poll came back late: the failure says
    so, rather than that the invariants did not hold or the activity never stayed still."""
    for watching in (False, True):
        state = Settling.start(now=0.0, timeout=1.5, quiet=1.0)
        outcome = "wait"
        for now in (0.8, 1.2, 1.5):  # a slow first poll
            state, outcome = state.step(now, HOLDS, 42 if watching else None)
        assert (outcome, state.changes) == ("unsettled", 0)
        moved = ", and the watched activity did not change" if watching else ""
        assert state.unsettled_reason(1.5, watching) == (
            f"the system did not settle within 1.5 s: the invariants held on every poll{moved}, "
            "but only for 0.7 s before the deadline, short of the 1 s quiet window; give the "
            "timeout more room than the window"
        )


def test_the_rerun_command_carries_the_session_s_options_but_never_a_dsn() -> None:
    case = Case(
        "t.py::test[2]",
        2,
        True,
        "t.py::test[2]",
        ("--invmon-invariants", "checks", "--invmon-dsn", "<the same DSN>"),
    )
    assert case.rerun() == (
        "python -m pytest --invmon-invariants checks --invmon-dsn '<the same DSN>' 't.py::test[2]'"
    )


def test_a_failure_names_the_seed_and_the_command_that_reruns_the_case() -> None:
    case = Case("tests/test_soak.py::test_refunds[check_then_create-17]", 17, has_seed=True)
    text = failure_text(VIOLATED, case)
    lines = text.splitlines()
    assert lines[0] == (
        "1 invariant violated after tests/test_soak.py::test_refunds[check_then_create-17] "
        "(seed 17)"
    )
    assert lines[-2:] == [
        "seed: 17",
        "rerun this case alone: python -m pytest "
        "'tests/test_soak.py::test_refunds[check_then_create-17]'",
    ]
    assert "b: 2 offending rows" in text
    assert "1 held, 1 violated, 0 could not be evaluated" in text


def test_a_hostile_node_id_is_quoted_for_the_shell_and_printed_inert() -> None:
    case = Case("t.py::test[a'; rm -rf ~ #\x1b[2J]", "x\ny", has_seed=True)
    text = failure_text(ERRORED, case)
    assert "python -m pytest 't.py::test[a'\"'\"'; rm -rf ~ #\\x1b[2J]'" in text
    assert text.splitlines()[0] == (
        "1 invariant could not be evaluated after t.py::test[a'; rm -rf ~ #\\x1b[2J] (seed 'x\\ny')"
    )


def test_the_marker_takes_a_selection_and_the_waits_numbers() -> None:
    assert marker_options((), {}) == MarkerOptions()
    assert marker_options(("tag:money",), {}).select == ("tag:money",)
    assert marker_options((), {"select": ["a", "b/"]}).select == ("a", "b/")
    waits = marker_options((), {"eventually": True, "timeout": 5, "poll": 0.1, "quiet": 2})
    assert waits == MarkerOptions(None, True, 5.0, 0.1, 2.0)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {"selct": "a"}, "takes no selct (it takes eventually, poll, quiet, select, timeout)"),
        (("a", "b"), {}, "takes one selection"),
        (("a",), {"select": "b"}, "takes one selection"),
        ((), {"select": 3}, "select is a selector or a list of them"),
        ((), {"select": ["a", None]}, "select is a selector or a list of them"),
        ((), {"timeout": "10s"}, "timeout is a number of seconds"),
        ((), {"quiet": -1}, "quiet is a number of seconds"),
        ((), {"poll": True}, "poll is a number of seconds"),
        ((), {"eventually": "yes"}, "eventually is True or False"),
        ((), {"eventually": True, "timeout": 1, "quiet": 5}, "could never settle"),
        ((), {"eventually": True, "poll": 0}, "poll must be positive"),
        # Ignored before: the query ran its header's timeout, and every invariant ran.
        ((), {"timeout": 1}, "timeout applies to eventually=True only"),
        ((), {"poll": 1, "quiet": 2}, "poll and quiet apply to eventually=True only"),
        ((), {"select": []}, "select is empty; leave it out for all"),
        (("",), {}, "select is empty; leave it out for all"),
    ],
)
def test_a_marker_it_cannot_follow_is_refused_saying_why(
    args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        marker_options(args, kwargs)


def test_a_query_the_deadline_cut_is_told_from_one_that_cannot_run() -> None:
    timed_out = "canceling statement due to statement timeout: the query ran past its timeout"
    locked = "canceling statement due to lock timeout"
    cut = [RunResult.counted("a", 0, [], []), RunResult.failed("b", timed_out)]
    said = "still running at the deadline (its query was given 1.5 s of the time left)"
    b_cut = Cut(frozenset({"b"}), False, 1.5)
    assert cut_short(cut, b_cut) == [cut[0], RunResult.failed("b", said)]
    locks_cut = Cut(frozenset(), True, 1.5)
    assert cut_short([RunResult.failed("b", locked)], locks_cut) == [RunResult.failed("b", said)]
    # Its own timeout or the lock timeout, not cut, ended it: what it says stands.
    assert cut_short(cut, Cut(frozenset({"a"}), True, 1.5)) is None
    assert cut_short([RunResult.failed("b", locked)], b_cut) is None
    # Another error: so does it.
    assert cut_short([RunResult.failed("b", 'relation "x" does not exist')], b_cut) is None
    assert cut_short([*cut, RunResult.failed("c", "syntax error")], b_cut) is None
    assert cut_short(HOLDS, Cut(frozenset({"a", "b"}), True, 1.5)) is None


def test_a_database_that_does_not_answer_is_hinted_with_the_session_s_ways_in() -> None:
    """The hint named `--dsn` and invmon.yaml, the command line's: a test's database comes
    from --invmon-dsn, INVMON_DSN, the `invmon_dsn` fixture or the config's dsn."""
    down = [RunResult.failed(n, "cannot connect: connection refused") for n in ("a", "b")]
    text = failure_text(down, Case("tests/test_soak.py::test_refunds"))
    assert (
        "the database: cannot connect, so 2 invariants could not be evaluated (check the DSN: "
        "--invmon-dsn, INVMON_DSN, the `invmon_dsn` fixture, or `dsn:` in invmon.yaml):"
    ) in text
    assert "--dsn," not in text.replace("--invmon-dsn,", "")
