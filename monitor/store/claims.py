"""The claim rule: a slot of an invariant is evaluated by the one daemon that claims it, and
a claim whose daemon stopped renewing its lease is taken over by another.

Everything here is one statement checked by what it returned, as SQLite and PostgreSQL both
guarantee it: a slot is claimed by `INSERT … ON CONFLICT DO NOTHING` on (invariant, slot),
taken over by an UPDATE conditional on an expired lease, and finished by an UPDATE
conditional on still owning it, in the same transaction that stores the run. So the runs
table holds at most one run per slot, whatever dies when; a daemon that lost its claim
while it ran (its lease expired, another took over) stores nothing. No consensus of our own:
the state store's row locks and unique index decide.

A daemon also keeps a row in `daemons` (its heartbeat), which is how the others know whom
to prefer for a slot (fleet.py) and how an operator sees the fleet.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from monitor.clock import parse_stamp, stamp
from monitor.store.storage import Storage, Tx

Claimed = Literal["claimed", "taken", "busy"]


@dataclass(frozen=True)
class Due:
    """A slot of one invariant that has come: what a daemon tries to claim."""

    name: str
    slot: datetime


class LostClaim(Exception):
    """The daemon's claim on a slot was taken over while it ran: its run is not stored."""


@dataclass(frozen=True)
class TakenOver:
    """A slot this daemon took over, and the daemon whose lease on it had run out (itself,
    when it could not renew its own: the state store was out of reach)."""

    due: Due
    from_owner: str


@dataclass(frozen=True)
class Claim:
    """This daemon holds this slot: the run it stores must say so."""

    invariant: str
    slot: datetime
    owner: str


# A slot is this daemon's when no daemon holds it, no earlier slot of its invariant is
# still open, and no later slot of it was claimed (a daemon that fell behind never runs
# a slot the fleet has passed: the later run evaluated the invariant more recently, and
# that is what lets finished claims be pruned within the hour, see `prune`). Both checks
# read the invariant's own claims only, through its primary key and
# slot_claims_open_by_invariant (migration 0014): never the fleet's.
CLAIM = (
    "INSERT INTO slot_claims (invariant, slot, owner, claimed_at, lease_until)"
    " SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM slot_claims"
    "  WHERE invariant = ? AND slot < ? AND finished_at IS NULL)"
    " AND NOT EXISTS (SELECT 1 FROM slot_claims WHERE invariant = ? AND slot > ?)"
    " ON CONFLICT (invariant, slot) DO NOTHING RETURNING owner"
)

# Finished claims are kept this long, then pruned (all but each invariant's newest, which
# refuses its older slots): a claim is what stops a slot being run twice, not a record of
# runs (those are in `runs`), and keeping one per run for `state.retention` cost 400
# bytes a run, 2.9 GB a day at 5,000 invariants every minute (bench/README.md).
CLAIMS_KEPT = timedelta(hours=1)
CLAIMS_PRUNED_EVERY = timedelta(minutes=10)  # the daemon's job that prunes them


