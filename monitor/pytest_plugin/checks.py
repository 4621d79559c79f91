"""The `invariants` fixture's object: the project's invariant files, evaluated against the
test's database by the same loader, fence, executor, timeouts and READ ONLY transaction as
`invmon check` and the daemon (monitor.execution.check), and asserted.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

from monitor.config import Config
from monitor.execution.check import run_loaded
from monitor.execution.execute import lock_bound
from monitor.execution.redaction import Redaction
from monitor.execution.results import RunResult
from monitor.execution.runner import missing_relation_hint
from monitor.invariants.loader import Invariant, LoadResult
from monitor.invariants.selection import NothingSelected, select
from monitor.pytest_plugin.verdicts import Case, Cut, Settling, cut_short, failure_text, not_holding

Selection = str | Sequence[str] | None
# The least time a poll of assert_hold_eventually is given, however close the deadline: the
# poll at the deadline is the last word, and needs time to say it. The wait ends within
# this of its timeout (and the database's connect timeout, were it not answering).
FINAL_POLL = 1.0


class InvariantsNotEvaluated(Exception):
    """Some invariant could not be evaluated (a database error, a fence refusal, a timeout):
    not a violation, and never a pass."""


@dataclass
class Project:
    """What the plugin read once per session: the config and the selected files, loaded,
    and how rows are masked: one key for the session, so that a value masked in one test's
    failure reads the same in the next."""

    config: Config
    directory: Path
    loaded: LoadResult
    redaction: Redaction


@dataclass
class InvariantChecks:
    """The selected invariants of `project`, run against `dsn`, for the test `case`."""

    project: Project
    # A secret: never in a repr, which pytest prints for a failing test's arguments (-l).
    dsn: str = field(repr=False)
    case: Case
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    # Everything evaluated through this object, in order: what a plugin hook or a test reads.
    history: list[list[RunResult]] = field(default_factory=list)

    def results(self, select: Selection = None) -> list[RunResult]:
        """Each selected invariant evaluated once, in file order; rows masked as the config's
        `redact:` says."""
        return self._evaluate(select, None)[0]

    def _evaluate(self, select: Selection, within: float | None) -> tuple[list[RunResult], Cut]:
        """`results`, and when `within` seconds are given, each query's statement and lock
        timeout cut to its share of them: the invariants run `concurrency` at a time, so
        each round of them gets `within` divided by the rounds (at least FINAL_POLL). A
        poll of `assert_hold_eventually` so ends near its deadline, not an invariant's
        whole `timeout:` past it. The Cut says which timeouts were cut."""
        # Every invariant runs on the test database, whichever target it names: a target's
        # own dsn is the deployment's database (a replica of production), never the test's.
        read = self.project.config
        targets = {n: t.model_copy(update={"dsn": self.dsn}) for n, t in read.targets.items()}
        config = read.model_copy(update={"dsn": self.dsn, "targets": targets})
        chosen = self.chosen(select)
        cut = Cut(frozenset(), False, 0.0)
        if within is not None and chosen:
            rounds = math.ceil(len(chosen) / config.concurrency)
            given = max(within / rounds, FINAL_POLL)
            share = timedelta(seconds=given)
            locks = min(config.database.lock_timeout, share)
            cut = Cut(
                frozenset(i.name for i in chosen if i.timeout > share),
                # A run's lock timeout is also a share of its statement's (lock_bound): cut
                # when the deadline's share lowers it below what the run would have had.
                any(
                    lock_bound(min(i.timeout, share), locks)
                    < lock_bound(i.timeout, config.database.lock_timeout)
                    for i in chosen
                ),
                given,
            )
            chosen = [replace(i, timeout=min(i.timeout, share)) for i in chosen]
            database = config.database.model_copy(update={"lock_timeout": locks})
            config = config.model_copy(update={"database": database})
        loaded = LoadResult(chosen, [])
        # The test's database is its own (often its owner's role): the READ ONLY transaction
        # and the fence stand, the deployment's role check does not.
        found = run_loaded(
            config,
            loaded,
            self.project.directory,
            allow_privileged_role=True,
            redaction=self.project.redaction,
        )
        results = [_in_the_test_database(r) for r in found.results]
        self.history.append(results)
        return results, cut

    def assert_hold(self, select: Selection = None) -> None:
        """Every selected invariant returns zero rows; else one failure naming each that does
        not, its exact count and its first rows."""
        __tracebackhide__ = True  # the failure is the message, not the plugin's frames
        results = self.results(select)
        _raise_unless_held(results, self.case)

    def assert_hold_eventually(
        self,
        timeout: float = 10.0,
        poll: float = 0.25,
        quiet: float = 1.0,
        select: Selection = None,
        watch: Callable[[], object] | None = None,
    ) -> None:
        """For side effects that land asynchronously: poll until the system has settled (the
        invariants held on every poll for `quiet` seconds while `watch()`, a value that
        changes while work is still landing, stayed the same), then accept. A violation or
        an error fails at once; an unsettled system fails at the deadline with the last
        result (verdicts.py says why)."""
        __tracebackhide__ = True
        if poll <= 0:
            raise ValueError("poll must be positive")
        state = Settling.start(self.monotonic(), timeout, quiet)
        while True:
            activity = _copied(watch()) if watch is not None else None
            results, cuts = self._evaluate(select, state.deadline - self.monotonic())
            state, outcome = state.step(self.monotonic(), results, activity)
            if outcome == "holds":
                return
            cut = cut_short(results, cuts)
            if outcome == "error" and cut is not None:
                # Not an invariant that cannot be evaluated: the time left ran out under it.
                why = (
                    f"the system did not settle within {timeout:g} s: poll {state.polls} was "
                    "still running at the deadline"
                )
                raise AssertionError(failure_text(cut, self.case, why))
            if outcome in ("violated", "error"):
                _raise_unless_held(results, self.case, f"seen on poll {state.polls}")
            if outcome == "unsettled":
                why = state.unsettled_reason(timeout, watch is not None)
                raise AssertionError(failure_text(results, self.case, why))
            # Never past the deadline: the last poll is at it, so its result is the last word.
            self.sleep(max(0.0, min(poll, state.deadline - self.monotonic())))

    def chosen(self, chosen: Selection) -> list[Invariant]:
        """The invariants `chosen` selects (all for None); ValueError naming a selector that
        matches none, in the words of a test's `select=`."""
        invariants = self.project.loaded.invariants
        if chosen is None:
            return list(invariants)
        selectors = [chosen] if isinstance(chosen, str) else list(chosen)
        if not any(selectors):
            # As the marker says it (verdicts.marker_options): an empty selection, often a
            # list computed empty, would check every invariant while meaning none.
            raise ValueError("select= is empty; leave it out to check every invariant")
        try:
            return select(invariants, selectors, self.project.directory)
        except NothingSelected as exc:
            # The loader says it of the command line's flag; here it was `select=`.
            raise ValueError(str(exc).replace("--select ", "select=", 1)) from None


