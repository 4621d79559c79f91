"""Personal data in offending rows, masked before a row goes anywhere. Pure.

Rows leave the database for Slack, the CSV, the state store, logs and `check` output, and
they often hold personal data. A value is masked when its column's name matches a pattern
(config `redact.columns`, plus the file's `redact:`, minus its `show:`), and wherever a
string (or a long number) looks like an email, a card number with a valid Luhn digit or an
IBAN with a valid checksum, whatever its column (a bare number is taken for a card only at 15
or 16 digits, so ids such as 18-digit snowflakes stay readable). The detectors look at every
string inside a value: jsonb keys as well as jsonb values, and the bytes of a `bytea` (read as
UTF-8) as well as text. Applied once, where rows are read (offending.py), so every path out
gets the same masked rows.

A value the database cut (longer than `limits.cell_bytes`) is shown as its start; a detected
value may run past the cut, so the start's tail is masked whenever it could be the beginning
of one (`Masker.cut`, the rule is written there).

A masked value is `[masked:<12 hex>]`: a keyed hash (HMAC-SHA256) of the value, so rows stay
distinguishable, the same value masks the same way across runs, and nobody without the key
can find the value by hashing a dictionary of emails.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import hmac
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Detector = Literal["email", "card", "iban"]
DETECTORS: tuple[Detector, ...] = ("email", "card", "iban")

# Matched against each word of a column's name and each run of its words joined by `_`
# (`customer_email` -> customer, email, customer_email; `cardNumber` -> card, number,
# card_number; `e_mail` -> e, mail, e_mail), so `pan` masks `pan` but not `company`, and
# `first_name` masks `firstName` and `customer_first_name`. A bare `name` is left out: it is
# far more often a product's or an invariant's name than a person's (add it with
# `redact: [name]`).
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
    "full_name",
    "fullname",
    "first_name",
    "firstname",
    "last_name",
    "lastname",
    "surname",
    "given_name",
    "family_name",
    "middle_name",
    "maiden_name",
)

_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
# Letters of any script (`jörg@exämple.de`), and punycode top-level domains (`xn--p1ai`).
_LOCAL = r"[\w.%+'-]"
# `@` or its full-width form (U+FF20), which a mail client reads as an @.
# Bounded as addresses are (a local part of at most 64, labels of at most 63): unbounded,
# a long run of letters ending in an @ with no domain took a minute per 100 KB to refuse.
_EMAIL = re.compile(
    _LOCAL + r"{1,64}[@\uff20](?:[\w-]{1,63}\.){1,8}(?:xn--[\w-]{1,59}|[^\W\d_]{2,63})"
)
# A card's digits (any script's: full-width ones too), bare or with single spaces or dashes
# anywhere; or in its printed groups (4-4-4-4, up to 4-4-4-4-3, or 4-6-5) split by up to two
# of the separators people and programs write, the same throughout: spaces (no-break ones
# too), tabs, - . / _. Groups, so that a date range (2026/12/05 2026/12/06) is no card.
_CARD_SEPARATOR = r"[ \t\u00a0\u2007\u202f./_-]{1,2}"
_CARD = re.compile(
    r"(?<!\d)(?:\d(?:[ -]?\d){12,18}"
    rf"|\d{{4}}(?P<s>{_CARD_SEPARATOR})\d{{4}}(?P=s)\d{{4}}(?P=s)\d{{4}}(?:(?P=s)\d{{1,3}})?"
    rf"|\d{{4}}(?P<t>{_CARD_SEPARATOR})\d{{6}}(?P=t)\d{{4,5}})(?!\d)"
)
# Upper case, spaced anyhow (as before); and any case, compact or in groups of four as IBANs
# are printed (`gb82 west 1234 …`), a stricter shape so lower-case prose is not taken for one.
_IBAN = re.compile(r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}\b")
_IBAN_ANY_CASE = re.compile(
    r"\b[A-Za-z]{2}[0-9]{2}"
    r"(?:[A-Za-z0-9]{11,30}|(?P<g>[ -])[A-Za-z0-9]{4}(?:(?P=g)[A-Za-z0-9]{4}){1,6}"
    r"(?:(?P=g)[A-Za-z0-9]{1,4})?)\b"
)

# The tail of a cut text that could be the beginning of a card or an IBAN (see Masker.cut):
# both are short (at most 37 and 42 characters), so only the last _SHORT_TAIL are looked at.
_CARD_START = re.compile(rf"(?<!\d)\d(?:(?:{_CARD_SEPARATOR})?\d){{3,}}(?:{_CARD_SEPARATOR})?$")
_IBAN_START = re.compile(r"\b[A-Za-z]{2}(?:[0-9]{1,2}(?: ?[A-Za-z0-9])* ?)?$")
_SHORT_TAIL = 64
_EMAIL_PUNCTUATION = frozenset("._%+'@-\uff20")


def _email_tail(text: str) -> int:
    """How many characters at the end of `text` could belong to an email address: the run
    of letters (any script), digits and `. _ % + ' @ -` it ends with (what _EMAIL matches,
    both sides of the `@`)."""
    n = len(text)
    while n and (text[n - 1].isalnum() or text[n - 1] in _EMAIL_PUNCTUATION):
        n -= 1
    return len(text) - n


def words(column: str) -> list[str]:
    return [w.lower() for w in _WORD_SPLIT.split(column) if w]


def name_parts(column: str) -> list[str]:
    """What a column-name pattern is matched against: each word, and each run of adjacent
    words joined by `_` (so a pattern of two words, `first_name` or `e?mail`, can match)."""
    split = words(column)
    return [
        "_".join(split[start:end])
        for start in range(len(split))
        for end in range(start + 1, len(split) + 1)
    ]


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
    bare 18-digit number is far more often an id, such as a snowflake, than a card), and
    starting as the card networks' numbers do: 3 to 6, or 2221 to 2720 (Mastercard's 2
    series). A year-led id (2024_0615_…, v2026.12.05…) is none, however its Luhn digit
    falls."""
    lengths = range(13, 20) if separated else range(15, 17)
    issued = digits[:1] in ("3", "4", "5", "6") or "2221" <= digits[:4] <= "2720"
    return len(digits) in lengths and issued and luhn_valid(digits)


