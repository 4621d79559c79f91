"""Personal data in offending rows, masked before a row goes anywhere. Pure.

Rows leave the database for Slack, the CSV, the state store, logs and `check` output, and
they often hold personal data. A value is masked when its column's name matches a pattern
(config `redact.columns`, plus the file's `redact:`, minus its `show:`), and wherever a
string (or a long number) looks like an email, a card number with a valid Luhn digit or an
IBAN with a valid checksum, whatever its column (a bare number is taken for a card only at 15
or 16 digits, so ids such as 18-digit snowflakes stay readable). Applied once, where rows are read
(offending.py), so every path out gets the same masked rows.

A masked value is `[masked:<12 hex>]`: a keyed hash (HMAC-SHA256) of the value, so rows stay
distinguishable, the same value masks the same way across runs, and nobody without the key
can find the value by hashing a dictionary of emails.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Detector = Literal["email", "card", "iban"]
DETECTORS: tuple[Detector, ...] = ("email", "card", "iban")

# Matched against each word of a column's name (`customer_email` -> customer, email;
# `cardNumber` -> card, number), so `pan` masks `pan` but not `company`.
DEFAULT_COLUMNS: tuple[str, ...] = (
    "email*",
    "e?mail",
    "phone*",
    "mobile*",
    "msisdn",
    "card*",
    "pan",
    "cvv",
    "cvc",
    "iban",
    "token*",
    "password*",
    "passwd",
    "pwd",
    "secret*",
    "ssn",
    "national",
    "passport*",
    "address*",
    "street*",
    "postcode*",
    "zip*",
    "ip",
    "ipaddr*",
    "dob",
    "birth*",
)

_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_CARD = re.compile(r"(?<![0-9])[0-9](?:[ -]?[0-9]){12,18}(?![0-9])")
_IBAN = re.compile(r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}\b")


def words(column: str) -> list[str]:
    return [w.lower() for w in _WORD_SPLIT.split(column) if w]


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = int(ch)
        if i % 2 == 1:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def _looks_like_card(digits: str, separated: bool) -> bool:
    """A card number: Luhn-valid, 13 to 19 digits when written in groups, else 15 or 16 (a
    bare 18-digit number is far more often an id, such as a snowflake, than a card)."""
    lengths = range(13, 20) if separated else range(15, 17)
    return len(digits) in lengths and luhn_valid(digits)


def iban_valid(text: str) -> bool:
    compact = text.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(ch, 36)) for ch in rearranged)
    return int(number) % 97 == 1


@dataclass(frozen=True)
class Redaction:
    """What is masked, for every invariant (config `redact:`)."""

    key: bytes
    columns: tuple[str, ...] = DEFAULT_COLUMNS
    detectors: tuple[Detector, ...] = DETECTORS
    enabled: bool = True

    def mask(self, value: Any) -> str:
        digest = hmac.new(self.key, json.dumps(value, sort_keys=True).encode(), hashlib.sha256)
        return f"[masked:{digest.hexdigest()[:12]}]"

    def masker(self, redact: Iterable[str] = (), show: Iterable[str] = ()) -> Masker:
        return Masker(self, tuple(redact), frozenset(show))


class Masker:
    """The masking of one invariant's rows: the global patterns, its `redact:` columns,
    and its `show:` columns let through."""

    def __init__(self, redaction: Redaction, redact: tuple[str, ...], show: frozenset[str]):
        self._r = redaction
        self._redact = frozenset(redact)
        self._show = show
        self._by_column: dict[str, bool] = {}

    def masks_column(self, column: str) -> bool:
        """Whether every value of `column` is masked (by name, not by content)."""
        known = self._by_column.get(column)
        if known is None:
            known = column not in self._show and (
                column in self._redact
                or any(
                    fnmatch.fnmatchcase(word, pattern)
                    for word in words(column)
                    for pattern in self._r.columns
                )
            )
            self._by_column[column] = known
        return known

    def row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        if not self._r.enabled:
            return dict(row)
        out: dict[str, Any] = {}
        for column, value in row.items():
            if value is None or column in self._show:
                out[column] = value
            elif self.masks_column(column):
                out[column] = self._r.mask(value)
            else:
                out[column] = self.value(value)
        return out

    def value(self, value: Any) -> Any:
        """`value` with what the detectors find in it masked, structure kept."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int):
            digits = str(abs(value))
            if "card" in self._r.detectors and _looks_like_card(digits, separated=False):
                return self._r.mask(digits)
            return value
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value

    def text(self, text: str) -> str:
        """`text` with each email, card number and IBAN in it masked (error messages too)."""
        if not self._r.enabled:
            return text
        found = self._r.detectors
        if "email" in found and "@" in text:
            text = _EMAIL.sub(lambda m: self._r.mask(m.group(0)), text)
        if "card" in found:
            text = _CARD.sub(self._card, text)
        if "iban" in found:
            text = _IBAN.sub(self._iban, text)
        return text

    def _card(self, match: re.Match[str]) -> str:
        found = match.group(0)
        digits = re.sub(r"[ -]", "", found)
        separated = digits != found
        return self._r.mask(digits) if _looks_like_card(digits, separated) else found

    def _iban(self, match: re.Match[str]) -> str:
        found = match.group(0)
        return self._r.mask(found.replace(" ", "")) if iban_valid(found) else found


NO_REDACTION = Redaction(key=b"", enabled=False)
