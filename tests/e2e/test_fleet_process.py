"""Three real daemon processes on one PostgreSQL state store share the schedule: every slot
of every invariant is evaluated and stored exactly once, each alert reaches the fake Slack
once, and a daemon SIGKILLed in the middle of a run (at seeded moments, restarted) loses
nothing: another takes its slot over once the lease expires."""

from __future__ import annotations

import itertools
import random
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from builders import process_config, slack_to
from fake_slack import FakeSlack
from helpers import SLOTTED_RUNS, items_table, runs_per_slot, start_daemon, wait_for

from monitor.authoring.pgtemp import scratch_database
from monitor.clock import parse_stamp

PERIOD = timedelta(seconds=8)
LEASE = timedelta(seconds=3)
INVARIANTS = 4
SLOTS = 5  # finished slots per invariant before the fleet is stopped (the sweep)
# About half a second of work per run, so that a kill can land in the middle of one: a
# condition on no column is a one-time filter, evaluated before any row is read.
SLOW = "(SELECT count(*) FROM generate_series(1, 3000000)) > 0"


def invariant_file(n: int) -> str:
    # slow_0 is violated (items 2 and 5 are bad): the one incident, the one alert.
    where = "i.bad" if n == 0 else "i.id < 0"
    return (
        f"-- description: invariant {n} of the fleet test\n-- key: [id]\n"
        f"-- schedule: every {PERIOD.seconds}s\n"
        f"SELECT i.id FROM items AS i WHERE {SLOW} AND {where}\n"
    )


def claims(state: str) -> list[tuple[str, str, str, str, str | None, str | None, int]]:
    with psycopg.connect(state) as conn:
        exists = conn.execute("SELECT to_regclass('slot_claims')").fetchone()
        if exists is None or exists[0] is None:  # the daemons have not migrated it yet
            return []
        return [
            tuple(row)
            for row in conn.execute(
                "SELECT invariant, slot, owner, claimed_at, finished_at, outcome, takeovers"
                " FROM slot_claims ORDER BY invariant, slot"
            )
        ]


@pytest.fixture
def fleet(
    database: str, admin_dsn: str, tmp_path: Path
) -> Iterator[tuple[str, Path, Callable[[Path, int], subprocess.Popen[bytes]]]]:
    items_table(database, bad=(2, 5))
    folder = tmp_path / "invariants"
    folder.mkdir()
    for n in range(INVARIANTS):
        (folder / f"slow_{n}.sql").write_text(invariant_file(n))
    started: list[subprocess.Popen[bytes]] = []

    def launch(config: Path, slot: int) -> subprocess.Popen[bytes]:
        # Its log is the newest of each slot's daemons.
        process = start_daemon(config, tmp_path / f"daemon-{slot}.log", database)
        started.append(process)
        return process

    with scratch_database(admin_dsn, prefix="invmon_state") as state:
        yield state, folder, launch
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()


def fleet_story(
    found: list[tuple[str, str, str, str, str | None, str | None, int]], logs: Path
) -> str:
    """Who claimed each slot and when, and what each daemon saw of the fleet: the evidence
    a failed spread needs (the slots' preferred daemon follows from who each one saw)."""
    lines = [f"{c[1]} {c[0]} by {c[2]} at {c[3]} (takeovers {c[6]})" for c in sorted(found)]
    for log in sorted(logs.glob("daemon-*.log")):
        seen = [line for line in log.read_text().splitlines() if "the fleet changed" in line]
        lines += [f"{log.name}: {line}" for line in seen]
    return "\n".join(lines)


