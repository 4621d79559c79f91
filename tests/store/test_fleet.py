"""Several daemons on one state store: the claim rule (a slot is claimed once, taken over
once its lease expires, stored once), the choice of the preferred daemon, and the guards
around it (one daemon per SQLite file, no code older than its store)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from builders import config_file
from helpers import SLOTTED_RUNS, cli, runs_per_slot
from psycopg import sql

from monitor.authoring.pgtemp import scratch_database
from monitor.clock import stamp
from monitor.daemon.fleet import Queue, preferred
from monitor.execution.results import RunResult
from monitor.store.claims import CLAIM, Claim, Claims, Due, LostClaim, TakenOver
from monitor.store.state import StateStore
from monitor.store.storage import (
    PostgresStorage,
    SqliteStorage,
    StoreInUse,
    StoreTooNew,
    hold_single_daemon,
)
from monitor.version import commit, version

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)


def stored_slots(store: StateStore, period: timedelta | None = None) -> dict[tuple[str, str], int]:
    with store.storage.transaction() as tx:
        return dict(runs_per_slot(tx.rows(SLOTTED_RUNS), period))


def test_a_slot_is_claimed_by_exactly_one_of_many_daemons_racing(store: StateStore) -> None:
    daemons = [Claims(store.storage, f"d{n}", LEASE) for n in range(8)]
    due = Due("refunds", T0)
    start = threading.Barrier(len(daemons))
    outcomes: dict[str, str] = {}

    def race(claims: Claims) -> None:
        start.wait()
        outcomes[claims.me] = claims.claim(due, T0)

    threads = [threading.Thread(target=race, args=(d,)) for d in daemons]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Counter(outcomes.values()) == {"claimed": 1, "taken": 7}


def test_a_run_is_stored_once_per_slot_and_only_by_the_claims_holder(store: StateStore) -> None:
    a, b = Claims(store.storage, "a", LEASE), Claims(store.storage, "b", LEASE)
    assert a.claim(Due("refunds", T0), T0) == "claimed"
    assert b.claim(Due("refunds", T0), T0) == "taken"
    result = RunResult.counted("refunds", 0, [], [])
    with pytest.raises(LostClaim):  # b never held it: nothing stored
        store.record_run("refunds", result, T0, claim=Claim("refunds", T0, "b"))
    store.record_run("refunds", result, T0, claim=Claim("refunds", T0, "a"))
    with pytest.raises(LostClaim):  # finished: a second store of the slot is refused too
        store.record_run("refunds", result, T0, claim=Claim("refunds", T0, "a"))
    assert stored_slots(store) == {("refunds", "2026-11-30T12:00:00.000000Z"): 1}


def test_a_claim_whose_daemon_stopped_renewing_is_taken_over_once(store: StateStore) -> None:
    a, b, c = (Claims(store.storage, n, LEASE) for n in "abc")
    assert a.claim(Due("refunds", T0), T0) == "claimed"
    # Renewed at +20s, so still a's at +40s; expired at +51s (a died after renewing).
    a.heartbeat(T0 + timedelta(seconds=20), [Claim("refunds", T0, "a")], "host", 1)
    assert b.take_over({"refunds"}, T0 + timedelta(seconds=40)) == []
    late = T0 + timedelta(seconds=51)
    assert b.take_over({"refunds"}, late) == [TakenOver(Due("refunds", T0), "a")]
    assert c.take_over({"refunds"}, late) == []  # b holds it now, with a fresh lease
    result = RunResult.counted("refunds", 0, [], [])
    with pytest.raises(LostClaim):  # a came back from a long pause: its run is dropped
        store.record_run("refunds", result, late, claim=Claim("refunds", T0, "a"))
    store.record_run("refunds", result, late, claim=Claim("refunds", T0, "b"))
    assert stored_slots(store) == {("refunds", "2026-11-30T12:00:00.000000Z"): 1}
    with store.storage.transaction() as tx:
        assert tx.rows("SELECT owner, outcome, takeovers FROM slot_claims") == [("b", "run", 1)]


def test_a_daemon_whose_own_lease_ran_out_takes_its_slot_back_saying_it_was_its_own(
    store: StateStore,
) -> None:
    """After the store was out of reach (a full disk), a daemon alone on it logged that it
    'took over a slot whose daemon stopped renewing it', twenty times: its own slots."""
    b = Claims(store.storage, "b", LEASE)
    assert b.claim(Due("ledger", T0), T0) == "claimed"
    late = T0 + timedelta(seconds=51)  # not renewed: the store could not be reached
    assert b.take_over({"ledger"}, late) == [TakenOver(Due("ledger", T0), "b")]
    with store.storage.transaction() as tx:  # taken back, not over: no takeover counted
        assert tx.rows("SELECT owner, takeovers FROM slot_claims") == [("b", 0)]


def test_a_slot_waits_while_an_earlier_run_of_its_invariant_holds_a_live_lease(
    store: StateStore,
) -> None:
    a, b = Claims(store.storage, "a", LEASE), Claims(store.storage, "b", LEASE)
    assert a.claim(Due("refunds", T0), T0) == "claimed"
    later = Due("refunds", T0 + timedelta(minutes=1))
    at = T0 + timedelta(seconds=10)
    assert b.claim(later, at) == "busy"  # never twice at once across the fleet
    assert b.claim(Due("ledger", T0), at) == "claimed"  # other invariants are not held up
    store.record_run(
        "refunds", RunResult.counted("refunds", 0, [], []), at, claim=Claim("refunds", T0, "a")
    )
    assert b.claim(later, at) == "claimed"


def test_an_orphan_holds_its_invariants_later_slots_until_it_is_taken_over_and_run(
    store: StateStore,
) -> None:
    a, b = Claims(store.storage, "a", LEASE), Claims(store.storage, "b", LEASE)
    assert a.claim(Due("refunds", T0), T0) == "claimed"  # a dies holding it
    after = T0 + timedelta(minutes=2)  # long expired
    later = Due("refunds", T0 + timedelta(minutes=1))
    assert b.claim(later, after) == "busy"  # a slot once claimed is run, and first
    assert b.take_over({"ledger"}, after) == []  # only invariants b has loaded
    assert [t.due for t in b.take_over({"refunds"}, after)] == [Due("refunds", T0)]
    store.record_run(
        "refunds", RunResult.counted("refunds", 0, [], []), after, claim=Claim("refunds", T0, "b")
    )
    assert b.claim(later, after) == "claimed"
    assert sorted(stored_slots(store).items()) == [(("refunds", "2026-11-30T12:00:00.000000Z"), 1)]


def test_a_slot_the_fleet_has_passed_is_never_claimed(store: StateStore) -> None:
    a, b = Claims(store.storage, "a", LEASE), Claims(store.storage, "b", LEASE)
    later = T0 + timedelta(minutes=1)
    assert a.claim(Due("refunds", later), later) == "claimed"
    # b fell behind (paused, say) and comes to the earlier slot only now.
    assert b.claim(Due("refunds", T0), later) == "taken"
    assert b.claim(Due("ledger", T0), later) == "claimed"  # another invariant's own
    assert claimed_slots(store) == [("ledger", stamp(T0)), ("refunds", stamp(later))]


def test_finished_claims_are_pruned_but_each_invariants_newest_and_open_ones_stay(
    store: StateStore,
) -> None:
    a = Claims(store.storage, "a", LEASE)
    minute = timedelta(minutes=1)
    result = RunResult.counted("refunds", 0, [], [])
    for n in range(4):
        slot = T0 + n * minute
        assert a.claim(Due("refunds", slot), slot) == "claimed"
        store.record_run("refunds", result, slot, claim=Claim("refunds", slot, "a"))
    assert a.claim(Due("ledger", T0), T0) == "claimed"  # finished below
    store.record_run("ledger", result, T0, claim=Claim("ledger", T0, "a"))
    assert a.claim(Due("jobs", T0), T0) == "claimed"  # still open: never pruned
    a.prune(T0 + 10 * minute)
    assert claimed_slots(store) == [
        ("jobs", stamp(T0)),
        ("ledger", stamp(T0)),
        ("refunds", stamp(T0 + 3 * minute)),
    ]
    # What refuses a pruned slot is the newest claim kept: it is never run again.
    assert a.claim(Due("refunds", T0 + minute), T0 + 11 * minute) == "taken"
    assert a.claim(Due("refunds", T0 + 4 * minute), T0 + 11 * minute) == "claimed"
    # Before `before` only: a claim newer than that is kept whatever follows it.
    store.record_run(
        "refunds", result, T0 + 4 * minute, claim=Claim("refunds", T0 + 4 * minute, "a")
    )
    a.prune(T0 + 3 * minute)
    assert claimed_slots(store) == [
        ("jobs", stamp(T0)),
        ("ledger", stamp(T0)),
        ("refunds", stamp(T0 + 3 * minute)),
        ("refunds", stamp(T0 + 4 * minute)),
    ]


def claimed_slots(store: StateStore) -> list[tuple[str, str]]:
    with store.storage.transaction() as tx:
        found = tx.rows("SELECT invariant, slot FROM slot_claims ORDER BY invariant, slot")
    return [(str(i), str(s)) for i, s in found]


def test_the_preferred_daemon_spreads_slots_evenly_and_moves_only_a_leavers_share() -> None:
    members = {"d1", "d2", "d3"}
    slots = [(f"inv{n % 20}", T0 + timedelta(minutes=n // 20)) for n in range(3000)]
    chosen = {s: preferred(*s, members) for s in slots}
    shares = Counter(chosen.values())
    assert set(shares) == members
    assert all(900 <= n <= 1100 for n in shares.values()), shares
    after = {s: preferred(*s, members - {"d3"}) for s in slots}
    moved = {s for s in slots if after[s] != chosen[s]}
    assert moved == {s for s in slots if chosen[s] == "d3"}
    assert preferred("inv", T0, set()) is None


def test_only_the_preferred_daemon_claims_at_once_the_others_after_the_handoff() -> None:
    members = {"d1", "d2", "d3"}
    due = [Due(f"inv{n}", T0) for n in range(30)]
    for me in sorted(members):
        queue = Queue(me, timedelta(seconds=5))
        queue.add(due, members, T0)
        mine = {d for d in due if preferred(d.name, d.slot, members) == me}
        assert set(queue.ready(T0)) == mine
        assert set(queue.ready(T0 + timedelta(seconds=5))) == set(due)
        newer = Due("inv0", T0 + timedelta(minutes=1))
        queue.add([newer], members, T0 + timedelta(seconds=6))
        assert newer in queue.ready(T0 + timedelta(minutes=2)) and Due("inv0", T0) not in (
            queue.ready(T0 + timedelta(minutes=2))
        )  # a newer slot replaces one still waiting, as missed slots coalesce
        queue.keep_only({"inv1"})
        assert [d.name for d in queue.ready(T0 + timedelta(minutes=2))] == ["inv1"]


def test_a_second_daemon_on_one_sqlite_store_is_refused_and_a_dead_ones_lock_is_gone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, pathlib; from monitor.store.storage import hold_single_daemon;"
            f"h = hold_single_daemon(pathlib.Path({str(path)!r})); print('held', flush=True);"
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(StoreInUse) as refused:
            hold_single_daemon(path)
        assert str(refused.value) == (
            f"another daemon (pid {holder.pid} on {__import__('socket').gethostname()}) "
            f"already runs on the SQLite state store {str(path)!r}; SQLite serves one daemon: "
            "for several, set state.dsn to a PostgreSQL database"
        )
    finally:
        holder.kill()
        holder.wait()
    hold_single_daemon(path).close()  # the kernel dropped the dead holder's lock


def test_the_daemon_refuses_a_store_migrated_by_a_newer_release(tmp_path: Path) -> None:
    StateStore.open(path=tmp_path / "state.db").close()
    store = StateStore.open(path=tmp_path / "state.db")
    assert isinstance(store.storage, SqliteStorage)
    newest = len(store.storage.migrations)
    with store.storage.transaction() as tx:
        tx.run(
            "INSERT INTO invmon_schema (version, applied_at) VALUES (?, '2027-01-01')",
            (newest + 1,),
        )
    store.close()
    with pytest.raises(StoreTooNew):
        StateStore.open(path=tmp_path / "state.db")
    (tmp_path / "invariants").mkdir()
    config_file(tmp_path, dsn="host=x", state={"path": "state.db"})
    ran = cli("run", "--once", cwd=tmp_path)
    assert ran.returncode == 2
    started, refused = ran.stderr.strip().splitlines()
    assert started.endswith(f"INFO    invmon starting  version={version} commit={commit}")
    assert refused == (
        f"invmon: cannot open the state store (state.path 'state.db'): the state store is at "
        f"schema version {newest + 1}, newer than this invmon knows ({newest}): a newer "
        "release migrated it; run that release (or newer) here"
    )


def test_daemons_starting_together_on_a_new_postgres_store_migrate_it_once(
    admin_dsn: str,
) -> None:
    from monitor.authoring.pgtemp import scratch_database

    with scratch_database(admin_dsn, prefix="invmon_state") as dsn:
        start = threading.Barrier(4)
        errors: list[BaseException] = []
        opened: list[StateStore] = []

        def open_it() -> None:
            start.wait()
            try:
                opened.append(StateStore.open(dsn=dsn))
            except BaseException as exc:  # the collision this test is about
                errors.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for store in opened:
            store.close()
        assert errors == []
        # Each step applied by exactly one of them, and each says only its own: four
        # `invmon store migrate` at once all printed "migrated 0→17".
        claimed = sorted(v for store in opened for v in store.storage.migrated)
        store = StateStore.open(dsn=dsn)
        assert isinstance(store.storage, PostgresStorage)
        assert store.storage.migrated == ()
        assert claimed == list(range(1, len(store.storage.migrations) + 1))
        with store.storage.transaction() as tx:
            versions = [v for (v,) in tx.rows("SELECT version FROM invmon_schema ORDER BY 1")]
        assert versions == list(range(1, len(store.storage.migrations) + 1))
        store.close()


def test_two_daemons_in_one_process_share_slots_and_one_takes_over_the_others(
    admin_dsn: str, database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon's own path, driven by a clock the test holds: both daemons see every slot
    due, each slot is stored once, and a slot claimed by a daemon that then stops (no
    heartbeat, no run) is run by the other once the lease has passed."""
    from builders import build_daemon, daemon_config
    from helpers import FakeClock, items_table

    from monitor.authoring.pgtemp import scratch_database
    from monitor.config import DaemonConfig

    caplog.set_level(logging.INFO, logger="invmon.daemon")
    items_table(database, bad=(1,))
    folder = tmp_path / "invariants"
    folder.mkdir()
    for n in range(6):
        (folder / f"inv_{n}.sql").write_text(
            f"-- description: invariant {n}\n-- key: [id]\n-- schedule: every 1m\n"
            "SELECT id FROM items WHERE bad\n"
        )
    # Half a minute past a slot, ahead of the real time the timetable starts from at reload.
    now = datetime.now(UTC)
    clock = FakeClock(now.replace(second=0, microsecond=0) + timedelta(minutes=1, seconds=30))
    config = daemon_config(
        folder, daemon=DaemonConfig(lease=timedelta(seconds=30), handoff=timedelta(seconds=5))
    )
    with scratch_database(admin_dsn, prefix="invmon_state") as state:
        stores = [StateStore.open(dsn=state) for _ in range(2)]
        a, b = (build_daemon(config, database, s, clock=clock) for s in stores)
        try:
            for daemon in (a, b):
                daemon.reload()
            for daemon in (a, b, a):
                daemon.scheduler.heartbeat(clock())
            assert a.metrics.fleet_daemons._value.get() == 2
            ran: dict[str, list[str]] = {"a": [], "b": []}
            for slot in range(3):  # three slots: at each, then again once the handoff passed
                clock.advance(54 if slot else 0)
                for turn in range(2):
                    clock.advance(6 if turn else 0)
                    for name, daemon in (("a", a), ("b", b)):
                        ran[name] += [r.invariant for r in daemon.run_due(clock())]
            assert sorted(ran["a"] + ran["b"]) == sorted([f"inv_{n}" for n in range(6)] * 3)
            assert ran["a"] != [] and ran["b"] != []  # shared, not all on one
            # a claims the next slot of every invariant, then stops dead: no run, no beat.
            clock.advance(54)
            claimed = a.scheduler.tick(clock())
            clock.advance(6)
            claimed += a.scheduler.tick(clock())
            assert sorted(c.invariant for c in claimed) == [f"inv_{n}" for n in range(6)]
            assert b.run_due(clock()) == []  # all a's
            assert b.scheduler.heartbeat(clock() + timedelta(seconds=10)) == []  # a's leases hold
            clock.advance(40)  # past a's leases
            taken = b.scheduler.heartbeat(clock())
            assert sorted(c.invariant for c in taken) == [f"inv_{n}" for n in range(6)]
            for claim in taken:
                assert b.evaluate(claim.invariant, claim) is not None
            assert b.metrics.slots_taken_over._value.get() == 6
            per_slot = stored_slots(stores[0], timedelta(minutes=1))
            assert set(per_slot.values()) == {1}
            assert len(per_slot) == 6 * 4
            # Each change of the fleet is said: b saw a, a saw b, and b saw a go.
            said = [r for r in caplog.records if r.getMessage() == "the fleet changed"]
            changes = [getattr(r, "fields", None) for r in said]
            assert changes == [
                {"joined": [a.scheduler.me], "left": [], "daemons": 2},
                {"joined": [b.scheduler.me], "left": [], "daemons": 2},
                {"joined": [], "left": [a.scheduler.me], "daemons": 1},
            ]
        finally:
            for daemon, store in zip((a, b), stores, strict=True):
                daemon.close()
                store.close()