class Claims:
    def __init__(self, storage: Storage, me: str, lease: timedelta) -> None:
        self.storage = storage
        self.me = me
        self.lease = lease

    def claim(self, due: Due, now: datetime) -> Claimed:
        """`claimed`: this daemon evaluates the slot. `taken`: another daemon has it, or
        has claimed a later slot of the invariant (this one is passed). `busy`: an earlier
        slot of the invariant is not finished yet, running somewhere or
        waiting to be taken over from a daemon that died (an invariant never runs twice at
        once across the fleet, and its slots are stored in order); try again later."""
        slot, at = stamp(due.slot), stamp(now)
        with self.storage.transaction() as tx:
            lease = stamp(now + self.lease)
            won = tx.rows(
                CLAIM, (due.name, slot, self.me, at, lease, due.name, slot, due.name, slot)
            )
            if won:
                return "claimed"
            exists = tx.rows(
                "SELECT 1 FROM slot_claims WHERE invariant = ? AND slot >= ?", (due.name, slot)
            )
        return "taken" if exists else "busy"

    def take_over(self, names: Collection[str], now: datetime, limit: int = 200) -> list[TakenOver]:
        """Claims of these invariants whose daemon stopped renewing them (it died, or lost
        the store), now this daemon's to run: a slot once claimed is always run."""
        at = stamp(now)
        taken: list[TakenOver] = []
        with self.storage.transaction() as tx:
            orphans = tx.rows(
                "SELECT invariant, slot, owner FROM slot_claims WHERE finished_at IS NULL"
                " AND lease_until <= ? ORDER BY slot, invariant LIMIT ?",
                (at, limit),
            )
            for name, slot, owner in orphans:
                if name not in names:
                    continue
                # Its own slot (a lease it could not renew in time, the store out of reach
                # or the machine busy) is taken back, not over: `takeovers` counts the
                # slots a daemon ran for another.
                won = tx.rows(
                    "UPDATE slot_claims SET owner = ?, lease_until = ?,"
                    " takeovers = takeovers + CASE WHEN owner = ? THEN 0 ELSE 1 END"
                    " WHERE invariant = ? AND slot = ?"
                    " AND finished_at IS NULL AND lease_until <= ? RETURNING invariant",
                    (self.me, stamp(now + self.lease), self.me, name, slot, at),
                )
                if won:
                    taken.append(TakenOver(Due(name, parse_stamp(slot)), str(owner)))
        return taken

    def heartbeat(self, now: datetime, running: Collection[Claim], host: str, pid: int) -> None:
        """This daemon is alive, and still running these claims: their leases go on."""
        at = stamp(now)
        with self.storage.transaction() as tx:
            tx.run(
                "INSERT INTO daemons (id, host, pid, started_at, seen_at) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at",
                (self.me, host, pid, at, at),
            )
            for claim in running:
                tx.run(
                    "UPDATE slot_claims SET lease_until = ? WHERE invariant = ? AND slot = ?"
                    " AND owner = ? AND finished_at IS NULL",
                    (stamp(now + self.lease), claim.invariant, stamp(claim.slot), self.me),
                )

    def members(self, now: datetime, window: timedelta) -> set[str]:
        """The daemons seen alive within `window`."""
        with self.storage.transaction() as tx:
            found = tx.rows("SELECT id FROM daemons WHERE seen_at > ?", (stamp(now - window),))
        return {str(member) for (member,) in found}

    def release(self, claim: Claim, now: datetime) -> None:
        """A run that could not be stored: let another daemon take the slot at once."""
        with self.storage.transaction() as tx:
            tx.run(
                "UPDATE slot_claims SET lease_until = ? WHERE invariant = ? AND slot = ?"
                " AND owner = ? AND finished_at IS NULL",
                (stamp(now), claim.invariant, stamp(claim.slot), self.me),
            )

    def leave(self, before: datetime) -> None:
        """A clean stop: off the list of daemons (and drop rows of long-dead ones)."""
        with self.storage.transaction() as tx:
            tx.run("DELETE FROM daemons WHERE id = ? OR seen_at < ?", (self.me, stamp(before)))

    def prune(self, before: datetime) -> None:
        """Drop finished claims of slots before `before`, keeping each invariant's newest
        claim: it is what refuses the invariant's older slots (CLAIM), so no slot whose
        claim is gone can be claimed again."""
        with self.storage.transaction() as tx:
            tx.run(
                "DELETE FROM slot_claims WHERE finished_at IS NOT NULL AND slot < ?"
                " AND EXISTS (SELECT 1 FROM slot_claims later"
                "  WHERE later.invariant = slot_claims.invariant"
                "  AND later.slot > slot_claims.slot)",
                (stamp(before),),
            )


def finish(tx: Tx, claim: Claim, now: datetime) -> bool:
    """Close the claim as run, in the transaction that stores the run; False when this
    daemon no longer holds it (another took it over), and then nothing may be stored."""
    return bool(
        tx.rows(
            "UPDATE slot_claims SET finished_at = ?, outcome = 'run' WHERE invariant = ?"
            " AND slot = ? AND owner = ? AND finished_at IS NULL RETURNING invariant",
            (stamp(now), claim.invariant, stamp(claim.slot), claim.owner),
        )
    )
