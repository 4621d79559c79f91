"""The daemon's loop, without its threads: which slots are due, which of them this daemon
won, which runs are in flight and which claims it holds. One `tick(now)` is one turn of it
(as Celery beat's `Scheduler.tick()`), so a test drives the loop with a clock it controls
and the daemon only calls it from its scheduler thread.

Lock discipline: `_lock` guards the loop's own state (the running set of invariants, the
timetable, the queue, `_in_flight`, `_holding` and `_overdue`) and nothing else. It is held
only to read or change that state: never across a call to the store, a database or Slack,
and never taken twice (a plain Lock: a second acquire on one thread is a wedge, which the
tests would show). `_idle` waits on the same lock for the runs in flight to end.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from monitor.config import DaemonConfig
from monitor.daemon.fleet import Queue
from monitor.daemon.self_checks import Loaded
from monitor.daemon.services import Services
from monitor.daemon.slots import Timetable
from monitor.execution.quarantine import still_running, version_of
from monitor.invariants.definitions import Definitions
from monitor.invariants.loader import Invariant
from monitor.store.claims import Claim, Claims
from monitor.store.records import Quarantine

log = logging.getLogger("invmon.daemon")


class Scheduler:
    def __init__(
        self,
        settings: DaemonConfig,
        definitions: Definitions,
        services: Services,
    ) -> None:
        self.settings = settings
        self.definitions = definitions
        self.store, self.health, self.metrics = services.store, services.health, services.metrics
        self.timetable = Timetable(settings.jitter)
        # One daemon among any number on the store: slots are claimed (claims.py), the
        # preferred daemon first (fleet.py), so each runs once across the fleet.
        self.me = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.claims = Claims(self.store.storage, self.me, settings.lease)
        self.queue = Queue(self.me, settings.handoff)
        self.members: set[str] = {self.me}
        self.beat_every = settings.lease / 3  # the fleet's heartbeat
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight: dict[str, datetime] = {}  # name -> when its run started
        self._holding: dict[str, Claim] = {}  # name -> its claim, queued or running
        self._overdue: set[str] = set()  # runs in flight already quarantined for it

    @property
    def invariants(self) -> dict[str, Invariant]:
        return self.definitions.current

    def install(self, running: dict[str, Invariant], now: datetime) -> None:
        """Follow a reload: the running set and the timetable change together."""
        with self._lock:
            self.definitions.current = running
            self.timetable.sync({n: i.schedule for n, i in running.items()}, now)

    # --- one turn ----------------------------------------------------------------------

    def tick(self, now: datetime) -> list[Claim]:
        """The slots this daemon runs now: those due whose claim it won. A slot that an
        earlier run of its invariant still holds, anywhere in the fleet, waits."""
        with self._lock:
            due = self.timetable.due(now, busy=self._in_flight)
            self.queue.keep_only(self.invariants)
            self.queue.add(due, self.members, now)
            ready = [d for d in self.queue.ready(now) if d.name not in self._in_flight]
        held_out = self.held_out() if ready else set()
        won: list[Claim] = []
        if held_out is None:
            return won  # the store failed: every ready slot waits for the next tick
        for item in ready:
            if item.name in held_out:
                with self._lock:
                    self.queue.settle(item)  # quarantined: this slot is not run anywhere
                continue
            claimed = False
            with self.health.guard("claiming a slot"):
                outcome = self.claims.claim(item, now)
                claimed = True
                with self._lock:
                    if outcome != "busy":
                        self.queue.settle(item)
                if outcome == "claimed":
                    claim = Claim(item.name, item.slot, self.me)
                    with self._lock:
                        # Renewed from now on, while it waits for a worker as well as while
                        # it runs: a queued claim is not an abandoned one.
                        self._holding[item.name] = claim
                    won.append(claim)
            if not claimed:
                break  # the store failed: the other ready slots wait for the next tick
        return won

    def next_tick(self) -> datetime | None:
        """When the next turn has something to do: the timetable's next start, or a slot
        waiting for another daemon to take it (`handoff`); None when nothing is loaded.
        Slots due while their invariant still runs are tried again at the turns in
        between, which come at least once a second (jobs.py)."""
        with self._lock:
            times = [t for t in (self.timetable.next_start(), self.queue.next_try()) if t]
        return min(times, default=None)

    def heartbeat(self, now: datetime) -> list[Claim]:
        """Say this daemon is alive, renew the leases of its runs in flight, learn who else
        is, and take over the slots of daemons that stopped renewing theirs."""
        with self._lock:
            holding = list(self._holding.values())
            loaded = set(self.invariants) - set(self._in_flight) - set(self._holding)
        held_out = self.held_out()
        # Unreadable, no slot is taken over: a quarantined invariant's would be run.
        loaded = set() if held_out is None else loaded - held_out
        with self.health.guard("renewing this daemon's claims"):
            self.claims.heartbeat(now, holding, socket.gethostname(), os.getpid())
            members = self.claims.members(now, 3 * self.beat_every) | {self.me}
            joined, left = sorted(members - self.members), sorted(self.members - members)
            self.members = members
            self.metrics.fleet_daemons.set(len(members))
            if joined or left:
                # Which daemons share the slots (fleet.py): a change moves slots between them.
                log.info(
                    "the fleet changed",
                    extra={"fields": {"joined": joined, "left": left, "daemons": len(members)}},
                )
            found = self.claims.take_over(loaded, now)
            taken = [t.due for t in found]
            others = {t.due for t in found if t.from_owner != self.me}
            self.metrics.slots_taken_over.inc(len(others))
            with self._lock:
                self._holding.update({t.name: Claim(t.name, t.slot, self.me) for t in taken})
            for item in taken:
                fields = {"fields": {"invariant": item.name, "slot": item.slot.isoformat()}}
                if item in others:
                    log.warning("took over a slot whose daemon stopped renewing it", extra=fields)
                else:  # its own: the store was out of reach when its lease was to be renewed
                    log.info("took back a slot of its own whose lease ran out", extra=fields)
            return [Claim(t.name, t.slot, self.me) for t in taken]
        return []

    # --- runs in flight ----------------------------------------------------------------

    def begin(self, name: str, started: datetime, refuse: bool) -> Invariant | None:
        """Mark `name` running from `started` and return it; None when it is not loaded,
        already running, or `refuse` (a stop under way)."""
        with self._lock:
            inv = self.invariants.get(name)
            if inv is None or refuse or name in self._in_flight:
                return None
            self._in_flight[name] = started
            return inv

    def not_overdue(self, names: list[str]) -> None:
        """Forget that `overdue` found these: their quarantine was not stored."""
        with self._lock:
            self._overdue.difference_update(names)

    def end(self, name: str, claim: Claim | None) -> None:
        with self._idle:
            if claim is not None:
                self._forget(claim)
            self._in_flight.pop(name, None)
            self._overdue.discard(name)
            self._idle.notify_all()

    def _forget(self, claim: Claim) -> None:
        """Stop renewing `claim` (the caller holds `_lock`). Only that claim: a refused
        later slot must not stop the renewal of the run of its invariant still in flight."""
        if self._holding.get(claim.invariant) == claim:
            del self._holding[claim.invariant]

    def release(self, claim: Claim, now: datetime) -> None:
        """Hand back a claim that will not run. Takes `_lock`: never call it holding it."""
        with self._lock:
            self._forget(claim)
        with self.health.guard("releasing a slot"):
            self.claims.release(claim, now)

    def queued(self) -> list[Claim]:
        """The claims held for runs not started (still waiting for a worker)."""
        with self._lock:
            return [c for n, c in self._holding.items() if n not in self._in_flight]

    def hand_back_queued(self, now: datetime) -> None:
        """The claims whose runs were still queued when the workers stopped: handed back,
        so another daemon can take the slot at once instead of after the lease."""
        for claim in self.queued():
            self.release(claim, now)

    def outstanding(self) -> set[str]:
        """The invariants whose runs this daemon started or holds a claim for, not yet
        stored: their openings may be about to join a burst (alerts/bursts.py)."""
        with self._lock:
            return set(self._in_flight) | set(self._holding)

    def holding(self) -> dict[str, Claim]:
        with self._lock:
            return dict(self._holding)

    def running(self) -> dict[str, datetime]:
        with self._lock:
            return dict(self._in_flight)

    def loaded(self) -> dict[str, Loaded]:
        with self._lock:
            return {n: Loaded(i.schedule, i.longest_run) for n, i in self.invariants.items()}

    def wait_idle(self, seconds: float) -> bool:
        """Whether every run in flight ended within `seconds`."""
        deadline = time.monotonic() + seconds
        with self._idle:
            while self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    # --- quarantine (quarantine.py) ----------------------------------------------------

    def held_out(self) -> set[str] | None:
        """The invariants no daemon may run now: quarantined at the version loaded here;
        None when the store could not say."""
        found: dict[str, Quarantine] | None = None
        with self.health.guard("reading the quarantined invariants", reads_only=True):
            found = self.store.quarantined()
        if found is None:
            return None
        self.metrics.quarantined.set(len(found))
        loaded = self.invariants
        return {
            name
            for name, q in found.items()
            if name in loaded and version_of(loaded[name]) == q.version
        }

    def overdue(
        self, margin: timedelta, held_for: Callable[[Invariant], timedelta | None]
    ) -> list[tuple[Invariant, str]]:
        """The runs in flight whose query has held its connection well past their timeout,
        each once, with why: their invariants are quarantined now, not when (if ever) the
        runs return. `held_for`: how long a run's query has held its connection (Runner),
        None while it has none (waiting for the replica gate or a connection, which are
        bounded apart and say nothing about the query). Called without `_lock` held."""
        with self._lock:
            running = [
                self.invariants[n]
                for n in self._in_flight
                if n in self.invariants and n not in self._overdue
            ]
        found = []
        for inv in running:
            took = held_for(inv)
            if took is None:
                continue
            reason = still_running(took, inv, margin)
            if reason is not None:
                with self._lock:
                    self._overdue.add(inv.name)
                found.append((inv, reason))
        return found
