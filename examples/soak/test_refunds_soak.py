"""The refunds soak: many concurrent requests for a few disputes, faults at the service's
boundary, and after each seed the four invariants the daemon runs in production, asserted
by invmon's pytest plugin (the `invariants` marker: one line per test)."""

from __future__ import annotations

import random
from decimal import Decimal

import psycopg
import pytest
from chaos import Faults, Scheduler, arriving
from refunds import SERVICES, Client, Provider

ACCOUNTS = 3
DISPUTES = 4  # few disputes, many turns: two turns on one dispute in almost every seed
TURNS = 12
ARRIVALS = 30  # requests arrive over this many scheduler steps, not all at once


@pytest.mark.invariants
@pytest.mark.parametrize("service", sorted(SERVICES, reverse=True))
def test_refunds_soak(conn: psycopg.Connection, service: str, seed: int) -> None:
    rng = random.Random(seed)
    for account in range(1, ACCOUNTS + 1):
        conn.execute(
            "INSERT INTO accounts (account_id, email) VALUES (%s, %s)",
            (account, f"customer{account}@example.com"),
        )
    disputes = list(range(1, DISPUTES + 1))
    for dispute in disputes:
        amount = Decimal(rng.randrange(500, 20_000)) / 100
        conn.execute(
            "INSERT INTO disputes (dispute_id, account_id, reason, amount_eur)"
            " VALUES (%s, %s, 'soak', %s)",
            (dispute, rng.randint(1, ACCOUNTS), amount),
        )

    scheduler = Scheduler(rng)
    client = Client(SERVICES[service](conn, Provider()), Faults(rng, scheduler))
    asked = [rng.choice(disputes) for _ in range(TURNS)]
    for dispute in asked:
        scheduler.spawn(arriving(rng.randrange(ARRIVALS), client.request_refund(dispute)))
    scheduler.run()

    # What this seed exercised, for the run's log (`-s`, or shown beside a failure).
    faults = client.faults.injected
    print(
        f"soak seed={seed} service={service} requests={TURNS} met_in_flight={client.met} "
        f"resets={faults['reset']} duplicates={faults['duplicate']} "
        f"lost_replies={faults['lost_reply']} gave_up={client.gave_up} steps={scheduler.steps}"
    )
    # The invariants are asserted after this body by the marker, against `conn`'s database.
