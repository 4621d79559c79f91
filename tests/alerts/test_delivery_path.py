"""A delivery path that cannot work is an error, not a quiet queue (issue 25, part 3): URLs
refused at load naming their field, every failure of a Slack call classified at the
boundary (no traceback from the alerts job), and the check of the token and the channels
(alerts/delivery_health.py) against the fake Slack server.

The last two tests drive a whole daemon, so they need DeliveryHealth wired into
monitor/daemon/daemon.py (its scheduler job, /readyz, the dead man's switch)."""

from __future__ import annotations

import io
import logging
import re
import socket
import sqlite3
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from builders import build_daemon, config_file, daemon_config, process_config, quick_slack, slack_to
from fake_slack import MANIFEST_SCOPES, TOKEN, FakeSlack, Message
from fake_switch import Pings
from helpers import cli, items_table, start_daemon, wait_for
from helpers import http_get as get
from scenario import INVARIANT, World, script, settle

from alerts.delivery_health import (
    AFTER_FAILURE,
    RETRIES_AFTER_A_FAILURE,
    SELF_CHECK,
    WHILE_BROKEN,
    DeliveryHealth,
    lacking_scopes,
    named_channels,
    needed_scopes,
    scope_verdict,
)
from alerts.ledger import to_retry
from alerts.path_errors import PART_SCOPES, fixed_by_the_path
from alerts.slack import SlackTransport
from alerts.transport import TransportError
from monitor.config import (
    Config,
    ConfigError,
    SlackConfig,
    WatchdogConfig,
    parse_config,
)
from monitor.daemon.assembly import assemble
from monitor.daemon.daemon import Daemon
from monitor.store.state import StateStore

WRONG_TOKEN = "xoxb-not-the-fake-token"
NO_SCHEME = "127.0.0.1:19902/api/"


class Seconds:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def daemon_for(
    world: World, slack: SlackConfig, transport: SlackTransport | None = None, **config: object
) -> Daemon:
    built = build_daemon(
        daemon_config(world.folder, slack=slack, **config),
        world.dsn,
        world.store,
        world.clock,
        call_timeout=0.3,
        transport=transport,
    )
    built.reload()
    return built


def health_for(daemon: Daemon, seconds: Seconds, console: io.StringIO) -> DeliveryHealth:
    return DeliveryHealth(
        daemon.config,
        daemon.alerter,
        daemon.metrics,
        daemon.store_health,
        console=console,
        monotonic=seconds,
    )


def said(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name.startswith("invmon") and r.levelno == level
    ]


def metric(daemon: Daemon, name: str) -> str:
    found = re.search(rf"^{name} (\S+)$", daemon.metrics.render().decode(), re.M)
    assert found is not None, name
    return found.group(1)


# --- URLs are checked at load ---------------------------------------------------------------


def test_it_refuses_an_api_url_without_a_scheme_naming_the_field() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"slack": {"api_url": NO_SCHEME}}, "invmon.yaml")
    assert str(caught.value) == (
        "invmon.yaml: field 'slack.api_url': must start with http:// or https://, "
        "e.g. https://slack.com/api/ (got '127.0.0.1:19902/api/')"
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"slack": {"api_url": "ftp://files.example.com/api/"}},
            "field 'slack.api_url': must start with http:// or https://, "
            "e.g. https://slack.com/api/",
        ),
        (
            {"slack": {"api_url": "http:///api/"}},
            "field 'slack.api_url': must name a host, e.g. https://slack.com/api/",
        ),
        (
            {"slack": {"api_url": "https://bot:hunter2@slack.com/api/"}},
            "field 'slack.api_url': must not hold a user or password (user:password@)",
        ),
        (
            {"slack": {"api_url": "https://slack.com:99999/api/"}},
            "field 'slack.api_url': has a port that is not a number from 0 to 65535",
        ),
        (
            {"slack": {"api_url": "https://slack.com/api/?team=T1"}},
            "field 'slack.api_url': must not have a query or fragment: the method name is appended",
        ),
        (
            {"slack": {"api_url": "https://sla ck.com/api/"}},
            "field 'slack.api_url': must not contain spaces or control characters",
        ),
        # The ping URL is the check's secret: never shown, even without a scheme.
        (
            {"watchdog": {"ping_url": "hc-ping.com/0f6c0e52"}},
            "field 'watchdog.ping_url': must start with http:// or https://, "
            "e.g. https://hc-ping.com/<uuid>",
        ),
        (
            {"watchdog": {"ping_url": "https://me:pw@hc-ping.com/0f6c0e52"}},
            "field 'watchdog.ping_url': must not hold a user or password (user:password@)",
        ),
        (
            {"watchdog": {"ping_url": "https://"}},
            "field 'watchdog.ping_url': must name a host, e.g. https://hc-ping.com/<uuid>",
        ),
    ],
)
def test_it_refuses_a_url_that_cannot_be_called_and_never_shows_a_secret(
    data: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, "invmon.yaml")
    assert str(caught.value) == f"invmon.yaml: {message}"


@pytest.mark.parametrize(
    "data",
    [
        {"slack": {"api_url": "http://127.0.0.1:19902/api/"}},
        {"slack": {"api_url": "https://slack.com/api"}},
        {"slack": {"api_url": "HTTPS://proxy.internal:8443/slack/api/"}},
        {"watchdog": {"ping_url": "https://hc-ping.com/0f6c0e52"}},
        {"watchdog": {"ping_url": ""}},
    ],
)
def test_it_takes_the_urls_that_work(data: dict[str, object]) -> None:
    parse_config(data, "invmon.yaml")


def test_lint_with_the_config_refuses_an_api_url_without_a_scheme(tmp_path: Path) -> None:
    (tmp_path / "invariants").mkdir()
    config = config_file(tmp_path, invariants="invariants", slack={"api_url": NO_SCHEME})
    ran = cli("lint", "--config", str(config), cwd=tmp_path)
    assert (ran.returncode, ran.stderr) == (
        2,
        f"invmon: {config}: field 'slack.api_url': must start with http:// or https://, "
        "e.g. https://slack.com/api/ (got '127.0.0.1:19902/api/')\n",
    )


# --- every failure of a call is classified at the boundary ----------------------------------


def test_an_api_url_slack_sdk_will_not_call_is_a_permanent_error() -> None:
    transport = SlackTransport(TOKEN, NO_SCHEME, timeout=0.3)
    with pytest.raises(TransportError) as caught:
        transport.post("#invariants", "x", [], "key-1")
    assert (caught.value.kind, caught.value.message) == (
        "permanent",
        "cannot call Slack: Invalid URL detected: 127.0.0.1:19902/api/conversations.list",
    )