# Where a relation missing from the test database is looked for, instead of the runner's
# hint (a target's dsn, which a soak never uses).
TEST_DATABASE_HINT = (
    "not in the test database, where every target's invariants run; select this target's "
    "invariants only in tests whose database has its tables (select=, --invmon-select), or "
    "check the test database's schema is migrated"
)


def _in_the_test_database(result: RunResult) -> RunResult:
    """`result`, with the runner's hint for a missing relation said of the test database."""
    hint = missing_relation_hint(result.target)
    if result.error is None or not result.error.endswith(f": {hint}"):
        return result
    return replace(result, error=result.error[: -len(hint)] + TEST_DATABASE_HINT)


def _copied(activity: object) -> object:
    """`watch()`'s value as it is now (a list the application keeps appending to is the
    same object at every poll, and would never compare as changed); a value that cannot be
    copied (a queue, a lock) is refused saying what to watch instead."""
    try:
        return copy.deepcopy(activity)
    except (TypeError, copy.Error, RecursionError) as exc:
        raise ValueError(
            f"watch= returned a {type(activity).__name__}, which cannot be copied to compare "
            f"between polls ({exc}); return a plain value that changes while work lands, "
            "such as a queue's qsize() or a row count"
        ) from None


def _raise_unless_held(results: Sequence[RunResult], case: Case, why: str | None = None) -> None:
    __tracebackhide__ = True
    bad = not_holding(results)
    if not bad:
        return
    text = failure_text(results, case, why)
    if any(r.status == "violated" for r in bad):
        raise AssertionError(text)
    raise InvariantsNotEvaluated(text)
