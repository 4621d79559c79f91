"""Pure alert decisions, in milliseconds: routing precedence, how Slack errors are
classified, the backoff. Each table of cases is run by one parametrized test."""

from __future__ import annotations

import socket
import urllib.error
from datetime import timedelta

import pytest

from alerts.retrying import backoff
from alerts.routing import Route, route
from alerts.slack import classify_api_error, classify_exception
from monitor.config import RoutesConfig, SlackConfig
from monitor.store.context import IncidentContext

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
    assert route(ROUTED, IncidentContext(**fields)) == Route(channel, why)


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


def test_a_missing_scope_says_the_scopes_slack_says_it_needed() -> None:
    refused = classify_api_error(200, "missing_scope", None, "files:write")
    assert (refused.kind, refused.message) == (
        "permanent",
        "Slack refused the call: missing_scope (needed: files:write)",
    )
    unsaid = classify_api_error(200, "missing_scope", None)
    assert (unsaid.kind, unsaid.message) == ("permanent", "Slack refused the call: missing_scope")
    # Only a missing_scope says it: another error's `needed` is no part of its message.
    other = classify_api_error(200, "not_in_channel", None, "files:write")
    assert other.message == "Slack refused the call: not_in_channel"


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