def _rows_read(plan: dict[str, object]) -> int:
    """Rows every scan of an EXPLAIN ANALYZE plan read: those it returned and those it
    read and threw away, over all its loops."""
    loops = int(plan.get("Actual Loops", 1))  # type: ignore[call-overload]
    read = 0
    if "Scan" in str(plan.get("Node Type", "")):
        kept = int(plan.get("Actual Rows", 0))  # type: ignore[call-overload]
        dropped = int(plan.get("Rows Removed by Filter", 0))  # type: ignore[call-overload]
        dropped += int(plan.get("Rows Removed by Index Recheck", 0))  # type: ignore[call-overload]
        read = (kept + dropped) * loops
    children = plan.get("Plans", [])
    assert isinstance(children, list)
    return read + sum(_rows_read(child) for child in children)


def test_a_claim_reads_its_own_invariants_open_claims_not_the_fleets(admin_dsn: str) -> None:
    # 5,000 invariants with an open claim each (as a fleet has in the seconds after a slot
    # falls due) and a history of finished ones. A claim's check for an earlier open slot
    # must read the invariant's own open claims only, under the generic plan a pooled
    # connection ends up with. Without an index for it the check read either the fleet's
    # open claims (store work growing with the square of the slots due at once: measured
    # in bench/README.md) or, as here, every finished claim the invariant has kept.
    with scratch_database(admin_dsn, prefix="invmon_claims") as dsn:
        store = StateStore.open(dsn=dsn)
        try:
            slot = T0.isoformat()
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO slot_claims (invariant, slot, owner, claimed_at, lease_until)"
                    " SELECT 'inv' || i, %s, 'd1', %s, %s FROM generate_series(1, 5000) AS i",
                    (slot, slot, (T0 + LEASE).isoformat()),
                )
                # And each one's history: 20 finished slots before it, as a day keeps.
                conn.execute(
                    "INSERT INTO slot_claims (invariant, slot, owner, claimed_at, lease_until,"
                    " finished_at, outcome) SELECT 'inv' || i, s, 'd1', s, s, s, 'stored'"
                    " FROM generate_series(1, 5000) AS i, LATERAL (SELECT to_char("
                    "  %s::timestamptz - make_interval(mins => m), 'YYYY-MM-DD\"T\"HH24:MI:SS')"
                    "  || '+00:00' AS s FROM generate_series(1, 20) AS m) AS history",
                    (slot,),
                )
                conn.execute("ANALYZE slot_claims")
                numbered = iter(range(1, CLAIM.count("?") + 1))
                text = re.sub(r"\?", lambda _: f"${next(numbered)}", CLAIM)
                with conn.transaction(force_rollback=True):
                    conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                    types = ", ".join(["text"] * CLAIM.count("?"))  # every column is TEXT
                    conn.execute(f"PREPARE claim ({types}) AS {text}")
                    later = (T0 + timedelta(minutes=1)).isoformat()
                    args = ("inv42", later, "d2", later, later, "inv42", later, "inv42", later)
                    row = conn.execute(
                        sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim ({})").format(
                            sql.SQL(", ").join(map(sql.Literal, args))
                        )
                    ).fetchone()
                    assert row is not None
                    [explained] = row[0]
                    conn.execute("DEALLOCATE claim")
            # inv42's one open claim (an earlier slot): none of its 20 finished ones, and
            # nothing of the other 4,999 invariants'.
            assert _rows_read(explained["Plan"]) == 1, explained
        finally:
            store.close()
