"""Pure decisions, in milliseconds: slots and jitter, routing precedence, how Slack errors
are classified, the backoff. Each table of cases is run by one parametrized test."""

from __future__ import annotations

import socket
import urllib.error
from datetime import UTC, datetime, timedelta

import pytest

from alerts.routing import Route, route
from alerts.slack import classify_api_error, classify_exception
from alerts.worker import backoff
from monitor.config import RoutesConfig, SlackConfig
from monitor.daemon.slots import Timetable, latest_slot, next_slot, spread
from monitor.durations import parse_schedule
from monitor.store.records import IncidentContext

T0 = datetime(2026, 11, 30, 12, 7, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("schedule", "latest", "following"),
    [
        (
            "every 15m",
            datetime(2026, 11, 30, 12, 0, tzinfo=UTC),
            datetime(2026, 11, 30, 12, 15, tzinfo=UTC),
        ),
        ("every 1s", T0, T0 + timedelta(seconds=1)),
        (
            "*/10 * * * *",
            datetime(2026, 11, 30, 12, 0, tzinfo=UTC),
            datetime(2026, 11, 30, 12, 10, tzinfo=UTC),
        ),
        (
            "0 9 * * 1",
            datetime(2026, 11, 30, 9, 0, tzinfo=UTC),
            datetime(2026, 12, 7, 9, 0, tzinfo=UTC),
        ),
        ("0 0 1 1 *", datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
    ],
)
def test_slots_are_nominal_times_from_the_schedule_alone(
    schedule: str, latest: datetime, following: datetime
) -> None:
    parsed = parse_schedule(schedule)
    assert latest_slot(parsed, T0) == latest
    assert next_slot(parsed, T0) == following
    assert next_slot(parsed, latest) == following


@pytest.mark.parametrize(
    ("field", "days"),
    [
        ("1", "mon"),
        ("0", "sun"),
        ("7", "sun"),
        ("1-5", "mon,tue,wed,thu,fri"),
        ("*/2", "sun,tue,thu,sat"),
        ("sat,sun", "sun,sat"),
        ("5-7", "sun,fri,sat"),
        ("1/3", "mon,thu"),
    ],
)
def test_cron_days_of_week_are_read_as_cron_reads_them(field: str, days: str) -> None:
    from monitor.durations import _days_of_week

    assert _days_of_week(field) == days


def test_jitter_is_stable_per_slot_and_below_a_tenth_of_the_period() -> None:
    every = parse_schedule("every 10s")
    offsets = {spread(f"inv{i}", T0, every, timedelta(minutes=5)) for i in range(200)}
    assert max(offsets) < timedelta(seconds=1)
    assert len(offsets) > 150  # spread out, not all at once
    assert spread("a", T0, every, timedelta(seconds=10)) == spread(
        "a", T0, every, timedelta(seconds=10)
    )
    assert spread("a", T0, every, timedelta(0)) == timedelta(0)


def test_a_new_invariant_is_due_at_once_then_at_its_next_slot_never_twice_at_once() -> None:
    table = Timetable(max_jitter=timedelta(0))
    every = parse_schedule("every 1m")
    table.sync({"a": every}, T0)
    assert [(d.name, d.slot) for d in table.due(T0)] == [
        ("a", datetime(2026, 11, 30, 12, 7, tzinfo=UTC))
    ]
    assert table.due(T0 + timedelta(seconds=20)) == []
    at_next = datetime(2026, 11, 30, 12, 8, tzinfo=UTC)
    assert table.due(at_next, busy={"a"}) == []  # still running: no overlap
    # Ten minutes late, it runs once, for the latest slot (missed slots are coalesced).
    late = at_next + timedelta(minutes=10, seconds=5)
    assert [d.slot for d in table.due(late)] == [datetime(2026, 11, 30, 12, 18, tzinfo=UTC)]
    assert table.next_run("a") == datetime(2026, 11, 30, 12, 19, tzinfo=UTC)


def test_a_changed_schedule_waits_for_its_next_slot_and_a_removed_invariant_is_dropped() -> None:
    table = Timetable(max_jitter=timedelta(0))
    table.sync({"a": parse_schedule("every 1m")}, T0)
    table.due(T0)
    table.sync({"a": parse_schedule("every 5m")}, T0)
    assert table.next_run("a") == datetime(2026, 11, 30, 12, 10, tzinfo=UTC)
    table.sync({}, T0)
    assert "a" not in table and table.due(T0 + timedelta(hours=1)) == []


ROUTED = SlackConfig(
    channel="#default",
    routes=RoutesConfig(severity={"critical": "#pager"}, owner={"@payments": "#payments"}),
)


# The five routing rules, most specific first, each as the context fields that turn it on
# and the channel it then picks (slack.channel, last, is always on).
RULES: list[tuple[str, dict[str, str], str, str]] = [
    ("file", {"channel": "#own"}, "#own", "the file's channel:"),
    ("owner", {"owner": "@payments"}, "#payments", "slack.routes.owner @payments"),
    ("severity", {"severity": "critical"}, "#pager", "slack.routes.severity critical"),
    ("target", {"target_channel": "#shop", "target": "shop"}, "#shop", "targets.shop.channel"),
]


@pytest.mark.parametrize(
    ("higher", "lower"),
    [(h, lo) for h in range(len(RULES)) for lo in range(h + 1, len(RULES) + 1)],
    ids=lambda i: RULES[i][0] if i < len(RULES) else "slack.channel",
)
def test_each_routing_rule_outranks_every_later_one(higher: int, lower: int) -> None:
    """Every pair of rules: with both on (and nothing above them), the higher one picks the
    channel, and the route says which rule did."""
    fields: dict[str, str] = {"severity": "warning"}
    for index in (higher, lower):
        if index < len(RULES):
            fields.update(RULES[index][1])
    _, _, channel, why = RULES[higher]
    assert route(ROUTED, IncidentContext(**fields)) == Route(channel, why)  # type: ignore[arg-type]


def test_with_no_rule_on_the_default_channel_is_taken() -> None:
    assert route(ROUTED, IncidentContext(owner="@nobody")) == Route("#default", "slack.channel")


@pytest.mark.parametrize(
    ("status", "error", "retry_after", "kind", "wait"),
    [
        (429, "ratelimited", "7", "retry", 7.0),
        (429, "ratelimited", "1.5", "retry", 2.0),  # a fraction is rounded up, not dropped
        (429, "ratelimited", "soon", "retry", None),
        (429, "ratelimited", "nan", "retry", None),
        (429, "ratelimited", "-3", "retry", None),
        (200, "message_limit_exceeded", None, "retry", None),
        (500, "", None, "ambiguous", None),
        (200, "internal_error", None, "ambiguous", None),
        (200, "channel_not_found", None, "permanent", None),
        (200, "invalid_auth", None, "permanent", None),
        (200, "thread_not_found", None, "permanent", None),
        (200, "something_new", None, "ambiguous", None),  # unknown: reconcile, never drop
    ],
)
def test_slack_api_errors_are_classified_once(
    status: int, error: str, retry_after: str | None, kind: str, wait: float | None
) -> None:
    classified = classify_api_error(status, error, retry_after)
    assert (classified.kind, classified.retry_after) == (kind, wait)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (urllib.error.URLError(ConnectionRefusedError("refused")), "retry"),
        (urllib.error.URLError(socket.gaierror("no such host")), "retry"),
        (urllib.error.URLError(TimeoutError("slow")), "ambiguous"),
        (ConnectionResetError("reset"), "ambiguous"),
    ],
)
def test_network_failures_are_retried_only_when_the_request_never_left(
    exc: BaseException, kind: str
) -> None:
    assert classify_exception(exc).kind == kind


def test_backoff_doubles_up_to_its_ceiling() -> None:
    ceiling = timedelta(minutes=5)
    assert [backoff(n, ceiling).total_seconds() for n in range(1, 11)] == [
        2,
        4,
        8,
        16,
        32,
        64,
        128,
        256,
        300,
        300,
    ]