def test_the_alerts_job_logs_no_traceback_when_slack_cannot_be_called(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with FakeSlack(clock=world.clock) as fake:
        daemon = daemon_for(world, quick_slack(fake), SlackTransport(TOKEN, NO_SCHEME, timeout=0.3))
        script(world, daemon, 0)
        world.clock.advance(2)  # past the quiet window: the opening is planned
        daemon.deliver()  # today: SlackRequestError escapes the job, as a traceback
        settle(daemon, world.clock, "unusable api_url")
        daemon.databases.close()
    reason = "cannot call Slack: Invalid URL detected: 127.0.0.1:19902/api/conversations.list"
    assert [(d.action, d.state, d.last_error) for d in daemon.alerter.ledger.all()] == [
        ("post_root", "FAILED", reason),
        ("upload_csv", "FAILED", f"its root message failed: {reason}"),
    ]
    assert [r for r in caplog.records if r.exc_info] == []
    assert said(caplog, logging.ERROR) == [f"delivery failed for good: {reason}"]
    assert metric(daemon, "invmon_delivery_failures") == "1.0"


def test_an_answer_without_its_ts_is_reconciled_not_dropped(world: World) -> None:
    with FakeSlack(clock=world.clock) as fake:
        daemon = daemon_for(world, quick_slack(fake))
        fake.answer_without("chat.postMessage", "ts")  # the post lands; the answer is broken
        script(world, daemon, 0)
        settle(daemon, world.clock, "an answer without ts")
        daemon.databases.close()
    [root] = [d for d in daemon.alerter.ledger.all() if d.action == "post_root"]
    assert (root.state, root.slack_ts) == ("SENT", fake.roots()[0].ts)
    assert len(fake.roots()) == 1
    assert daemon.alerter.worker.failures == 0


# --- the check of the path ------------------------------------------------------------------


def test_named_channels_are_every_channel_the_config_names() -> None:
    config = Config.model_validate(
        {
            "slack": {
                "channel": "#invariants",
                "routes": {
                    "severity": {"critical": "#incidents"},
                    "owner": {"@payments": "C0PAYMENTS", "@ops": "#incidents"},
                },
            },
            "targets": {"billing": {"channel": "#billing"}, "jobs": {}},
        }
    )
    assert named_channels(config) == {
        "#invariants": ("slack.channel",),
        "#incidents": ("slack.routes.severity.critical", "slack.routes.owner.@ops"),
        "C0PAYMENTS": ("slack.routes.owner.@payments",),
        "#billing": ("targets.billing.channel",),
    }


def test_it_checks_the_token_and_each_channel_afresh(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    seconds, console = Seconds(), io.StringIO()
    with FakeSlack(clock=world.clock) as fake:
        slack = quick_slack(
            fake, routes={"severity": {"critical": "#payments"}, "owner": {"@p": "C0PAYMENTS"}}
        )
        daemon = daemon_for(world, slack)
        health = health_for(daemon, seconds, console)
        assert health.note() == (
            "alerts not yet verified: the check of Slack's token and channels has not run yet"
        )
        assert health.tick() is True  # the first turn checks
        assert health.tick() is False  # and nothing more while it holds
        daemon.databases.close()
    assert [method for method, _ in fake.calls] == [
        "auth.test",
        "conversations.list",
        "conversations.info",
        "conversations.list",
        "conversations.info",
        "conversations.info",
    ]
    assert (health.problem(), health.note(), health.verified()) == (None, None, True)
    assert said(caplog, logging.INFO)[-1] == (
        "alerts can be delivered: the token (UINVMON on fake) and 3 channel(s) check out"
    )
    assert metric(daemon, "invmon_delivery_path_ok") == "1.0"
    assert console.getvalue() == ""
    assert world.store.open_incidents() == []


def test_a_token_that_cannot_post_is_a_finding_until_it_can(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """auth.test accepts a token without chat:write; the first alert would be the first to
    say so. The check reads the scopes Slack's answer gives the token."""
    seconds, console = Seconds(), io.StringIO()
    with FakeSlack(clock=world.clock) as fake:
        fake.revoke("chat:write")
        daemon = daemon_for(world, quick_slack(fake))
        health = health_for(daemon, seconds, console)
        assert health.tick() is True
        lacking = health.problem()
        fake.grant("chat:write")  # the app reinstalled with it
        seconds.advance(WHILE_BROKEN)
        assert health.tick() is True
        healed = health.problem()
        daemon.databases.close()
    assert lacking == (
        "alerts cannot be delivered: the token lacks the scope chat:write; add it to the Slack "
        "app and reinstall it (deploy/slack/manifest.yaml in invmon's source lists every scope "
        "it uses) (slack.token)"
    )
    assert said(caplog, logging.ERROR) == [lacking]
    assert [m for m in said(caplog, logging.WARNING) if "scope" in m] == []
    assert healed is None
    assert metric(daemon, "invmon_delivery_path_ok") == "1.0"


def test_a_token_short_of_another_scope_is_warned_of_once_and_the_path_works(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Without files:write the CSV fails, the rest of an alert goes out: a warning, not a
    broken path (a 503 would take every daemon of a fleet out of service, and stop the
    retries of what failed for the path). usergroups:read counts only with user groups."""
    with FakeSlack(clock=world.clock) as fake:
        fake.revoke("files:write", "channels:history", "groups:history", "usergroups:read")
        seconds = Seconds()
        daemon = daemon_for(world, quick_slack(fake, ack_allowlist=["U_ALICE", "S_ONCALL"]))
        health = health_for(daemon, seconds, io.StringIO())
        assert health.tick() is True
        seconds.advance(AFTER_FAILURE + WHILE_BROKEN)
        health.check()  # the same answer: not said again
        daemon.databases.close()
        users_only = daemon_for(world, quick_slack(fake, ack_allowlist=["U_ALICE"]))
        assert health_for(users_only, Seconds(), io.StringIO()).tick() is True
        users_only.databases.close()
    assert (health.problem(), health.verified()) == (None, True)
    assert [m for m in said(caplog, logging.WARNING) if "scope" in m] == [
        "the Slack token lacks files:write (the CSV of offending rows); channels:history or "
        "groups:history (finding a post in doubt before posting it again); usergroups:read "
        "(ack_allowlist's user groups): that part of an alert will fail; add the scopes to the "
        "Slack app and reinstall it (deploy/slack/manifest.yaml in invmon's source lists every "
        "scope it uses)",
        "the Slack token lacks files:write (the CSV of offending rows); channels:history or "
        "groups:history (finding a post in doubt before posting it again): that part of an "
        "alert will fail; add the scopes to the Slack app and reinstall it "
        "(deploy/slack/manifest.yaml in invmon's source lists every scope it uses)",
    ]


def test_without_files_write_the_csv_fails_alone_and_the_thread_goes_on(world: World) -> None:
    """The CSV needs files:write, which the token lacks: Slack refuses the upload with
    missing_scope. That is the part of the alert the warning said would fail, not the path:
    the CSV fails for good, once, naming the scope, and holds nothing of its thread; the
    replies and the resolution go out. No check's retry sends it again while the token
    still lacks the scope."""
    seconds = Seconds()
    with FakeSlack(clock=world.clock) as fake:
        fake.revoke("files:write")
        daemon = daemon_for(world, quick_slack(fake))
        health = health_for(daemon, seconds, io.StringIO())
        checks = [health.tick()]  # at start: the path works, files:write is a warning
        for step in range(3):  # opened, its rows change, resolved
            script(world, daemon, step)
            world.clock.advance(2)
            daemon.deliver()
            seconds.advance(AFTER_FAILURE)
            checks.append(health.tick())  # a failure brings a check; the path works
        world.clock.advance(2)
        daemon.deliver()
        [root] = fake.roots()
        thread = [m.text for m in fake.thread(root)]
        uploads = [m for m, _ in fake.calls if m == "files.getUploadURLExternal"]
        rows = deliveries(world)
        daemon.databases.close()
    refused = "Slack refused the call: missing_scope (needed: files:write)"
    assert [r for r in rows if r[0] == "upload_csv"] == [("upload_csv", "FAILED", refused)]
    assert len(uploads) == 1  # tried once: no retry while the token lacks the scope
    assert [(a, s) for a, s, _ in rows if a == "post_reply"] == [("post_reply", "SENT")] * 2
    assert len(thread) == 2 and "resolved" in thread[1].lower()
    assert checks == [True, True, False, False]  # the CSV's one failure brought one check
    assert (health.problem(), health.verified()) == (None, True)


def test_without_channels_read_a_channel_given_by_name_is_the_path_and_heals(
    world: World,
) -> None:
    """channels:read finds the id of a channel given by name: without it nothing can be
    posted there. The check says so (a finding), and what failed is the path's: sent once
    the app is reinstalled with the scope and the daemon restarted."""
    with FakeSlack(clock=world.clock) as fake:
        fake.revoke("channels:read", "groups:read")
        daemon = daemon_for(world, quick_slack(fake))
        health = health_for(daemon, Seconds(), io.StringIO())
        health.tick()
        script(world, daemon, 0)
        world.clock.advance(2)
        daemon.deliver()
        problem, failed = health.problem(), deliveries(world)
        daemon.databases.close()
        fake.grant("channels:read", "groups:read")
        after, roots = restarted_and_delivered(world, fake)
    refused = "Slack refused the call: missing_scope (needed: channels:read,groups:read)"
    assert problem == f"alerts cannot be delivered: {refused} (slack.channel)"
    assert [r for r in failed if r[0] == "post_root"] == [("post_root", "FAILED", refused)] * 2
    assert ("post_root", "SENT", "") in after
    assert [("bad_items" in r.text) for r in roots] == [True]


def test_without_channels_read_a_channel_given_by_id_takes_its_alerts(world: World) -> None:
    """Given by id, a channel takes posts without channels:read, which only the check's
    look at it needs: no verdict on it, no 503, and the alert goes out."""
    with FakeSlack(clock=world.clock) as fake:
        fake.revoke("channels:read", "groups:read")
        daemon = daemon_for(world, quick_slack(fake, channel="C0INVARIANTS"))
        health = health_for(daemon, Seconds(), io.StringIO())
        health.tick()
        script(world, daemon, 0)
        world.clock.advance(2)
        daemon.deliver()
        rows, roots = deliveries(world), fake.roots()
        daemon.databases.close()
    assert (health.problem(), health.verified()) == (None, True)
    assert rows == [("post_root", "SENT", ""), ("upload_csv", "SENT", "")]
    assert len(roots) == 1


def test_the_scopes_a_part_of_an_alert_needs_are_those_the_check_only_warns_of() -> None:
    """path_errors.PART_SCOPES (a refusal fails that delivery alone) are scopes the check
    only warns of, but for the history scopes (finding a post in doubt, maybe a thread's
    root, whose failure would fail its thread for good) and channels:read or groups:read
    (whose lack fails every post to a channel given by name): those are the path's."""
    config = Config(slack=SlackConfig(ack_allowlist=["S1"]))
    warned = {n for names, _ in needed_scopes(config) for n in names} - {"chat:write"}
    paths = {"channels:read", "groups:read", "channels:history", "groups:history"}
    assert warned - paths == PART_SCOPES


def test_an_answer_that_does_not_say_the_scopes_is_no_verdict_on_them(world: World) -> None:
    with FakeSlack(clock=world.clock) as fake:
        fake.scopes = None  # a proxy that drops the header
        daemon = daemon_for(world, quick_slack(fake))
        health = health_for(daemon, Seconds(), io.StringIO())
        assert health.tick() is True
        daemon.databases.close()
    assert (health.problem(), health.verified()) == (None, True)


GRANULAR = {"chat:write", "channels:read", "channels:history", "files:read", "files:write"}


@pytest.mark.parametrize(
    ("granted", "lacking"),
    [
        (None, []),  # the answer did not say
        # Classic apps (as Slack reports them), whose scopes cover the same calls.
        ({"identify", "bot:basic"}, []),
        ({"identify", "bot"}, []),
        ({"chat:write:bot", "files:write:user", "channels:read"}, []),
        # Private channels only: groups:* do what channels:* do for public ones.
        ({"chat:write", "groups:read", "groups:history", "files:read", "files:write"}, []),
        (GRANULAR - {"chat:write"} | {"commands"}, ["chat:write"]),
        (
            {"chat:write", "chat:write.public"},
            ["files:write", "files:read", "channels:history", "channels:read"],
        ),
    ],
)
def test_only_what_a_granular_token_lacks_is_lacking(
    granted: set[str] | None, lacking: list[str]
) -> None:
    scopes = None if granted is None else frozenset(granted)
    needs = needed_scopes(Config())
    assert [names[0] for names, _ in lacking_scopes(scopes, needs)] == lacking
    finding, warning = scope_verdict(scopes, needs)
    assert (finding is not None, warning is not None) == (
        "chat:write" in lacking,
        bool(set(lacking) - {"chat:write"}),
    )


def test_the_scopes_checked_are_the_manifest_s_and_the_fake_grants_the_manifest_s() -> None:
    manifest = yaml.safe_load(
        (Path(__file__).parents[2] / "deploy" / "slack" / "manifest.yaml").read_text()
    )
    bot = set(manifest["oauth_config"]["scopes"]["bot"])
    with_groups = Config(slack=SlackConfig(ack_allowlist=["S_ONCALL"]))
    assert {n for names, _ in needed_scopes(with_groups) for n in names} == bot
    assert {n for names, _ in needed_scopes(Config()) for n in names} == bot - {"usergroups:read"}
    assert set(MANIFEST_SCOPES) == bot


def test_a_wrong_token_is_one_error_counted_once_and_invmons_own_alert_on_the_console(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    seconds, console = Seconds(), io.StringIO()
    reason = "alerts cannot be delivered: Slack refused the call: invalid_auth (slack.token)"
    with FakeSlack(clock=world.clock) as fake:
        slack = quick_slack(fake, token=WRONG_TOKEN)
        daemon = daemon_for(world, slack)
        health = health_for(daemon, seconds, console)
        health.tick()
        assert health.problem() == reason
        assert metric(daemon, "invmon_delivery_failures") == "1.0"  # before any delivery
        assert metric(daemon, "invmon_delivery_path_ok") == "0.0"
        # invmon's own incident is planned like any other, and fails like any other.
        world.clock.advance(2)
        daemon.deliver()
        seconds.advance(AFTER_FAILURE)
        assert health.tick() is True  # the failure brought a check: the same reason
        seconds.advance(WHILE_BROKEN)
        assert health.tick() is True  # looked at again while broken: still the same
        daemon.deliver()
        daemon.databases.close()
    assert health.problem() == reason
    assert said(caplog, logging.ERROR) == [
        reason,
        "delivery failed for good: Slack refused the call: invalid_auth",
    ]
    assert daemon.alerter.worker.failures == 2  # the path, and invmon's own alert
    assert metric(daemon, "invmon_delivery_failures") == "2.0"
    assert [r for r in caplog.records if r.exc_info] == []
    assert WRONG_TOKEN not in caplog.text
    printed = console.getvalue()
    assert printed.count(f"{SELF_CHECK} violated") == 1
    assert "slack.token" in printed and "invalid_auth" in printed
    [incident] = world.store.open_incidents()
    assert incident.invariant == SELF_CHECK
    assert incident.context is not None and incident.context.severity == "critical"


def test_a_channel_that_cannot_take_messages_names_its_field_until_it_can(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    seconds, console = Seconds(), io.StringIO()
    with FakeSlack(clock=world.clock) as fake:
        fake.archived.add("C0PAYMENTS")
        slack = quick_slack(
            fake,
            routes={
                "severity": {"critical": "#nope"},
                "owner": {"@p": "C0NOPE0000", "@q": "C0PAYMENTS"},
            },
        )
        daemon = daemon_for(world, slack)
        health = health_for(daemon, seconds, console)
        health.tick()
        broken = health.problem()
        # The channels appear, and the archived one is restored: the next look finds it.
        fake.channels["C0NOPE0000"] = "nope"
        fake.archived.clear()
        seconds.advance(WHILE_BROKEN - 1)
        assert health.tick() is False
        seconds.advance(1)
        assert health.tick() is True
        daemon.databases.close()
    assert broken == (
        "alerts cannot be delivered: "
        "channel '#nope' not found or not visible (slack.routes.severity.critical); "
        "Slack refused the call: channel_not_found (slack.routes.owner.@p); "
        "channel 'C0PAYMENTS' is archived (slack.routes.owner.@q)"
    )
    assert (health.problem(), health.note()) == (None, None)
    assert said(caplog, logging.ERROR) == [broken]
    assert said(caplog, logging.INFO)[-1] == (
        "alerts can be delivered again: the token and the channels check out"
    )
    assert world.store.open_incidents() == []  # invmon's own incident resolved
    assert [i.invariant for i in world.store.resolved_since(world.clock() - timedelta(1))] == [
        SELF_CHECK
    ]


def test_slack_unreachable_at_start_is_retried_and_only_noted(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    seconds, console = Seconds(), io.StringIO()
    with FakeSlack(clock=world.clock) as fake:
        daemon = daemon_for(world, quick_slack(fake))
        caplog.clear()  # the reload's own lines: its allowed superuser is said at WARNING
        health = health_for(daemon, seconds, console)
        fake.fail_next("auth.test", "error_500")
        fake.fail_next("auth.test", "error_500")
        assert health.tick() is True
        noted = health.note()
        assert metric(daemon, "invmon_delivery_path_ok") == "NaN"
        assert health.tick() is False  # backing off: 2s
        seconds.advance(2)
        assert health.tick() is True  # the same reason: not said again
        seconds.advance(3)
        assert health.tick() is False  # then 4s
        seconds.advance(1)
        assert health.tick() is True
        daemon.databases.close()
    assert noted == "alerts not yet verified: Slack answered 500 internal_error"
    assert (health.problem(), health.note(), health.verified()) == (None, None, True)
    assert said(caplog, logging.WARNING) == [
        "alerts not verified: Slack answered 500 internal_error; checking again in 2s"
    ]
    assert daemon.alerter.worker.failures == 0


def test_a_delivery_failing_for_good_brings_a_check_of_the_path(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    seconds, console = Seconds(), io.StringIO()
    with FakeSlack(clock=world.clock) as fake:
        daemon = daemon_for(world, quick_slack(fake))
        health = health_for(daemon, seconds, console)
        health.tick()
        assert health.verified() is True
        del fake.channels["C0INVARIANTS"]  # the channel is deleted after the start
        script(world, daemon, 0)
        world.clock.advance(2)
        daemon.deliver()
        assert daemon.alerter.worker.failures == 1
        assert health.tick() is False  # it checked a moment ago: not at once again
        seconds.advance(AFTER_FAILURE)
        assert health.tick() is True
        daemon.databases.close()
    assert health.problem() == (
        "alerts cannot be delivered: channel '#invariants' not found or not visible (slack.channel)"
    )
    assert daemon.alerter.worker.failures == 2


def test_the_console_has_nothing_to_check(world: World) -> None:
    daemon = build_daemon(daemon_config(world.folder), world.dsn, world.store, world.clock)
    health = DeliveryHealth(daemon.config, daemon.alerter, daemon.metrics)
    daemon.databases.close()
    assert (health.problem(), health.note(), health.verified(), health.tick()) == (
        None,
        None,
        True,
        False,
    )
    assert metric(daemon, "invmon_delivery_path_ok") == "1.0"


# --- the whole daemon (needs the wiring in monitor/daemon/daemon.py) ---------------------------


def test_the_daemon_says_a_wrong_token_at_start_in_readyz_and_to_the_switch(
    database: str, tmp_path: Path, pings: Pings
) -> None:
    items_table(database)
    folder = tmp_path / "invariants"
    folder.mkdir()
    store = StateStore.open(path=tmp_path / "state.db")
    with FakeSlack() as fake:
        config = daemon_config(
            folder,
            watchdog=WatchdogConfig(interval=timedelta(seconds=1), ping_url=pings.url),
            slack=slack_to(fake, token=WRONG_TOKEN),
        )
        daemon = build_daemon(config, database, store)
        routes = daemon.probes.routes()
        daemon.start()
        try:
            problem = wait_for(routes.readyz.check, 20, "/readyz to fail")
            wait_for(lambda: "/ping/abc-123/fail" in pings.paths, 20, "a failing ping")
            healthy = routes.healthz.check()
        finally:
            daemon.shutdown()
            store.close()
    assert problem == (
        "alerts cannot be delivered: Slack refused the call: invalid_auth (slack.token)"
    )
    assert healthy is None  # a restart would not fix a token: /healthz stays 200


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_invmon_run_with_a_wrong_token_fails_readyz_counts_it_and_logs_it_once(
    database: str, tmp_path: Path
) -> None:
    items_table(database)
    folder = tmp_path / "invariants"
    folder.mkdir()
    port = free_port()
    log = tmp_path / "daemon.log"
    with FakeSlack() as fake:
        config = process_config(
            tmp_path,
            folder,
            http={"listen": f"127.0.0.1:{port}"},
            slack={"token": WRONG_TOKEN, "api_url": fake.api_url},
            daemon={"shutdown_grace": "5s"},
        )
        process = start_daemon(config, log, database)
        try:
            url = f"http://127.0.0.1:{port}"
            ready = wait_for(
                lambda: (answer := get(f"{url}/readyz"))[0] == 503 and answer, 30, "/readyz 503"
            )

            def refused_twice() -> str | None:
                body = get(f"{url}/metrics")[1]
                return body if body and 'invmon_deliveries{state="FAILED"} 2.0' in body else None

            metrics = wait_for(refused_twice, 30, "invmon's own alert refused by Slack too")
            health = get(f"{url}/healthz")
        finally:
            process.terminate()
            process.wait(timeout=40)
    reason = "alerts cannot be delivered: Slack refused the call: invalid_auth (slack.token)"
    assert ready == (503, reason + "\n")
    assert health == (200, "ok\n")
    # The path (found at start), and invmon's own alert about it, which Slack refused too.
    assert "invmon_delivery_failures 2.0" in metrics.splitlines()
    assert "invmon_delivery_path_ok 0.0" in metrics.splitlines()
    text = log.read_text()
    logged = [line for line in text.splitlines() if re.match(r"\d{4}-\S+Z ERROR +alerts", line)]
    assert logged == [f"{logged[0][:20]} ERROR   {reason}  check={SELF_CHECK}"]  # once
    # invmon's own alert, printed through the console transport (stdout, here the log).
    assert text.count(f"🔴 CRITICAL · {SELF_CHECK} violated") == 1
    assert text.count(f"\n{reason}\nincident #1\n") == 1
    # No traceback while it ran (what the listener says as it closes is not about alerts).
    assert "Traceback" not in text.split("INFO    stopping:")[0]
    assert "raised an exception" not in text  # APScheduler's words for a job that threw
    assert WRONG_TOKEN not in text


def test_a_channel_a_sighup_took_live_is_checked_at_once(world: World) -> None:
    """A SIGHUP renamed slack.channel to one that does not exist: 'config taken live', then
    every delivery failed for good, while /readyz stayed 200 and the path metric 1 for as
    long as anyone watched: the check kept looking at the channels named at start."""
    with FakeSlack(clock=world.clock) as fake:
        slack = quick_slack(fake)
        config = daemon_config(world.folder, slack=slack)
        renamed = config.model_copy(
            update={"slack": slack.model_copy(update={"channel": "#nonexistent"})}
        )
        daemon = assemble(
            config,
            world.dsn,
            world.store,
            clock=world.clock,
            transport=SlackTransport(slack.token or "", slack.api_url, timeout=0.3),
            reread=lambda: renamed,
        )
        daemon.reload()
        assert daemon.delivery.tick() is True  # the first check, at start
        assert daemon.delivery.problem() is None
        assert daemon.reconfigurer is not None
        taken = daemon.reconfigurer.reconfigure(daemon.config)  # what a SIGHUP does
        assert taken.slack.channel == "#nonexistent"
        assert daemon.delivery.tick() is True  # due at once, not in hours
        problem = daemon.delivery.problem()
        daemon.databases.close()
    assert problem == (
        "alerts cannot be delivered: channel '#nonexistent' not found or not visible "
        "(slack.channel)"
    )


class ReloadedMidCheck(SlackTransport):
    """A transport that takes `then` live (as a SIGHUP would) while a check is looking at
    its first channel: the reload lands between the check's look and its verdict."""

    def __init__(self, slack: SlackConfig, then: Callable[[], None]) -> None:
        super().__init__(slack.token or "", slack.api_url, timeout=0.3)
        self.then: Callable[[], None] | None = then

    def check_channel(self, channel: str) -> str:
        then, self.then = self.then, None
        if then is not None:
            then()
        return super().check_channel(channel)


def test_a_sighup_during_a_check_is_checked_after_it_not_lost(world: World) -> None:
    """The check that was running saw the config before the SIGHUP; settled as the last
    word, it made the path good for hours and never looked at the channel the SIGHUP
    named. Its verdict stands, and the new config is checked at the next turn."""
    with FakeSlack(clock=world.clock) as fake:
        slack = quick_slack(fake)
        config = daemon_config(world.folder, slack=slack)
        renamed = config.model_copy(
            update={"slack": slack.model_copy(update={"channel": "#nonexistent"})}
        )
        holder: list[Daemon] = []
        transport = ReloadedMidCheck(slack, lambda: holder[0].delivery.reconfigure(renamed))
        daemon = daemon_for(world, slack, transport)
        holder.append(daemon)
        assert daemon.delivery.tick() is True  # the first check, at start: the SIGHUP lands
        during = daemon.delivery.problem()
        assert daemon.delivery.tick() is True  # due at once: it looked at the old config
        after = daemon.delivery.problem()
        daemon.databases.close()
    assert during is None  # what the old config's check found
    assert after == (
        "alerts cannot be delivered: channel '#nonexistent' not found or not visible "
        "(slack.channel)"
    )


# --- what failed for the path is tried again once it checks out -----------------------------


def deliveries(world: World) -> list[tuple[str, str, str]]:
    """(action, state, last_error) of every ledger row, in the order planned."""
    with world.store.storage.transaction() as tx:
        rows = tx.rows("SELECT action, state, last_error FROM deliveries ORDER BY id")
    return [(str(a), str(s), str(e or "")) for a, s, e in rows]


def restarted_and_delivered(
    world: World, fake: FakeSlack
) -> tuple[list[tuple[str, str, str]], list[Message]]:
    """A daemon started again on the same store: its first check passes, then it delivers
    what is due. The ledger's rows and Slack's root messages after it."""
    daemon = daemon_for(world, quick_slack(fake))
    assert health_for(daemon, Seconds(), io.StringIO()).tick() is True
    world.clock.advance(2)
    daemon.deliver()
    after, roots = deliveries(world), fake.roots()
    daemon.databases.close()
    return after, roots


def fail_for_a_deleted_channel(
    world: World, daemon: Daemon, fake: FakeSlack, health: DeliveryHealth
) -> None:
    """The path checks out, then the channel is deleted and an incident opens: its root and
    its rows fail for good (channel_not_found)."""
    health.tick()
    del fake.channels["C0INVARIANTS"]
    script(world, daemon, 0)
    world.clock.advance(2)
    daemon.deliver()


def test_alerts_that_failed_for_their_channel_go_out_once_the_channel_is_back(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    seconds, console = Seconds(), io.StringIO()
    with FakeSlack(clock=world.clock) as fake:
        daemon = daemon_for(world, quick_slack(fake))
        health = health_for(daemon, seconds, console)
        fail_for_a_deleted_channel(world, daemon, fake, health)
        failed = deliveries(world)
        seconds.advance(AFTER_FAILURE)
        health.tick()
        broken = health.problem()
        daemon.deliver()
        assert deliveries(world) == failed  # still broken: nothing tried again
        fake.channels["C0INVARIANTS"] = "invariants"  # a person restores it
        seconds.advance(WHILE_BROKEN)
        assert health.tick() is True
        world.clock.advance(2)
        daemon.deliver()
        healed = deliveries(world)
        roots = fake.roots()
        threads = [fake.thread(root) for root in roots]
        daemon.databases.close()
    assert broken == (
        "alerts cannot be delivered: channel '#invariants' not found or not visible (slack.channel)"
    )
    # The incident's root and its reply with the buttons, then invmon's own alert about the
    # path (which resolved at the heal: not sent late).
    assert [(action, state) for action, state, _ in failed] == [
        ("post_root", "FAILED"),
        ("upload_csv", "FAILED"),
    ]
    assert failed[0][2] == "Slack refused the call: channel_not_found"
    assert failed[1][2] == "its root message failed: Slack refused the call: channel_not_found"
    # Then the incident's root and its rows, and invmon's own incident about the path, now
    # resolved: its root, its rows, its resolution in the thread and the root updated.
    assert healed == [
        ("post_root", "SENT", ""),
        ("upload_csv", "SENT", ""),
        ("post_root", "SENT", ""),
        ("upload_csv", "SENT", ""),
        ("post_reply", "SENT", ""),
        ("update_root", "SENT", ""),
    ]
    assert ["bad_items" in r.text for r in roots] == [True, False]
    assert [SELF_CHECK in r.text for r in roots] == [False, True]
    assert [len(t) for t in threads] == [1, 2]  # the rows (a file), and the resolution
    assert [len(f.shares) for f in fake.shared_files()] == [1, 1]
    assert len({r.key for r in roots}) == 2
    assert (
        said(caplog, logging.INFO).count(
            "2 alert deliveries of open incidents that failed for the token or their channel "
            "are queued again: the token and the channels check out"
        )
        == 1
    )


def test_a_file_s_own_channel_is_retried_at_a_restart_not_at_a_check_that_never_saw_it(
    world: World,
) -> None:
    """An invariant routed by its own `channel:` header to a channel the config does not
    name: the path check never looks at that channel. Its root fails for the channel; the
    check the failure brings passes (the config's channels are fine), and it does not try
    the file's channel again (it may be broken still: each such check would fail it again).
    A restart does: a person acted, and each row is tried once."""
    (world.folder / "bad_items.sql").write_text(
        INVARIANT.replace("-- key:", '-- channel: "#payments"\n-- key:')
    )
    seconds = Seconds()
    with FakeSlack(clock=world.clock) as fake:
        daemon = daemon_for(world, quick_slack(fake))
        health = health_for(daemon, seconds, io.StringIO())
        assert health.tick() is True  # the start's check: the config's channel checks out
        del fake.channels["C0PAYMENTS"]
        script(world, daemon, 0)
        world.clock.advance(2)
        daemon.deliver()
        failed = deliveries(world)
        fake.channels["C0PAYMENTS"] = "payments"  # restored before any check looked
        seconds.advance(AFTER_FAILURE)
        assert health.tick() is True  # brought by the failure; the path checks out
        world.clock.advance(2)
        daemon.deliver()
        after_the_check = deliveries(world)
        daemon.databases.close()
        after_the_restart, roots = restarted_and_delivered(world, fake)
    gone = "Slack refused the call: channel_not_found"
    assert failed == [
        ("post_root", "FAILED", gone),
        ("upload_csv", "FAILED", f"its root message failed: {gone}"),
    ]
    assert after_the_check == failed
    assert after_the_restart == [("post_root", "SENT", ""), ("upload_csv", "SENT", "")]
    assert [(r.channel, "bad_items" in r.text) for r in roots] == [("C0PAYMENTS", True)]


def test_a_restart_with_the_token_fixed_sends_what_the_wrong_token_could_not(
    world: World,
) -> None:
    with FakeSlack(clock=world.clock) as fake:
        wrong = daemon_for(world, quick_slack(fake, token=WRONG_TOKEN))
        health_for(wrong, Seconds(), io.StringIO()).tick()
        script(world, wrong, 0)
        world.clock.advance(2)
        wrong.deliver()
        failed = deliveries(world)
        wrong.databases.close()
        # Restarted on the same store with the token fixed.
        after, roots = restarted_and_delivered(world, fake)
    refused = "Slack refused the call: invalid_auth"
    # invmon's own incident about the token, then bad_items' root and rows.
    assert failed == [
        ("post_root", "FAILED", refused),
        ("upload_csv", "FAILED", f"its root message failed: {refused}"),
        ("post_root", "FAILED", refused),
        ("upload_csv", "FAILED", f"its root message failed: {refused}"),
    ]
    # bad_items' incident is still open: it goes out. invmon's own closed at the restart's
    # check: not announced late, and its resolution has no thread to go into.
    assert after == [
        ("post_root", "FAILED", refused),
        ("upload_csv", "FAILED", f"its root message failed: {refused}"),
        ("post_root", "SENT", ""),
        ("upload_csv", "SENT", ""),
        ("post_reply", "FAILED", f"its root message failed: {refused}"),
        ("update_root", "FAILED", f"its root message failed: {refused}"),
    ]
    assert [("bad_items" in r.text) for r in roots] == [True]


def test_a_path_that_checks_out_leaves_failed_what_it_would_not_carry(world: World) -> None:
    """Tried again: only what failed for the token or a channel the check looked at, of an
    incident still open. A message Slack refused for what it holds would fail again."""
    seconds, console = Seconds(), io.StringIO()
    with FakeSlack(clock=world.clock) as fake:
        daemon = daemon_for(world, quick_slack(fake))
        health = health_for(daemon, seconds, console)
        fail_for_a_deleted_channel(world, daemon, fake, health)
        with world.store.storage.transaction() as tx:  # as if Slack had refused its content
            tx.run(
                "UPDATE deliveries SET last_error = 'Slack refused the call: msg_too_long'"
                " WHERE action = 'post_root'"
            )
        fake.channels["C0INVARIANTS"] = "invariants"
        health.reconfigure(daemon.config)  # a SIGHUP: the next passing check tries again
        assert health.tick() is True
        world.clock.advance(2)
        daemon.deliver()
        after = deliveries(world)
        daemon.databases.close()
    assert after == [
        ("post_root", "FAILED", "Slack refused the call: msg_too_long"),
        (
            "upload_csv",
            "FAILED",
            "its root message failed: Slack refused the call: channel_not_found",
        ),
    ]
    assert fake.roots() == []


@pytest.mark.parametrize(
    ("error", "broke"),
    [
        ("Slack refused the call: invalid_auth", "token"),
        ("Slack refused the call: token_revoked", "token"),
        ("Slack refused the call: missing_scope", "token"),  # which scope: not said
        ("Slack refused the call: missing_scope (needed: chat:write)", "token"),
        ("Slack refused the call: missing_scope (needed: chat:write:bot)", "token"),
        ("Slack refused the call: missing_scope (needed: files:write)", None),
        ("Slack refused the call: missing_scope (needed: channels:read,groups:read)", "token"),
        ("Slack refused the call: missing_scope (needed: files:write,chat:write)", "token"),
        ("Slack refused the call: missing_scope (needed: some:new_scope)", "token"),
        (
            "Slack refused the call: missing_scope (needed: channels:history,groups:history)",
            "token",
        ),
        (
            "an earlier message of its thread failed: Slack refused the call: missing_scope "
            "(needed: files:write)",
            None,
        ),
        ("its root message failed: Slack refused the call: account_inactive", "token"),
        ("cannot call Slack: unknown url type: 'ftp'", "token"),
        ("Slack refused the call: channel_not_found", "channel"),
        ("Slack refused the call: not_in_channel", "channel"),
        ("its root message failed: Slack refused the call: is_archived", "channel"),
        ("channel '#alerts' not found or not visible", "channel"),
        ("its root message failed: channel 'C0PAYMENTS' is archived", "channel"),
        ("Slack refused the call: msg_too_long", None),
        ("Slack refused the call: invalid_blocks", None),
        ("Slack refused the call: cant_update_message", None),
        ("Slack refused the call: thread_not_found", None),
        ("Slack refused the call: channel_not_found_but_not_really", None),
        ("", None),
    ],
)
def test_what_a_person_can_fix_is_told_from_what_slack_would_never_take(
    error: str, broke: str | None
) -> None:
    assert fixed_by_the_path(error) == broke


def test_a_repaired_path_retries_a_thread_whole_or_not_at_all() -> None:
    def worth(channel: str, error: str) -> bool:
        return fixed_by_the_path(error) is not None

    gone = "Slack refused the call: channel_not_found"
    replied = f"its root message failed: {gone}"
    failed = [
        # A digest whose row names an incident closed since; a reply of an open incident in it.
        (1, "#a", gone, None, None, False),
        (2, "#a", replied, 1, "FAILED", True),
        # An open incident's root Slack refused for what it held, and a reply under it.
        (3, "#a", "Slack refused the call: msg_too_long", None, None, True),
        (4, "#a", replied, 3, "FAILED", True),
        # A reply into a thread that went out; a closed incident's root and reply.
        (5, "#a", gone, 9, "SENT", True),
        (6, "#a", gone, None, None, False),
        (7, "#a", replied, 6, "FAILED", False),
    ]
    assert to_retry(failed, worth) == [1, 2, 5]
    # Planned under a failed root before the root's reason was written down: goes with it.
    bare = [
        (1, "#a", gone, None, None, True),
        (2, "#a", "its root message failed", 1, "FAILED", True),
    ]
    assert to_retry(bare, worth) == [1, 2]
    assert to_retry(failed, lambda channel, error: False) == []


def test_a_post_whose_fate_could_not_be_checked_is_looked_for_before_it_is_sent_again(
    world: World,
) -> None:
    """A post that may have landed, then a token that cannot ask Slack about it: FAILED,
    'its outcome cannot be checked'. Once the token works, it is reconciled first: found in
    the channel, never posted a second time."""
    with FakeSlack(clock=world.clock) as fake:
        first = daemon_for(world, quick_slack(fake))
        fake.fail_next("chat.postMessage", "accept_then_timeout")  # it lands; no answer
        script(world, first, 0)
        world.clock.advance(2)
        first.deliver()
        first.databases.close()
        wrong = daemon_for(world, quick_slack(fake, token=WRONG_TOKEN))
        world.clock.advance(5)
        wrong.deliver()
        unchecked = deliveries(world)[0]
        wrong.databases.close()
        fixed = daemon_for(world, quick_slack(fake))
        assert health_for(fixed, Seconds(), io.StringIO()).tick() is True
        world.clock.advance(5)
        fixed.deliver()
        after = deliveries(world)[:2]
        roots = fake.roots()
        fixed.databases.close()
    assert unchecked == (
        "post_root",
        "FAILED",
        "its outcome cannot be checked: Slack refused the call: invalid_auth",
    )
    assert after == [("post_root", "SENT", ""), ("upload_csv", "SENT", "")]
    assert len(roots) == 1  # the one that landed, found; not posted again
    assert len(fake.shared_files()) == 1


def test_a_store_failing_under_the_retry_tries_it_again_soon(world: World, tmp_path: Path) -> None:
    seconds, console = Seconds(), io.StringIO()
    with FakeSlack(clock=world.clock) as fake:
        daemon = daemon_for(world, quick_slack(fake))
        health = health_for(daemon, seconds, console)
        fail_for_a_deleted_channel(world, daemon, fake, health)
        seconds.advance(AFTER_FAILURE)
        health.tick()
        fake.channels["C0INVARIANTS"] = "invariants"
        # The ledger's table is away while the heal's retry runs: the store fails under it.
        with sqlite3.connect(tmp_path / "state.db", isolation_level=None) as other:
            other.execute("ALTER TABLE deliveries RENAME TO deliveries_away")
            seconds.advance(WHILE_BROKEN)
            assert health.tick() is True
            problem = daemon.store_health.problem
            other.execute("ALTER TABLE deliveries_away RENAME TO deliveries")
        failed = deliveries(world)
        assert health.tick() is False  # not at once
        seconds.advance(2)
        assert health.tick() is True  # soon: the check comes again, and the retry with it
        world.clock.advance(2)
        daemon.deliver()
        after = deliveries(world)
        daemon.databases.close()
    assert problem is not None and "queueing again the alerts that failed" in problem
    assert [state for _, state, _ in failed[:2]] == ["FAILED", "FAILED"]
    assert [state for _, state, _ in after[:2]] == ["SENT", "SENT"]


def test_a_thread_message_that_failed_for_its_channel_holds_the_rest_of_its_thread(
    world: World,
) -> None:
    """The root went out; then a reply failed (the channel was gone a moment) and a later
    one was planned once the channel was back. The later one waits for the earlier, and
    both go out, in order, once the check the failure brought finds the path working."""
    seconds, console = Seconds(), io.StringIO()
    with FakeSlack(clock=world.clock) as fake:
        daemon = daemon_for(world, quick_slack(fake))
        health = health_for(daemon, seconds, console)
        health.tick()
        script(world, daemon, 0)  # opened: the root and its rows go out
        world.clock.advance(2)
        daemon.deliver()
        del fake.channels["C0INVARIANTS"]
        script(world, daemon, 1)  # the rows change: a reply, which fails
        world.clock.advance(2)
        daemon.deliver()
        fake.channels["C0INVARIANTS"] = "invariants"  # back before any check looked
        script(world, daemon, 2)  # resolved: a later reply, planned behind the failed one
        world.clock.advance(2)
        daemon.deliver()
        held = deliveries(world)
        seconds.advance(AFTER_FAILURE)
        assert health.tick() is True  # brought by the failure; the path checks out
        world.clock.advance(2)
        daemon.deliver()
        after = deliveries(world)
        [root] = fake.roots()
        thread = [m.text for m in fake.thread(root) if not m.files]
        daemon.databases.close()
    gone = "Slack refused the call: channel_not_found"
    replies = [(a, s, e) for a, s, e in held if a == "post_reply"]
    assert replies == [
        ("post_reply", "FAILED", gone),
        ("post_reply", "FAILED", f"an earlier message of its thread failed: {gone}"),
    ]
    # Both replies went out, the resolution last, though its incident closed meanwhile.
    assert [(a, s) for a, s, _ in after if a == "post_reply"] == [("post_reply", "SENT")] * 2
    assert len(thread) == 2
    assert "resolved" in thread[1].lower() and "resolved" not in thread[0].lower()


def test_a_worker_that_lost_the_lease_on_a_root_leaves_its_thread_alone(world: World) -> None:
    """Worker A claims a root, stalls past its lease, and B takes the root over; A's failure
    then comes in. Its write is refused by the lease, and so is what it would have done to
    the root's thread: the replies wait for B's outcome, PENDING, not failed for A's
    error. (The root's FAILED and its thread's are one transaction, so no crash between
    them leaves a thread waiting on a root that failed either.)"""
    lease = timedelta(seconds=60)
    with FakeSlack(clock=world.clock) as fake:
        daemon = daemon_for(world, quick_slack(fake))
        script(world, daemon, 0)  # opened
        world.clock.advance(2)  # past the settle
        assert daemon.pump.dispatch() != []  # its root and its thread planned, nothing sent
        ledger = daemon.alerter.ledger
        claimed_by_a = ledger.claim("worker-a", world.clock(), lease)
        assert claimed_by_a is not None
        root = claimed_by_a[0]
        assert root.action == "post_root"
        world.clock.advance(2 * lease.total_seconds())
        claimed_by_b = ledger.claim("worker-b", world.clock(), lease)
        assert claimed_by_b is not None and claimed_by_b[0].id == root.id
        ledger.failed(root, world.clock(), "Slack refused the call: channel_not_found")
        after = deliveries(world)
        daemon.databases.close()
    thread = [(a, s, e) for a, s, e in after if a != "post_root"]
    assert len(thread) >= 1
    assert thread == [(a, "PENDING", "") for a, _, _ in thread]
    assert [(a, s, e) for a, s, e in after if a == "post_root"] == [("post_root", "UNKNOWN", "")]


def test_a_root_s_failure_and_its_thread_s_are_one_write(world: World) -> None:
    """The thread's update fails (a trigger in the state store refuses it): the root's own
    FAILED is not kept either, so no crash or error between the two can leave a thread
    waiting on a root that failed. The root stays the worker's, in doubt, as claimed."""
    with FakeSlack(clock=world.clock) as fake:
        daemon = daemon_for(world, quick_slack(fake))
        script(world, daemon, 0)  # opened
        world.clock.advance(2)  # past the settle
        assert daemon.pump.dispatch() != []  # its root and its thread planned
        ledger = daemon.alerter.ledger
        claimed = ledger.claim("worker-a", world.clock(), timedelta(seconds=60))
        assert claimed is not None and claimed[0].action == "post_root"
        with world.store.storage.transaction() as tx:
            tx.run(
                "CREATE TRIGGER thread_refused BEFORE UPDATE OF state ON deliveries"
                " WHEN NEW.root_id IS NOT NULL AND NEW.state = 'FAILED'"
                " BEGIN SELECT RAISE(ABORT, 'the thread cannot be written'); END"
            )
        with pytest.raises(sqlite3.Error, match="the thread cannot be written"):
            ledger.failed(claimed[0], world.clock(), "Slack refused the call: channel_not_found")
        with world.store.storage.transaction() as tx:
            tx.run("DROP TRIGGER thread_refused")
        after = deliveries(world)
        [root] = [d for d in ledger.all() if d.action == "post_root"]
        daemon.databases.close()
    assert after[0] == ("post_root", "UNKNOWN", "")
    assert root.lease_owner == "worker-a"
    assert len(after) >= 2
    assert after[1:] == [(a, "PENDING", "") for a, _, _ in after[1:]]


def test_a_failure_the_check_cannot_see_is_tried_again_a_bounded_number_of_times(
    world: World,
) -> None:
    """not_in_channel where the channel itself checks out: each failure brings a check, the
    check finds the path working and tries the row again; RETRIES_AFTER_A_FAILURE times in
    all, then the row stays FAILED rather than fail once a minute for ever. Inviting the
    bot then needs a SIGHUP or a restart, which tries it again once more."""
    seconds, console = Seconds(), io.StringIO()
    with FakeSlack(clock=world.clock) as fake:
        daemon = daemon_for(world, quick_slack(fake))
        health = health_for(daemon, seconds, console)
        health.tick()
        fake.not_member.add("C0INVARIANTS")
        script(world, daemon, 0)
        for _ in range(RETRIES_AFTER_A_FAILURE + 3):
            world.clock.advance(2)
            daemon.deliver()
            seconds.advance(AFTER_FAILURE)
            health.tick()
        posts = sum(1 for method, _ in fake.calls if method == "chat.postMessage")
        stuck = deliveries(world)[0]
        fake.not_member.clear()  # the bot is invited
        health.reconfigure(daemon.config)  # and the operator sends a SIGHUP
        health.tick()
        world.clock.advance(2)
        daemon.deliver()
        after = deliveries(world)[0]
        daemon.databases.close()
    assert posts == RETRIES_AFTER_A_FAILURE
    assert stuck == ("post_root", "FAILED", "Slack refused the call: not_in_channel")
    assert after == ("post_root", "SENT", "")
