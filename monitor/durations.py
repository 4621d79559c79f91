"""Parsing of human durations ("30s", "15m", "1h30m") and invariant schedules.

Pure functions: they take text and return values or raise ValueError with a sentence a user
can act on. Cron expressions are checked with APScheduler's own parser so that what lint
accepts is exactly what the scheduler will run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from monitor.text import shorten

MAX_SECONDS = 100 * 365 * 86400  # beyond, a typo: and timedelta itself ends near year 10000
# A run's transaction may sit idle this long past its statement timeout before the server
# ends it (idle_in_transaction_session_timeout, execute.read_only_settings).
IDLE_MARGIN = timedelta(seconds=30)
# PostgreSQL's timeouts are 32-bit counts of milliseconds, about 24.8 days; a run sets its
# idle limit IDLE_MARGIN past its statement timeout, so that is where a timeout must end.
MAX_STATEMENT_TIMEOUT = timedelta(milliseconds=2**31 - 1) - IDLE_MARGIN
MIN_INTERVAL = timedelta(seconds=1)
# How long a connection pool (psycopg_pool) keeps at one attempt to reconnect to a database
# that went away, at the least. It waits 1 s, then twice as long each time, with no ceiling,
# until the attempt's end: at its default of five minutes, a database back after three was
# next tried two minutes later (a fleet on a PostgreSQL store took 71 s to recover from a
# 2 min 52 s outage). Past it the attempt ends, and the next request for a connection starts
# a new one from 1 s. An attempt must also last as long as a request waits for a connection
# (reconnect_attempt), or a request would wait with no attempt under way.
RECONNECT_ATTEMPT = timedelta(seconds=8)


def reconnect_attempt(connection_wait: timedelta) -> float:
    """Seconds a pool's reconnect attempt lasts, for requests that wait `connection_wait`
    for a connection: a database back is found within about half of it (5 s for the
    default 10 s connect timeout)."""
    return max(RECONNECT_ATTEMPT, connection_wait).total_seconds()


_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def statement_timeout(value: Any) -> timedelta:
    """A `timeout:` (a header's, or the config's default): a duration PostgreSQL can run a
    statement for; ValueError otherwise."""
    delta = parse_duration(value)  # also refuses true/false, lists, maps
    if delta > MAX_STATEMENT_TIMEOUT:
        raise ValueError(
            f"{shorten(value, 20)} is longer than PostgreSQL allows a statement to run "
            "(statement_timeout is at most about 24 days)"
        )
    return delta


def parse_duration(value: str | int | float | timedelta, zero: bool = False) -> timedelta:
    """Read "250ms", "30s", "5m", "1h30m", "2d" or a bare number of seconds; `zero`: "0s"
    (or 0) is a value too, for a setting where none means off (daemon.jitter)."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        kind = "true/false" if isinstance(value, bool) else type(value).__name__
        raise ValueError(f"expected a duration such as 30s or 5m, got a {kind}")
    if isinstance(value, int | float):
        # A YAML integer has no bound: past a float's, it is just too long (below).
        seconds = float(value) if abs(value) < MAX_SECONDS else float(MAX_SECONDS)
    else:
        text = value.strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            seconds = float(text)
        else:
            parts = _PART.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise ValueError(
                    f"{shorten(value, 40)} is not a duration; write it like 30s, 5m, 1h or 1h30m"
                )
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if zero and seconds == 0:
        return timedelta(0)
    if not 0 < seconds < MAX_SECONDS:
        lowest = "0 (off) or more" if zero else "positive"
        raise ValueError(
            f"a duration must be {lowest} and under 100 years, got {shorten(value, 40)}"
        )
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """The inverse of parse_duration for display: 90s -> "1m30s"."""
    total = delta.total_seconds()
    if total < 1:
        return f"{round(total * 1000)}ms"
    whole = int(total)
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if whole >= size:
            out.append(f"{whole // size}{unit}")
            whole %= size
    return "".join(out) or "0s"


