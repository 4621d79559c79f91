"""The daemon's loop without its threads: one `Scheduler.tick(now)` a turn, on a clock the
test controls, against a real state store (claims are rows in it)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from helpers import invariant

from monitor.clock import utc_now
from monitor.config import DaemonConfig
from monitor.daemon.fleet import preferred
from monitor.daemon.metrics import Metrics
from monitor.daemon.scheduling import Scheduler
from monitor.daemon.services import Services
from monitor.durations import human_duration, parse_schedule
from monitor.execution.results import RunResult
from monitor.invariants.definitions import Definitions
from monitor.invariants.loader import Invariant
from monitor.store.claims import Claim
from monitor.store.state import StateStore
from monitor.store.store_health import StoreHealth

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)  # a slot boundary of every 1m


def every_minute(name: str) -> Invariant:
    return replace(invariant(name, "SELECT 1 WHERE false"), schedule=parse_schedule("every 1m"))


def scheduler(store: StateStore, *names: str) -> Scheduler:
    services = Services(store, StoreHealth("state.path 'test'"), Metrics(store.counts), utc_now)
    made = Scheduler(DaemonConfig(jitter=timedelta(0)), Definitions(), services)
    made.install({n: every_minute(n) for n in names}, START)
    return made


def ran(loop: Scheduler, store: StateStore, claim: Claim, at: datetime) -> None:
    """What the evaluator does with a claim it won: begin, store the run closing the
    claim in the same transaction, end."""
    assert loop.begin(claim.invariant, at, refuse=False) is not None
    store.record_run(
        claim.invariant, RunResult.counted(claim.invariant, 0, [], []), at, claim=claim
    )
    loop.end(claim.invariant, claim)


def test_one_tick_claims_each_due_slot_once_and_the_next_waits_for_its_slot(
    store: StateStore,
) -> None:
    loop = scheduler(store, "a", "b")
    first = loop.tick(START)
    assert sorted((c.invariant, c.slot) for c in first) == [("a", START), ("b", START)]
    assert sorted(loop.holding()) == ["a", "b"]  # renewed from the claim on, before any run
    assert loop.tick(START + timedelta(seconds=59)) == []  # the same minute: nothing new
    # Until its run is stored, an invariant's next slot waits (never twice at once).
    assert loop.tick(START + timedelta(minutes=1)) == []
    for claim in first:
        ran(loop, store, claim, START + timedelta(seconds=5))
    second = loop.tick(START + timedelta(minutes=1))
    assert sorted((c.invariant, c.slot) for c in second) == [
        ("a", START + timedelta(minutes=1)),
        ("b", START + timedelta(minutes=1)),
    ]


def test_a_run_in_flight_is_not_claimed_again_and_its_end_frees_it(store: StateStore) -> None:
    loop = scheduler(store, "a")
    [claim] = loop.tick(START)
    assert loop.begin("a", START, refuse=False) is not None
    assert loop.begin("a", START, refuse=False) is None  # never twice at once
    assert loop.running() == {"a": START}
    assert loop.tick(START + timedelta(minutes=1)) == []  # busy: its slot waits
    store.record_run("a", RunResult.counted("a", 0, [], []), START, claim=claim)
    loop.end("a", claim)
    assert (loop.running(), loop.holding()) == ({}, {})
    assert loop.wait_idle(0) is True
    [later] = loop.tick(START + timedelta(minutes=1, seconds=1))
    assert (later.invariant, later.slot) == ("a", START + timedelta(minutes=1))


def test_a_stopping_daemon_begins_nothing_and_a_queued_claim_is_handed_back(
    store: StateStore,
) -> None:
    loop = scheduler(store, "a", "b")
    claims = loop.tick(START)
    assert loop.begin("a", START, refuse=True) is None
    assert sorted(c.invariant for c in loop.queued()) == ["a", "b"]
    assert len(claims) == 2
    loop.hand_back_queued(START)
    assert (loop.queued(), loop.holding()) == ([], {})


def test_an_unloaded_invariant_is_not_due_and_cannot_begin(store: StateStore) -> None:
    loop = scheduler(store, "a", "b")
    loop.install({"a": every_minute("a")}, START)
    assert [c.invariant for c in loop.tick(START)] == ["a"]
    assert loop.begin("b", START, refuse=False) is None
    assert "b" not in loop.timetable


def test_a_run_far_past_its_timeout_on_the_database_is_reported_overdue_once(
    store: StateStore,
) -> None:
    """Timed from when its query took its connection: the minute it waited before that
    (for the replica gate, a connection) is not the database's and is no overrun."""
    loop = scheduler(store, "a")
    loop.tick(START)
    loop.begin("a", START, refuse=False)
    margin = timedelta(seconds=10)
    on_the_database: dict[str, timedelta] = {}

    def held_for(inv: Invariant) -> timedelta | None:
        return on_the_database.get(inv.name)

    assert loop.overdue(margin, held_for) == []  # waiting, for minutes: not the database's
    # At 40 s invmon closes its connection and the run ends, judged then: a run still in
    # flight a margin after that is overdue.
    on_the_database["a"] = timedelta(seconds=49)
    assert loop.overdue(margin, held_for) == []
    on_the_database["a"] = timedelta(seconds=51)
    [(inv, reason)] = loop.overdue(margin, held_for)
    assert (inv.name, reason) == (
        "a",
        "a run has been going for 51s, 21s past its timeout of 30s (the margin is 10s), and "
        "did not end when invmon closed its connection: the database is not stopping it",
    )
    on_the_database["a"] = timedelta(minutes=5)
    assert loop.overdue(margin, held_for) == []  # said once
    # ... unless its quarantine could not be stored: then it is judged again.
    loop.not_overdue(["a"])
    assert [i.name for i, _ in loop.overdue(margin, held_for)] == ["a"]


def test_the_next_tick_is_the_next_start_or_a_slot_waiting_for_another_daemon(
    store: StateStore,
) -> None:
    """The tick loop waits until then (jobs.py): the timetable's next start, or the moment a
    slot another daemon should take is tried here (`handoff`)."""
    loop = scheduler(store)
    assert loop.next_tick() is None  # nothing loaded
    loop.members = {loop.me, "elsewhere"}
    name = next(
        n for n in (f"inv{i}" for i in range(100)) if preferred(n, START, loop.members) != loop.me
    )
    loop.install({name: every_minute(name)}, START)
    assert loop.next_tick() == START  # due at once
    assert loop.tick(START) == []  # the other daemon's to take first
    assert loop.next_tick() == START + loop.settings.handoff
    [claim] = loop.tick(START + loop.settings.handoff)
    assert (claim.invariant, claim.slot) == (name, START)
    assert loop.next_tick() == START + timedelta(minutes=1)


def test_a_duration_for_people_keeps_its_seconds_under_an_hour() -> None:
    """An operator's review: an incident that lasted 239 s said "Resolved after 3m"."""
    shown = [
        human_duration(timedelta(seconds=s))
        for s in (4, 60, 239, 1200, 3599, 3600, 3 * 3600 + 12 * 60 + 5, 86400 + 300)
    ]
    assert shown == ["4s", "1m", "3m 59s", "20m", "59m 59s", "1h", "3h 12m", "1d 5m"]
