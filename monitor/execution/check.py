"""One evaluation of every invariant: what `invmon check` and `invmon demo` do."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from monitor.config import Config, Target
from monitor.execution.redaction import NO_REDACTION, Redaction
from monitor.execution.results import RunResult
from monitor.execution.runner import Runner, describe_error, interrupt_all
from monitor.fence.role_check import REFUSED, read_role, verdict
from monitor.invariants.loader import Invariant, LoadResult, load_directory, name_for
from monitor.invariants.selection import select_loaded
from monitor.problems import Problem


@dataclass
class CheckOutcome:
    results: list[RunResult]
    invariants: list[Invariant]
    problems: list[Problem]

    def counts_only(self) -> CheckOutcome:
        """Without row values or the database's error text: a message such as `invalid
        input syntax for type integer: "hunter2"` quotes data the reader may not see.
        The fence's own refusals stay: they quote only the invariant file."""
        return CheckOutcome(
            [
                dataclasses.replace(
                    r,
                    rows=[],
                    keys={},
                    error=r.error
                    if r.error is None or r.error.startswith(FENCE_ERRORS)
                    else WITHHELD,
                )
                for r in self.results
            ],
            self.invariants,
            self.problems,
        )


FENCE_ERRORS = ("refused by the read-only fence:", "invalid invariant file:", REFUSED)
WITHHELD = "could not be evaluated (the database's message is withheld: it can quote data)"


def failed_loads(problems: Sequence[Problem], directory: Path) -> list[RunResult]:
    """A file that failed to load is reported as an `error` result, never dropped."""
    by_path: dict[Path, list[Problem]] = {}
    for problem in problems:
        if problem.level == "error":
            by_path.setdefault(problem.path, []).append(problem)
    results = []
    for path, found in sorted(by_path.items()):
        try:
            name = name_for(path, directory)
        except ValueError:
            name = str(path)
        message = "; ".join(f"line {p.line}: {p.message}" for p in found)
        results.append(RunResult.failed(name, f"invalid invariant file: {message}"))
    return results


def privileged_allowance(target: Target, flag: bool) -> tuple[bool, str]:
    """(whether `target` may run as a role that can change the database, how to allow it),
    for role_check.verdict: its config's allowance or the command's flag."""
    how = f"pass --allow-privileged-role (or set {target.allowance_field}: true)"
    return flag or target.allow_privileged_role, how


def role_refusal(
    conn: psycopg.Connection[Any], target: str, how_to_allow: str, not_done: str = "not run"
) -> str | None:
    """Why `target`'s invariants are not run (or explained: `not_done`) for its role's sake
    (role_check.py), read on `conn`; None when they may."""
    try:
        with conn.transaction(force_rollback=True):
            facts = read_role(conn)
    except psycopg.Error as exc:
        return (
            f"target {target}: {not_done}, since what its role can do is unknown: "
            f"{describe_error(exc)}"
        )
    return verdict(target, facts, False, how_to_allow).refusal()


def role_screen(
    target: Target, allow_privileged_role: bool
) -> Callable[[psycopg.Connection[Any]], str | None] | None:
    """What Runner.run_all asks before `target`'s runs: role_refusal, unless the target's
    config or the flag allows a privileged role, when the role is not even read (`check`
    then shows no allowance, and is benchmarked)."""
    allowed, how = privileged_allowance(target, allow_privileged_role)
    if allowed:
        return None
    return lambda conn: role_refusal(conn, target.name, how)


def run_check(
    config: Config,
    directory: Path,
    only: Sequence[str] = (),
    show_values: bool = False,
    targets: Sequence[str] = (),
    allow_privileged_role: bool = False,
) -> CheckOutcome:
    """Every selected invariant evaluated once, each on its target's database (targets
    side by side, so a dead one delays no other); rows masked unless `show_values`. A
    target whose role can change the database is not run (each of its invariants says why)
    unless its config or `allow_privileged_role` allows it."""
    loaded = load_selected(config, directory, only, targets)
    return run_loaded(config, loaded, directory, show_values, allow_privileged_role)


def load_selected(
    config: Config, directory: Path, only: Sequence[str] = (), targets: Sequence[str] = ()
) -> LoadResult:
    """The invariants `run_loaded` evaluates: the folder's files as the daemon loads them,
    narrowed to `only` (selectors) and `targets`, with the problems of every file they may
    name (a file that did not load may be of any tag and any target). Apart from running,
    so a caller that runs the same files many times (the pytest plugin's polls) reads and
    fences them once."""
    loaded = select_loaded(
        load_directory(directory, config.loading(with_database=True)), only, directory
    )
    if targets:
        elsewhere = {i.path for i in loaded.invariants if i.target not in targets}
        loaded = LoadResult(
            [i for i in loaded.invariants if i.target in targets],
            [p for p in loaded.problems if p.path not in elsewhere],
        )
    return loaded


# How long an interrupted `check` keeps cancelling the queries its runs still send.
INTERRUPT_WITHIN = timedelta(seconds=5)


def run_loaded(
    config: Config,
    loaded: LoadResult,
    directory: Path,
    show_values: bool = False,
    allow_privileged_role: bool = False,
    redaction: Redaction | None = None,
) -> CheckOutcome:
    """`loaded`'s invariants evaluated once (see run_check); its problems become `error`
    results named after their files (`directory` names them). Rows are masked with
    `redaction`, else the config's under a key of this call's own."""
    known = config.resolved_targets()
    groups: dict[str, list[Invariant]] = {}
    for inv in loaded.invariants:
        groups.setdefault(inv.target, []).append(inv)
    if show_values:
        redaction = NO_REDACTION
    elif redaction is None:
        redaction = config.redact.redaction()

    interrupting = threading.Lock()  # guards `running` and `interrupted`
    running: list[Runner] = []  # the targets' runners open now
    interrupted = False

    def run_target(name: str) -> list[RunResult]:
        nonlocal interrupted
        target, invariants = known[name], groups[name]
        if not target.dsn:
            reason = config.no_dsn_reason(name)
            return [RunResult.failed(i.name, reason, target=name) for i in invariants]
        with Runner(
            target.dsn,
            target.concurrency,
            target.database,
            allow=config.policy(with_database=True).allow,
            limits=config.limits.rows(),
            redaction=redaction,
            target=name,
            overrun_margin=config.daemon.overrun_margin,
        ) as runner:
            with interrupting:
                running.append(runner)
                late = interrupted
            if late:  # opened as the wait ended: no run of its starts
                runner.interrupt()
            try:
                return runner.run_all(invariants, role_screen(target, allow_privileged_role))
            finally:
                with interrupting:
                    running.remove(runner)

    by_name: dict[str, RunResult] = {}
    with ThreadPoolExecutor(max(len(groups), 1), thread_name_prefix="invmon-target") as pool:
        try:
            for found in pool.map(run_target, sorted(groups)):
                by_name.update((r.invariant, r) for r in found)
        except BaseException:
            # Ctrl-C (KeyboardInterrupt), in `check` or a soak: the queries are cancelled on
            # their servers and no other starts, so the pool's shutdown waits for no query
            # to reach its statement timeout, and the interrupt ends the command at once.
            while True:
                try:
                    with interrupting:
                        interrupted = True
                        open_now = list(running)
                    interrupt_all(open_now, INTERRUPT_WITHIN.total_seconds())
                    break
                except KeyboardInterrupt:
                    continue  # a second Ctrl-C: what the first began is done all the same
            raise
    results = [by_name[i.name] for i in loaded.invariants]
    results += failed_loads(loaded.problems, directory)
    return CheckOutcome(results, loaded.invariants, loaded.problems)