def precise_duration(delta: timedelta) -> str:
    """An elapsed time or a bound under a minute to the tenth of a second (under a second, to
    the millisecond): a run 0.4s past its 1s timeout, a lock timeout of 0.25s. From a
    minute up, as format_duration."""
    seconds = delta.total_seconds()
    if seconds >= 60:
        return format_duration(delta)
    return f"{round(seconds, 1 if seconds >= 1 else 3):g}s"


def human_duration(delta: timedelta) -> str:
    """For people, in Slack and on the page: the two largest units (3h 12m, 3m 59s), seconds
    dropped past an hour. Config values are shown exactly, by format_duration."""
    seconds = int(delta.total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    parts = []
    # Under an hour the seconds stay: "3m" for 3m59s read as a quarter less than it was.
    units = (("d", 86400), ("h", 3600), ("m", 60), *((("s", 1),) if seconds < 3600 else ()))
    for unit, size in units:
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return " ".join(parts[:2])


@dataclass(frozen=True)
class IntervalSchedule:
    every: timedelta

    def __str__(self) -> str:
        return f"every {format_duration(self.every)}"


@dataclass(frozen=True)
class CronSchedule:
    expression: str

    def __str__(self) -> str:
        return f"cron {self.expression}"


Schedule = IntervalSchedule | CronSchedule


def parse_schedule(text: str) -> Schedule:
    """Read "every 15m" or a five-field cron expression such as "*/10 * * * *"."""
    spec = " ".join(str(text).split())
    if spec.lower().startswith("every "):
        every = parse_duration(spec[6:])
        if every < MIN_INTERVAL:
            raise ValueError(
                f"{text!r} is shorter than a second: each run is a query on the replica and "
                "a row in the state store; run at most once a second"
            )
        return IntervalSchedule(every)
    fields = spec.split(" ")
    if len(fields) != 5:
        raise ValueError(
            f"{text!r} is not a schedule; write 'every 15m', 'every 1h' "
            "or a five-field cron expression such as '*/10 * * * *'"
        )
    try:
        trigger = cron_trigger(spec)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a valid cron expression: {exc}") from None
    if trigger.get_next_fire_time(None, datetime(2000, 1, 1, tzinfo=UTC)) is None:
        raise ValueError(f"{text!r} never fires (no such date), so the invariant would never run")
    return CronSchedule(spec)


_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _days_of_week(field: str) -> str:
    """A cron day-of-week field as day names. In cron 0 and 7 are Sunday and 1 is Monday;
    APScheduler 3 reads numbers with 0 as Monday, so "1" would silently mean Tuesday."""
    days: set[int] = set()
    for part in field.lower().split(","):
        span, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if span == "*":
            low, high = 0, 6
        else:
            ends = [_day_number(end) for end in span.split("-")]
            if len(ends) > 2:
                raise ValueError(f"day of week {part!r} is not a day, a range or a step")
            low, high = ends[0], ends[-1]
            if not step_text and len(ends) == 1:
                high = low
            elif not step_text and high < low:
                raise ValueError(f"day of week range {part!r} runs backwards")
            elif step_text and len(ends) == 1:
                high = 6
        if step < 1:
            raise ValueError(f"day of week step {part!r} must be at least 1")
        days.update(day % 7 for day in range(low, high + 1, step))
    return ",".join(_DAY_NAMES[d] for d in sorted(days))


def _day_number(text: str) -> int:
    if text in _DAY_NAMES:
        return _DAY_NAMES.index(text)
    if text.isdigit() and 0 <= int(text) <= 7:
        return int(text)
    raise ValueError(f"{text!r} is not a day of week (0-7, or sun-sat)")


def cron_trigger(expression: str) -> Any:
    """APScheduler's trigger for a five-field cron expression read as cron reads it."""
    from apscheduler.triggers.cron import CronTrigger

    minute, hour, day, month, weekday = expression.split()
    return CronTrigger(
        minute=minute,
        hour=hour,
        day=day,
        month=month,
        day_of_week=_days_of_week(weekday),
        timezone="UTC",
    )
