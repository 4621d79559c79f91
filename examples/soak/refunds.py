"""A small refunds service over invmon's reference schema (deploy/demo/schema.sql), in two
versions, and the retrying client that calls it.

A refund pays a dispute back as store credit: the refund row is written `pending`, the
payment provider is asked to pay, and the settlement (the refund `settled`, the account's
cached balance and its ledger entry) is written in one transaction.

- `DedupAtWrite` deduplicates where the refund is written: the refund's id is derived from
  the work (the dispute it pays back), the primary key makes a second insert a no-op, the
  provider is asked with that id as its idempotency key, and only the first settlement of
  a pending refund credits the account.
- `CheckThenCreate` looks for an existing refund and creates one if it finds none. Between
  its check and its insert another request for the same dispute can do the same, and both
  pay. The soak finds this; nothing in the code looks wrong.

Each method is a turn (chaos.py): it yields where another request may run.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

import psycopg
from chaos import Faults, Reset, Timeout, Turn


@dataclass
class Provider:
    """The payment provider, in memory: pays once per idempotency key, and once per call
    without one."""

    by_key: dict[str, str] = field(default_factory=dict)
    payments: int = 0

    def pay(self, amount: Decimal, key: str | None = None) -> str:
        if key is not None and key in self.by_key:
            return self.by_key[key]
        self.payments += 1
        reference = f"pay_{self.payments}"
        if key is not None:
            self.by_key[key] = reference
        return reference


@dataclass
class RefundService:
    conn: psycopg.Connection
    provider: Provider

    def refund(self, dispute_id: int) -> Turn[int]:
        raise NotImplementedError

    def _amount(self, dispute_id: int) -> Decimal:
        row = self.conn.execute(
            "SELECT amount_eur FROM disputes WHERE dispute_id = %s", (dispute_id,)
        ).fetchone()
        assert row is not None, f"no dispute {dispute_id}"
        return Decimal(row[0])

    def _settle(self, refund_id: int, reference: str) -> None:
        """The refund settled and the account credited, in one transaction; a refund already
        settled is left as it is (the update matches only a pending one)."""
        with self.conn.transaction():
            settled = self.conn.execute(
                "UPDATE refunds AS r SET status = 'settled', provider_ref = %s, settled_at = now()"
                " FROM disputes AS d WHERE r.refund_id = %s AND r.status = 'pending'"
                " AND d.dispute_id = r.dispute_id RETURNING d.account_id, r.amount_eur",
                (reference, refund_id),
            ).fetchone()
            if settled is None:
                return
            account_id, amount = settled
            self.conn.execute(
                "UPDATE accounts SET credit_balance_eur = credit_balance_eur + %s"
                " WHERE account_id = %s",
                (amount, account_id),
            )
            self.conn.execute(
                "INSERT INTO credit_log (account_id, amount_eur, reason) VALUES (%s, %s, %s)",
                (account_id, amount, f"refund {refund_id}"),
            )


@dataclass
class DedupAtWrite(RefundService):
    def refund(self, dispute_id: int) -> Turn[int]:
        # One refund pays one dispute back in full, so the dispute names the refund: a
        # retried or duplicated request writes the same row, and the key refuses the second.
        refund_id = dispute_id
        amount = self._amount(dispute_id)
        self.conn.execute(
            "INSERT INTO refunds (refund_id, dispute_id, amount_eur, status)"
            " VALUES (%s, %s, %s, 'pending') ON CONFLICT (refund_id) DO NOTHING",
            (refund_id, dispute_id, amount),
        )
        yield
        reference = self.provider.pay(amount, key=f"refund-{refund_id}")
        yield
        self._settle(refund_id, reference)
        return refund_id


@dataclass
class CheckThenCreate(RefundService):
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))

    def refund(self, dispute_id: int) -> Turn[int]:
        found = self.conn.execute(
            "SELECT refund_id FROM refunds WHERE dispute_id = %s AND status <> 'failed'",
            (dispute_id,),
        ).fetchone()
        if found is not None:
            return int(found[0])
        yield  # the race: another request for this dispute may check here too
        refund_id = next(self.ids)
        amount = self._amount(dispute_id)
        self.conn.execute(
            "INSERT INTO refunds (refund_id, dispute_id, amount_eur, status)"
            " VALUES (%s, %s, %s, 'pending')",
            (refund_id, dispute_id, amount),
        )
        yield
        reference = self.provider.pay(amount)
        yield
        self._settle(refund_id, reference)
        return refund_id


@dataclass
class Client:
    """Asks for a refund, and retries when the call's outcome is unknown or it failed."""

    service: RefundService
    faults: Faults
    attempts: int = 4
    gave_up: int = 0
    # Deliveries that reached the service while another for the same dispute was running
    # there: the overlap the soak is for, counted so a run can show it happened.
    met: int = 0
    in_flight: Counter[int] = field(default_factory=Counter)

    def request_refund(self, dispute_id: int) -> Turn[int | None]:
        for _ in range(self.attempts):
            try:
                return (yield from self.faults.call(lambda: self._delivered(dispute_id)))
            except (Timeout, Reset):
                yield  # back off: other requests run before this one tries again
        self.gave_up += 1
        return None

    def _delivered(self, dispute_id: int) -> Turn[int]:
        self.met += self.in_flight[dispute_id] > 0
        self.in_flight[dispute_id] += 1
        try:
            return (yield from self.service.refund(dispute_id))
        finally:
            self.in_flight[dispute_id] -= 1


SERVICES: dict[str, type[RefundService]] = {
    "dedup_at_write": DedupAtWrite,
    "check_then_create": CheckThenCreate,
}
