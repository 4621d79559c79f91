"""Personal data in offending rows is masked on every path out: Slack, the CSV, the state
store, logs and `check` output; only `check --show-values` prints it, with a warning."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path

import pytest
from fake_slack import FakeSlack
from helpers import CHECK, cli
from scenario import World, settle

from monitor.execution.redaction import Redaction, iban_valid, luhn_valid, words

PERSONAL = """\
-- description: No customer is flagged.
-- key: [id]
SELECT 1 AS id, 'ann@example.com' AS contact, 'paid with 4111 1111 1111 1111' AS note,
       'GB82 WEST 1234 5698 7654 32' AS account, 'Ann Smith' AS customer_email,
       'kept' AS secret_word
"""
RAW = (
    "ann@example.com",
    "4111 1111 1111 1111",
    "4111111111111111",
    "GB82 WEST 1234 5698 7654 32",
    "GB82WEST12345698765432",
    "Ann Smith",
)


def leaked(text: str) -> list[str]:
    return [raw for raw in RAW if raw in text]


def test_every_path_out_of_the_daemon_is_masked(
    world: World, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    (world.folder / "flagged.sql").write_text(PERSONAL)
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        daemon.evaluate("flagged")
        settle(daemon, world.clock, "opened")
        daemon.databases.close()
    slack = json.dumps([[m.text, m.blocks] for m in fake.messages], ensure_ascii=False)
    files = "".join((f.data or b"").decode() for f in fake.files.values())
    assert "[masked:" in slack and "[masked:" in files
    assert (leaked(slack), leaked(files)) == ([], [])
    with sqlite3.connect(tmp_path / "state.db") as db:
        dump = "\n".join(db.iterdump())
    assert "[masked:" in dump and leaked(dump) == []
    assert leaked(caplog.text) == []


def test_check_masks_in_every_format_unless_asked_not_to(database: str, tmp_path: Path) -> None:
    (tmp_path / "flagged.sql").write_text(PERSONAL)
    for fmt in ("table", "json", "markdown"):
        done = cli(*CHECK, "--dsn", database, "--invariants", str(tmp_path), "--format", fmt)
        assert done.returncode == 1, done.stderr
        assert "[masked:" in done.stdout and leaked(done.stdout) == [], fmt
    shown = cli(
        *CHECK,
        "--dsn",
        database,
        "--invariants",
        str(tmp_path),
        "--format",
        "json",
        "--show-values",
    )
    row = json.loads(shown.stdout)["results"][0]["rows"][0]
    assert row["contact"] == "ann@example.com" and row["customer_email"] == "Ann Smith"
    assert "prints offending rows unmasked" in shown.stderr


def test_a_value_masks_the_same_way_each_time_and_differently_under_another_key() -> None:
    one, other = Redaction(b"k1").masker(), Redaction(b"k2").masker()
    row = {"email": "ann@example.com"}
    assert one.row(row) == one.row(row) != other.row(row)
    assert one.row({"email": "bob@example.com"}) != one.row(row)


def test_columns_match_by_word_and_files_can_add_or_let_through() -> None:
    masker = Redaction(b"k").masker(redact=["nickname"], show=["card_brand"])
    row = masker.row(
        {
            "company": "ACME",
            "pan": "x",
            "cardNumber": "1",
            "card_brand": "VISA",
            "nickname": "annie",
            "ip": "10.0.0.1",
            "amount": 12,
        }
    )
    assert {k for k, v in row.items() if str(v).startswith("[masked:")} == {
        "pan",
        "cardNumber",
        "nickname",
        "ip",
    }
    assert words("customerEmail_address") == ["customer", "email", "address"]


@pytest.mark.parametrize(
    ("value", "masked"),
    [
        ("4111 1111 1111 1111", True),  # Luhn-valid, grouped
        ("4111111111111111", True),
        ("4111 1111 1111 1112", False),  # Luhn fails
        (4111111111111111, True),
        (123456789012345678, False),  # a bare 18-digit id (a snowflake) is not a card
        ("2026-11-30 12:00:00", False),
        ("GB82 WEST 1234 5698 7654 32", True),
        ("GB82 WEST 1234 5698 7654 33", False),  # checksum fails
        ("write to a.b+c@mail.example.org today", True),
        ("not an email: a@b", False),
        # What a review got past the detectors: other separators, full-width characters,
        # a card stored as a float, a dashed lower-case IBAN.
        ("4111.1111.1111.1111", True),
        ("4111/1111/1111/1111", True),
        ("4111_1111_1111_1111", True),
        ("4111\t1111\t1111\t1111", True),
        ("4111\u00a01111\u00a01111\u00a01111", True),
        ("4111  1111  1111  1111", True),
        ("3782.822463.10005", True),  # Amex's 4-6-5
        ("\uff14" + "\uff11" * 15, True),  # 4111111111111111 in full-width digits
        (4111111111111111.0, True),
        ([4111111111111111.0], True),
        ("carol\uff20example.com", True),
        ("gb82-west-1234-5698-7654-32", True),
        ("2026/12/05 2026/12/06", False),  # a date range is no card
        ("release 2026.12.05.1", False),
        (1234.5, False),
        ("batch_2024_0615_1234_5678", False),  # year-led: no card network starts so
        ("4242_4242_4242_4242", True),
    ],
)
def test_detectors_find_what_they_should_and_nothing_else(value: object, masked: bool) -> None:
    out = Redaction(b"k").masker().value(value)
    assert ("[masked:" in str(out)) == masked, out


def test_luhn_and_iban_checks() -> None:
    assert luhn_valid("79927398713") and not luhn_valid("79927398710")
    assert iban_valid("DE89 3704 0044 0532 0130 00") and not iban_valid(
        "DE89 3704 0044 0532 0130 01"
    )


def test_the_email_detector_is_linear_on_a_long_run_before_an_at() -> None:
    """A minute per 100 KB before: reachable through a database error quoting a value."""
    masker = Redaction(b"k").masker()
    for text in ("a" * 100_000 + "\uff20", "a" * 100_000 + "@", "x@y." * 20_000):
        started = time.process_time()
        masker.text(text)
        assert time.process_time() - started < 5, len(text)  # a wedge bound, not a benchmark
