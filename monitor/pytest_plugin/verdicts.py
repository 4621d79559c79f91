"""What the pytest plugin decides from a set of results: the failure message, and whether a
wait for an asynchronous system is over. Pure: no database, no clock (times are passed in),
no pytest.

The wait (`Settling`) follows one rule set, in this order, on every poll:

1. a violation fails at once: an invariant is a property of every committed snapshot, so
   offending rows are data the system wrote (a refund settled twice does not un-settle);
2. an invariant that could not be evaluated fails at once: an error is not a pass, and
   waiting does not make a refused or broken query run;
3. holding is accepted only once the system has settled: the invariants held on every poll
   of a quiet window, during which the watched activity (if any) did not change;
4. at the deadline, a system that never settled fails with the last result.

An invariant that must tolerate work in flight says so in its own SQL (a cutoff, a lease),
so it means the same in a soak as in production.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from monitor.cli.render import results_table
from monitor.execution.results import RunResult
from monitor.text import counted, printable, shorten

# The test database's ways in, for the hint on a database that does not answer.
DSN_SOURCES = "--invmon-dsn, INVMON_DSN, the `invmon_dsn` fixture, or `dsn:` in invmon.yaml"

SAMPLE_ROWS = 5  # rows of each violated invariant shown in a failure


@dataclass(frozen=True)
class Case:
    """The test a result belongs to: its node id and, when it is parametrized by one, its
    seed, so a failure says how to replay exactly this case."""

    nodeid: str
    seed: object | None = None
    has_seed: bool = False
    # The id as typed from where pytest was started (a nodeid is from the rootdir).
    rerun_id: str | None = None
    # The session's own --invmon-* options, which the case needs to run the same way.
    rerun_options: tuple[str, ...] = ()

    def rerun(self) -> str:
        # Quoted for the shell, then made inert for the terminal: an id holding an escape
        # sequence (parametrized from data) is shown escaped, not obeyed.
        words = [*self.rerun_options, self.rerun_id or self.nodeid]
        return printable(f"python -m pytest {shlex.join(words)}")

    def heading(self) -> str:
        seed = f" (seed {shorten(self.seed, 60)})" if self.has_seed else ""
        return f"{printable(self.nodeid)}{seed}"


def not_holding(results: Sequence[RunResult]) -> list[RunResult]:
    return [r for r in results if r.status != "ok"]


def failure_text(results: Sequence[RunResult], case: Case, why: str | None = None) -> str:
    """Every result (which held, which did not, with exact counts), the first rows of each
    violated invariant as masked by the run, any error as the database said it, and the
    command that reruns this case alone."""
    bad = not_holding(results)
    violated = [r for r in bad if r.status == "violated"]
    errored = [r for r in bad if r.status != "violated"]
    parts = []
    if violated:
        parts.append(f"{counted(len(violated), 'invariant')} violated")
    if errored:
        parts.append(f"{counted(len(errored), 'invariant')} could not be evaluated")
    headline = " and ".join(parts) or "the invariants did not settle"
    lines = [f"{headline} after {case.heading()}"]
    if why:
        lines.append(why)
    lines += ["", results_table(results, SAMPLE_ROWS, DSN_SOURCES), ""]
    if case.has_seed:
        lines.append(f"seed: {shorten(case.seed, 60)}")
    lines.append(f"rerun this case alone: {case.rerun()}")
    return "\n".join(lines)


@dataclass(frozen=True)
class MarkerOptions:
    """What `@pytest.mark.invariants(…)` asks for, checked before the test runs."""

    select: tuple[str, ...] | None = None
    eventually: bool = False
    timeout: float = 10.0
    poll: float = 0.25
    quiet: float = 1.0


def marker_options(args: Sequence[object], kwargs: Mapping[str, object]) -> MarkerOptions:
    """The marker's arguments (a selector may also come first, unnamed), or ValueError
    saying which one is wrong and what it takes."""
    known = {"select", "eventually", "timeout", "poll", "quiet"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ValueError(
            f"@pytest.mark.invariants takes no {', '.join(unknown)} "
            f"(it takes {', '.join(sorted(known))})"
        )
    if len(args) > 1 or (args and "select" in kwargs):
        raise ValueError("@pytest.mark.invariants takes one selection: select=… or one argument")
    chosen = args[0] if args else kwargs.get("select")
    select: tuple[str, ...] | None = None
    if isinstance(chosen, str):
        select = (chosen,)
    elif isinstance(chosen, (list, tuple)) and all(isinstance(c, str) for c in chosen):
        select = tuple(chosen)
    elif chosen is not None:
        raise ValueError("@pytest.mark.invariants: select is a selector or a list of them")
    if select is not None and not any(select):
        # An empty selection ran every invariant: leave select out to mean all of them.
        raise ValueError("@pytest.mark.invariants: select is empty; leave it out for all")
    numbers = {}
    for name in ("timeout", "poll", "quiet"):
        value = kwargs.get(name, getattr(MarkerOptions, name))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"@pytest.mark.invariants: {name} is a number of seconds")
        numbers[name] = float(value)
    eventually = kwargs.get("eventually", False)
    if not isinstance(eventually, bool):
        raise ValueError("@pytest.mark.invariants: eventually is True or False")
    waits = sorted({"timeout", "poll", "quiet"} & set(kwargs))
    if waits and not eventually:
        # They bound the wait for a system to settle; without it they were ignored unsaid.
        raise ValueError(
            f"@pytest.mark.invariants: {' and '.join(waits)} "
            f"{'applies' if len(waits) == 1 else 'apply'} to eventually=True only"
        )
    options = MarkerOptions(select, eventually, **numbers)
    if eventually:
        Settling.start(0.0, options.timeout, options.quiet)  # the same refusals as the call
        if options.poll <= 0:
            raise ValueError("@pytest.mark.invariants: poll must be positive")
    return options


Outcome = Literal["wait", "holds", "violated", "error", "unsettled"]


@dataclass(frozen=True)
class Settling:
    """The state of one `assert_hold_eventually`: times are the caller's monotonic seconds."""

    deadline: float
    quiet: float  # seconds of holding, with the watched activity unchanged, that settle it
    quiet_since: float | None = None  # when the current run of holding polls began
    activity: object = None  # the watched value at the last poll
    polls: int = 0
    changes: int = 0  # times the watched activity changed while the invariants held

    @classmethod
    def start(cls, now: float, timeout: float, quiet: float) -> Settling:
        if timeout <= 0 or quiet < 0:
            raise ValueError("timeout must be positive and quiet not negative")
        if quiet >= timeout:
            # The window starts at the first poll's result, which itself takes time: a window
            # as long as the timeout cannot end before the deadline.
            raise ValueError(
                f"the quiet window ({quiet:g} s) is not shorter than the timeout "
                f"({timeout:g} s): the wait could never settle; give the timeout room for "
                "the polls as well"
            )
        return cls(deadline=now + timeout, quiet=quiet)

    def step(
        self, now: float, results: Sequence[RunResult], activity: object = None
    ) -> tuple[Settling, Outcome]:
        """The state after one poll's results, and what the poll decided."""
        polled = replace(self, polls=self.polls + 1)
        if any(r.status == "violated" for r in results):
            return polled, "violated"
        if not_holding(results):
            return polled, "error"
        if polled.quiet_since is None or activity != self.activity:
            changed = self.quiet_since is not None
            polled = replace(
                polled,
                quiet_since=now,
                activity=activity,
                changes=self.changes + changed,
            )
        if now - (polled.quiet_since or now) >= self.quiet:
            return polled, "holds"
        if now >= self.deadline:
            return polled, "unsettled"
        return polled, "wait"

    def unsettled_reason(self, timeout: float, watching: bool) -> str:
        if self.quiet_since is not None and self.changes == 0:
            # Every poll held and nothing moved: the window was cut by the deadline, not by
            # the system (a first poll slow to come back, a timeout close to the window).
            held = max(0.0, self.deadline - self.quiet_since)
            return (
                f"the system did not settle within {timeout:g} s: the invariants held on every "
                f"poll{', and the watched activity did not change' if watching else ''}, but "
                f"only for {held:.1f} s before the deadline, short of the {self.quiet:g} s "
                "quiet window; give the timeout more room than the window"
            )
        if watching:
            return (
                f"the system did not settle within {timeout:g} s: the invariants held, but the "
                f"watched activity changed {counted(self.changes, 'time')} and never stayed "
                f"the same for the {self.quiet:g} s quiet window"
            )
        return (
            f"the system did not settle within {timeout:g} s: the invariants did not hold "
            f"through a {self.quiet:g} s quiet window before the deadline"
        )


@dataclass(frozen=True)
class Cut:
    """Which timeouts a poll near its deadline cut to its share of the time left."""

    statements: frozenset[str]  # the invariants whose own timeout was longer than `given`
    locks: bool  # whether the lock timeout was longer than `given`
    given: float  # the seconds each query was given


def cut_short(results: Sequence[RunResult], cut: Cut) -> list[RunResult] | None:
    """When every invariant that could not be evaluated ran out of a timeout the deadline
    had cut (PostgreSQL's "canceling statement due to statement timeout" for one whose own
    timeout was cut, "… due to lock timeout" when the lock timeout was), the results with
    that said of each, in place of the hint meant for a timeout that was its own; else
    None: an error the deadline did not cause is said as it is. Pure."""

    def deadlines(r: RunResult) -> bool:
        error = r.error or ""
        return ("due to statement timeout" in error and r.invariant in cut.statements) or (
            "due to lock timeout" in error and cut.locks
        )

    failed = [r for r in results if r.status == "error"]
    if not failed or not all(deadlines(r) for r in failed):
        return None
    said = f"still running at the deadline (its query was given {cut.given:.1f} s of the time left)"
    return [replace(r, error=said) if r.status == "error" else r for r in results]
