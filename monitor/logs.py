"""Structured logs, as text for people or JSON for collectors, with secrets masked.

Secrets can reach a log line by accident (a DSN inside a driver error, a token in an HTTP
error), so the formatter masks every string that goes into a line (the message, each field,
the exception text) before it is assembled: a JSON line stays JSON.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

from monitor.text import printable

_SECRET_NAMES = r"password|passwd|pwd|secret|token|api[_-]?key"
_SECRETS = [
    # key=value and key: value, bare or quoted (libpq quotes with '…' and backslashes;
    # JSON and YAML with "…"): password='a\'b c', "password": "x", password: x
    (
        re.compile(
            rf"""(\b(?:{_SECRET_NAMES})["']?\s*[:=]\s*)('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s,;}}]+)""",
            re.I,
        ),
        r"\1***",
    ),
    # The password of a URL, even with no user: postgresql://:pw@host
    (re.compile(r"(://[^:/@\s]*:)[^@\s]+@"), r"\1***@"),
    (re.compile(r"\b(xox[abposr]|xapp)-[A-Za-z0-9-]+"), r"\1-***"),
]


def redact(text: str) -> str:
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def masked(value: Any) -> Any:
    """The value with every string in it redacted, keeping its structure."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {str(k): masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [masked(v) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact(str(value))


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return {str(k): masked(v) for k, v in fields.items()} if isinstance(fields, dict) else {}


def _line(text: str) -> str:
    """Masked, and on one line: a value holding a newline cannot forge a log line."""
    return printable(redact(text))


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        extra = " ".join(f"{printable(k)}={_scalar(v)}" for k, v in _fields(record).items())
        line = f"{stamp} {record.levelname:<7} {_line(record.getMessage())}"
        if extra:
            line += f"  {extra}"
        if record.exc_info:
            line += "\n" + redact(self.formatException(record.exc_info))
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
            **_fields(record),
        }
        if record.exc_info:
            document["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(document, ensure_ascii=False)


def _readable(value: Any, inner: bool = False) -> str:
    """A field's value as a person reads it: a list as [a, b], a list inside one (an
    offending key's values) as (a, b), strings unquoted; JSON is for the JSON format."""
    if isinstance(value, list):
        if inner and len(value) == 1:  # a one-column key reads as its value
            return _readable(value[0], inner=True)
        parts = ", ".join(_readable(v, inner=True) for v in value)
        return f"({parts})" if inner else f"[{parts}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_readable(v, True)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def _scalar(value: Any) -> str:
    text = _readable(value)
    # One level of quotes when the value has spaces: the line stays key=value splittable.
    return json.dumps(text, ensure_ascii=False) if (" " in text or not text) else printable(text)


# What APScheduler says when a job's turn comes while its last turn still runs, or comes
# late: invmon's jobs coalesce on purpose (a tick that overlaps the next is skipped, and the
# next one picks up what is due), and the watchdog reports a scheduler that stops ticking.
_EXPECTED_SCHEDULER_NOTES = ("maximum number of running instances reached", "was missed by")


def expected_scheduler_note(record: logging.LogRecord) -> bool:
    return record.name.startswith("apscheduler") and any(
        note in record.getMessage() for note in _EXPECTED_SCHEDULER_NOTES
    )


def setup_logging(fmt: str = "text", level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(lambda record: not expected_scheduler_note(record))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("apscheduler").setLevel(max(logging.WARNING, root.level))
    # The pools warn at every failed reconnect, several a minute for as long as a database
    # is away; invmon says that itself, once a minute (StoreHealth, a target's reachability).
    logging.getLogger("psycopg.pool").setLevel(max(logging.ERROR, root.level))
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