def iban_valid(text: str) -> bool:
    compact = text.replace(" ", "").replace("-", "").upper()
    if not 15 <= len(compact) <= 34 or not compact.isascii() or not compact.isalnum():
        return False
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(ch, 36)) for ch in rearranged)
    return int(number) % 97 == 1


@dataclass(frozen=True)
class CutValue:
    """A value the database cut at `limits.cell_bytes`: its size and md5 (of its text form,
    as the server would send it) and the start of that text. `blob` is set for a bytea: its
    bytes (the prefix is then their base64)."""

    size: int
    digest: str
    prefix: str
    blob: bytes | None = None

    def shown(self, digest: bool = True) -> str:
        md5 = f", md5 {self.digest}" if digest else ""
        if self.blob is not None:
            shown = base64.b64encode(self.blob).decode()
            of = f", md5 of its \\x text {self.digest}" if digest else ""
            return f"{shown}… [cut: {(self.size - 2) // 2:,} bytes in all{of}]"
        return f"{self.prefix}… [cut: {self.size:,} bytes in all{md5}]"


def plain(value: Any) -> Any:
    """`value` JSON-safe, unmasked: bytes as base64, a cut value as its text."""
    if isinstance(value, CutValue):
        return value.shown()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Redaction:
    """What is masked, for every invariant (config `redact:`)."""

    key: bytes = field(repr=False)  # who knows it can test guesses against a mask
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
        self._by_field: dict[str, bool] = {}

    def masks_column(self, column: str) -> bool:
        """Whether every value of `column` is masked (by name, not by content)."""
        known = self._by_column.get(column)
        if known is None:
            known = column not in self._show and (
                column in self._redact or self._matches_patterns(column)
            )
            self._by_column[column] = known
        return known

    def _matches_patterns(self, name: str) -> bool:
        return any(
            fnmatch.fnmatchcase(part, pattern)
            for part in name_parts(name)
            for pattern in self._r.columns
        )

    def _masks_field(self, key: str) -> bool:
        """Whether a jsonb field's value is masked by its key's name (the global patterns:
        `{"phone": "+44 …"}` is masked like a `phone` column)."""
        known = self._by_field.get(key)
        if known is None:
            known = self._by_field[key] = self._matches_patterns(key)
        return known

    def row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The row masked and JSON-safe. Its values are loaded values made JSON-safe
        (rows.json_safe), except bytes (a bytea, still bytes so its content can be read) and
        CutValue (a value the database cut)."""
        if not self._r.enabled:
            return {column: plain(value) for column, value in row.items()}
        out: dict[str, Any] = {}
        for column, value in row.items():
            if value is None or column in self._show:
                out[column] = plain(value)
            elif self.masks_column(column):
                out[column] = self._r.mask(plain(value))
            else:
                out[column] = self.value(value)
        return out

    def value(self, value: Any) -> Any:
        """`value` with what the detectors find in it masked, structure kept, JSON-safe."""
        if not self._r.enabled:
            return plain(value)
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float) and (isinstance(value, int) or value.is_integer()):
            # A card number stored as a number (a float8 column, a jsonb number) is one too.
            digits = str(abs(int(value)))
            if "card" in self._r.detectors and _looks_like_card(digits, separated=False):
                return self._r.mask(digits)
            return value
        if isinstance(value, CutValue):
            return self.cut(value)
        if isinstance(value, bytes | bytearray | memoryview):
            return self._blob(bytes(value))
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return self._object(value)
        return value

    def _object(self, value: dict[str, Any]) -> dict[str, Any]:
        """A jsonb object: keys are data too (`{"grace@example.com": true}`), so each goes
        through the detectors; a field whose key names personal data is masked whole."""
        out: dict[str, Any] = {}
        for key, item in value.items():
            if item is not None and self._masks_field(key):
                shown = self._r.mask(plain(item))
            else:
                shown = self.value(item)
            name = self.text(key)
            # Two keys could mask to one text only if one key is literally the other's mask;
            # a dict cannot hold both, so the later one is told apart rather than dropped.
            unique, n = name, 1
            while unique in out:
                n += 1
                unique = f"{name} ({n})"
            out[unique] = shown
        return out

    def _blob(self, blob: bytes) -> str:
        """A bytea, as base64; masked whole when its bytes read as UTF-8 hold a detected
        value (base64 would carry an email out unread by the detectors)."""
        shown = base64.b64encode(blob).decode("ascii")
        decoded = blob.decode("utf-8", errors="replace")
        return self._r.mask(shown) if self.text(decoded) != decoded else shown

    def cut(self, value: CutValue) -> str:
        """A value the database cut, shown so that no part of a detected value gets through.

        The rule: detected values wholly inside the shown start are masked in place, as in
        any text. Then its tail, which the cut may have split, is masked when it could be the
        beginning of a detected value: a trailing run of the characters an email address is
        made of (letters of any script, digits and `. _ % + ' @ -`), a trailing run of four
        or more digits with single spaces or dashes between them (a card), or two letters,
        up to two digits and letters and digits with single spaces (an IBAN). The longest
        such tail is replaced by one mask, so the text before it stays readable, and a start
        that ends in a space or other punctuation is kept whole. The md5 of the whole value
        is left out when a detected value was masked in the start or the mask covers all of
        it: the md5 of a bare email is as easy to look up as the email.

        A bytea is masked whole when its start, read as UTF-8, has anything masked so."""
        if value.blob is not None:
            text = value.blob.decode("utf-8", errors="replace")
            if self._cut_text(text, value)[0] != text:
                whole = self._r.mask(value.shown())
                return f"{whole} [cut: {(value.size - 2) // 2:,} bytes in all]"
            return value.shown()
        masked, bare = self._cut_text(value.prefix, value)
        if masked == value.prefix:
            return value.shown()
        return CutValue(value.size, value.digest, masked).shown(digest=not bare)

    def _cut_text(self, prefix: str, whole: CutValue) -> tuple[str, bool]:
        """(the start with what may be personal masked, whether the md5 must go too). The
        tail's mask is of the whole value (its size and md5): two values with the same start
        stay apart."""
        detectors = self._r.detectors
        # A card's or an IBAN's start is judged on the start as it came: masked first, an
        # IBAN's digits can pass for a card, and its letters would be left shown (FR[…]).
        window = prefix[-_SHORT_TAIL:]
        begun = 0
        for detector, start in (("card", _CARD_START), ("iban", _IBAN_START)):
            found = start.search(window) if detector in detectors else None
            if found:
                begun = max(begun, len(found.group(0)))
        head = prefix[: len(prefix) - begun]
        masked = self.text(head)
        tail = _email_tail(masked) if "email" in detectors else 0
        # The md5 goes when anything before the tail was masked, or nothing is left shown.
        bare = masked != head or tail == len(masked)
        if begun:  # the start of a card or an IBAN is masked, with any email's tail
            masked, tail = masked[: len(masked) - tail], 0
        elif not tail and not bare:
            return masked, bare
        # With the md5 gone, the mask of the whole value (its size and md5) keeps two long
        # values apart that differ only past the cut: they stay two offending keys.
        return masked[: len(masked) - tail] + self._r.mask(["cut", whole.size, whole.digest]), bare

    def text(self, text: str) -> str:
        """`text` with each email, card number and IBAN in it masked (error messages too)."""
        if not self._r.enabled:
            return text
        found = self._r.detectors
        if "email" in found and ("@" in text or "\uff20" in text):
            text = _EMAIL.sub(lambda m: self._r.mask(m.group(0)), text)
        # IBANs before cards: an IBAN's digits can pass for a card and leave its letters.
        if "iban" in found:
            text = _IBAN.sub(self._iban, text)
            text = _IBAN_ANY_CASE.sub(self._iban, text)
        if "card" in found:
            text = _CARD.sub(self._card, text)
        return text

    def _card(self, match: re.Match[str]) -> str:
        found = match.group(0)
        # Each digit as its value, full-width or not: one card masks one way however written.
        digits = "".join(str(unicodedata.decimal(ch)) for ch in found if ch.isdecimal())
        separated = len(digits) != len(found)
        return self._r.mask(digits) if _looks_like_card(digits, separated) else found

    def _iban(self, match: re.Match[str]) -> str:
        found = match.group(0)
        # The shape can run on into the next word (`… 0130 00 and`, `… 3000 note`): then the
        # IBAN is the match up to one of its spaces, longest first.
        ends = [len(found)] + [i for i in range(len(found) - 1, 0, -1) if found[i] in " -"]
        for end in ends:
            if iban_valid(found[:end]):
                # One IBAN masks one way however it is written.
                compact = found[:end].replace(" ", "").replace("-", "").upper()
                return self._r.mask(compact) + found[end:]
        return found


NO_REDACTION = Redaction(key=b"", enabled=False)