def run_fleet(
    seed: int,
    fleet: tuple[str, Path, Callable[[Path, int], subprocess.Popen[bytes]]],
    tmp_path: Path,
    slots: int = SLOTS,
) -> None:
    rng = random.Random(seed)
    label = f"seed {seed}"
    state, folder, launch = fleet
    with FakeSlack(seed=seed) as fake:
        config = process_config(
            tmp_path,
            folder,
            state={"dsn": state},
            http={"listen": None},
            log={"format": "json"},
            daemon={"shutdown_grace": "5s", "lease": f"{LEASE.seconds}s", "handoff": "2s"},
            slack=slack_to(fake, settle="1s", timeout="0.5s", lease="3s"),
        )
        daemons = [launch(config, n) for n in range(3)]
        # The fleet is formed once each daemon has seen another (the first up claims every
        # slot alone until then: a head start that load lengthens, not a spread it chose).
        for n in range(3):
            log = tmp_path / f"daemon-{n}.log"

            def sees_the_fleet(g: Path = log) -> bool:
                return g.exists() and "the fleet changed" in g.read_text()

            wait_for(sees_the_fleet, 30, f"daemon {n} seeing the fleet ({label})")
        formed = datetime.now(UTC)
        kills = rng.randint(1, 3)
        # Claims a killed daemon held when it died, with its pid: each must be taken over,
        # unless the run's own commit was already on its way to the server.
        orphans: dict[tuple[str, str], int] = {}
        for _ in range(kills):
            # Wait a seeded number of finished runs, then for a run in flight on a seeded
            # victim, and kill it there: mid-run, holding its claim.
            finished = sum(c[4] is not None for c in claims(state)) + rng.randint(0, 6)

            def runs_finished(f: int = finished) -> bool:
                return sum(c[4] is not None for c in claims(state)) >= f

            wait_for(runs_finished, 60, f"{finished} finished runs ({label})")
            victim = rng.randrange(3)
            pid = daemons[victim].pid

            def in_flight(p: int = pid) -> bool:
                return any(c[4] is None and f":{p}:" in c[2] for c in claims(state))

            wait_for(in_flight, 60, f"a run in flight on daemon {victim} ({label})")
            daemons[victim].send_signal(signal.SIGKILL)
            daemons[victim].wait()
            orphans.update(
                {(c[0], c[1]): pid for c in claims(state) if c[4] is None and f":{pid}:" in c[2]}
            )
            daemons[victim] = launch(config, victim)

        def enough() -> bool:
            done: dict[str, int] = {}
            for name, _slot, _owner, _at, finished_at, _outcome, _n in claims(state):
                done[name] = done.get(name, 0) + (finished_at is not None)
            return len(done) == INVARIANTS and min(done.values()) >= slots

        wait_for(enough, 120, f"{slots} finished slots of each invariant ({label})")
        # Every kill's orphan finished before the fleet stops: stopped earlier, an orphan
        # still within its lease (or waiting for its invariant's next run to end) would stay
        # open, and nothing would say whether it had been taken over.
        wait_for(
            lambda: all(c[4] is not None for c in claims(state) if (c[0], c[1]) in orphans),
            60,
            f"the killed daemons' slots taken over and finished ({label}): {orphans}",
        )
        wait_for(lambda: len(fake.roots()) >= 1, 30, f"the alert ({label})")
        for n in range(len(daemons)):
            # A SIGTERM before the handlers exist (a restarted daemon still starting) kills.
            log = tmp_path / f"daemon-{n}.log"

            def started(g: Path = log) -> bool:
                return "invmon running" in g.read_text()

            wait_for(started, 30, f"start-up ({label})")
        stopping = datetime.now(UTC)
        for daemon in daemons:
            daemon.send_signal(signal.SIGTERM)
        for daemon in daemons:
            assert daemon.wait(timeout=60) == 0, label

    everything = claims(state)
    # A slot claimed as its daemon began to stop is handed back (its lease ended at once)
    # for another daemon to take; here every daemon stopped, so it stays open.
    handed_back = [c for c in everything if c[4] is None]
    assert all(parse_stamp(c[3]) >= stopping - timedelta(seconds=2) for c in handed_back), (
        f"{label}: {handed_back}"
    )
    assert len(handed_back) <= INVARIANTS, label
    found = [c for c in everything if c[4] is not None]
    with psycopg.connect(state) as conn:
        per_slot = runs_per_slot(conn.execute(SLOTTED_RUNS).fetchall(), PERIOD)
    # Exactly once: every claimed slot has one stored run, and no slot has two (a held
    # stretch's slots counted one by one).
    assert set(per_slot.values()) == {1}, f"{label}: {per_slot}"
    assert set(per_slot) == {(c[0], c[1]) for c in found}, (
        f"{label}: {[c for c in found if (c[0], c[1]) not in per_slot]}"
    )
    assert [c for c in found if c[5] != "run"] == [], f"{label}: superseded"
    # Nothing skipped: each invariant's slots follow one another, one period apart.
    for n in range(INVARIANTS):
        stored = [parse_stamp(c[1]) for c in found if c[0] == f"slow_{n}"]
        gaps = {b - a for a, b in itertools.pairwise(stored)}
        assert gaps == {PERIOD}, f"{label}: slow_{n} slots {stored}"
    # The work spread over the daemons once they formed a fleet, and each kill mid-run was
    # taken over in time. At least one slot of every invariant is due after it formed.
    shared = [c for c in found if parse_stamp(c[1]) >= formed]
    assert len(shared) >= INVARIANTS, f"{label}: formed at {formed}, {found}"
    owners = Counter(c[2] for c in shared)
    assert len(owners) >= 2 and max(owners.values()) < 0.8 * len(shared), (
        f"{label}: {owners}\n{fleet_story(found, tmp_path)}"
    )
    taken = [c for c in found if c[6] > 0]
    assert {(c[0], c[1]) for c in taken} <= set(orphans), f"{label}: {orphans}, {taken}"
    for c in found:
        if (c[0], c[1]) in orphans and c[6] == 0:  # committed by the dying daemon itself
            assert f":{orphans[c[0], c[1]]}:" in c[2], f"{label}: {c} never taken over"
    for c in taken:
        # Each takeover within a lease, a beat to notice and a run (the taker may die too),
        # with room for a loaded 2-core machine running three daemons and their queries.
        took = parse_stamp(str(c[4])) - parse_stamp(c[3])
        assert took < c[6] * (LEASE + timedelta(seconds=5)), f"{label}: {c} took {took}"
    # One incident, one alert: a single root message in Slack.
    assert len(fake.roots()) == 1, f"{label}: {len(fake.roots())} root messages"


def test_three_daemons_evaluate_each_slot_once_through_a_sigkill_mid_run(
    fleet: tuple[str, Path, Callable[[Path, int], subprocess.Popen[bytes]]], tmp_path: Path
) -> None:
    run_fleet(17, fleet, tmp_path, slots=3)  # the default run: short; the sweep runs 5


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(1000, 1100))
def test_soak_fleet_over_100_seeds(
    seed: int,
    fleet: tuple[str, Path, Callable[[Path, int], subprocess.Popen[bytes]]],
    tmp_path: Path,
) -> None:
    run_fleet(seed, fleet, tmp_path)
