"""Log lines: secrets masked wherever they appear, and a JSON line is always JSON."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from monitor.execution.rows import key_values, offending_key
from monitor.logs import JsonFormatter, TextFormatter, redact, setup_logging

SECRET = "hunter2pass"
LEAKS = [
    f"cannot connect: password={SECRET} host=db",
    f"cannot connect: password='{SECRET} x' host=db",
    f"postgresql://invmon:{SECRET}@db:5432/app",
    f"postgresql://:{SECRET}@db/app",
    f"token xoxb-{SECRET}-1 refused",
    f'{{"password": "{SECRET}"}}',
    f"password: {SECRET}",
]


def record(
    message: str, fields: dict[str, object] | None = None, error: bool = False
) -> logging.LogRecord:
    exc_info = None
    if error:
        try:
            raise RuntimeError(message)
        except RuntimeError:
            exc_info = sys.exc_info()
    rec = logging.LogRecord("invmon", logging.ERROR, __file__, 1, message, (), exc_info)
    if fields is not None:
        rec.fields = fields
    return rec


@pytest.mark.parametrize("leak", LEAKS)
def test_a_secret_is_masked_in_the_message_the_fields_and_the_exception(leak: str) -> None:
    for formatter in (TextFormatter(), JsonFormatter()):
        for rec in (
            record(leak),
            record("evaluated x", {"error": leak, "nested": {"why": [leak]}}),
            record("failed", error=True, fields={"invariant": "x"}),
        ):
            if rec.exc_info:
                rec.exc_info = (RuntimeError, RuntimeError(leak), rec.exc_info[2])
            line = formatter.format(rec)
            assert SECRET not in line, (type(formatter).__name__, line)


@pytest.mark.parametrize("leak", LEAKS)
def test_every_json_line_parses_back_with_its_fields(leak: str) -> None:
    rec = record(f"cannot connect: {leak}", {"invariant": "x", "error": leak, "count": 3})
    document = json.loads(JsonFormatter().format(rec))
    assert (document["invariant"], document["count"], document["level"]) == ("x", 3, "error")
    assert SECRET not in document["error"] and SECRET not in document["msg"]


def test_redaction_keeps_what_is_not_a_secret() -> None:
    assert redact("evaluated balance_ledger_drift: violated count=3") == (
        "evaluated balance_ledger_drift: violated count=3"
    )
    assert redact("postgresql://db:5432/app") == "postgresql://db:5432/app"


def test_offending_keys_read_as_tuples_in_text_and_as_arrays_in_json() -> None:
    keys = [
        offending_key({"problem": "missing_object", "subject": "5006"}, ["problem", "subject"]),
        offending_key({"problem": "unreferenced", "subject": "a b.pdf"}, ["problem", "subject"]),
    ]
    fields = {"event": "opened", "keys": [key_values(k) for k in keys], "count": 2}
    text = TextFormatter().format(record("event opened: orphaned_receipts", fields))
    assert text.endswith(
        'event=opened keys="[(missing_object, 5006), (unreferenced, a b.pdf)]" count=2'
    ), text
    document = json.loads(JsonFormatter().format(record("event opened", fields)))
    assert document["keys"] == [["missing_object", "5006"], ["unreferenced", "a b.pdf"]]


def test_a_one_column_key_reads_as_its_value() -> None:
    fields: dict[str, object] = {"keys": [key_values(offending_key({"id": 7}, ["id"])), [None]]}
    assert TextFormatter().format(record("x", fields)).endswith('keys="[7, null]"')


@pytest.mark.parametrize(
    ("logger", "message", "shown"),
    [
        (
            "apscheduler.scheduler",
            'Execution of job "Daemon.tick (trigger: interval[0:00:01])" skipped: maximum '
            "number of running instances reached (1)",
            False,
        ),
        ("apscheduler.executors.ticks", 'Run time of job "tick" was missed by 0:00:02', False),
        ("apscheduler.executors.ticks", 'Job "tick" raised an exception', True),
        ("invmon.daemon", "maximum number of running instances reached", True),
    ],
)
def test_the_scheduler_speaks_only_when_it_means_something(
    logger: str, message: str, shown: bool
) -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        setup_logging("text", "INFO")
        handler = root.handlers[0]
        rec = logging.LogRecord(logger, logging.WARNING, __file__, 1, message, (), None)
        assert bool(handler.filter(rec)) == shown
    finally:  # the root logger is the process's: leave it as pytest set it up
        root.handlers[:], root.level = handlers, level


def test_a_pools_warning_at_each_failed_reconnect_is_not_logged() -> None:
    """A database away for two minutes drew 86 of them; invmon says it once a minute."""
    root, pool = logging.getLogger(), logging.getLogger("psycopg.pool")
    handlers, level, pool_level = list(root.handlers), root.level, pool.level
    try:
        setup_logging("text", "INFO")
        assert pool.isEnabledFor(logging.WARNING) is False
        assert pool.isEnabledFor(logging.ERROR) is True
    finally:  # the loggers are the process's: leave them as pytest set them up
        root.handlers[:], root.level = handlers, level
        pool.setLevel(pool_level)
