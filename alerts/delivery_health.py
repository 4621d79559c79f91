"""Can alerts reach anyone? The check of the delivery path: Slack's token (`auth.test`, and
the scopes its answer says the token has) and every channel the config names, at start and
again after a delivery fails for good.

A check that finds the path broken is an error, not a quiet queue: each new reason is
logged once and counted in `invmon_delivery_failures`, `problem()` makes /readyz answer 503
("alerts cannot be delivered: ..."), and invmon's self-check `invmon-self/delivery_path` is
recorded like the watchdog's (an incident that reaches Slack if some channel still works)
and printed through the console transport, since Slack may be what is broken. The daemon
also hands `problem()` to the dead man's switch.

A check that cannot complete (Slack unreachable, slow, rate limiting) is no verdict: it is
retried with a backoff and said by `note()` under /readyz's "ok". The ledger keeps every
alert and retries it meanwhile, and a Slack outage reaches every daemon of a fleet at once:
a 503 for it would take them all out of service, or stop a rollout, over nothing a
person could fix in invmon.

What is due and what a finding reads as are pure functions (`due`, `problem_text`); the
class does the calls, holds the verdict and is driven by `tick()`, a scheduler job on the
alerts thread.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TextIO

from alerts.alerter import Alerter
from alerts.console import ConsoleTransport
from alerts.messages import IncidentView, escape, root_message
from alerts.observed import DeliveryMetrics
from alerts.path_errors import fixed_by_the_path
from alerts.transport import Checkable, TransportError
from monitor.config import Config
from monitor.execution.results import RunResult
from monitor.invariants.loader import RESERVED_PREFIX
from monitor.store.context import IncidentContext
from monitor.store.store_health import StoreHealth

log = logging.getLogger("invmon.alerts")

SELF_CHECK = f"{RESERVED_PREFIX}delivery_path"  # an invmon-self/ check
CONTEXT = IncidentContext(
    severity="critical",
    description="Alerts can be delivered: Slack accepts the token, which may post "
    "(chat:write), and every channel the config names exists and is not archived.",
)
AFTER_FAILURE = 60.0  # seconds: a delivery failing for good brings a check at most this often
WHILE_BROKEN = 300.0  # seconds: a broken path is looked at again (a bot invited heals it)
# How many times, in all, a delivery that failed for the path is tried when the checks its
# failures bring find the path working (a heal, a start, a SIGHUP try again regardless).
RETRIES_AFTER_A_FAILURE = 5
CONSOLE = "the console (Slack cannot take it)"  # where the console says it posts
NOT_CHECKED = "the check of Slack's token and channels has not run yet"


@dataclass(frozen=True)
class Finding:
    """One reason alerts cannot be delivered."""

    where: str  # the config field(s): `slack.token`, `slack.routes.severity.critical`
    channel: str | None
    reason: str  # the transport's words

    def row(self) -> dict[str, str | None]:
        return {"field": self.where, "channel": self.channel, "reason": self.reason}


@dataclass(frozen=True)
class Outcome:
    """What one check found: the permanent findings, and why it stopped short, if it did."""

    findings: tuple[Finding, ...] = ()
    unfinished: str | None = None
    identity: str | None = None  # whom Slack took the token for


def named_channels(config: Config) -> dict[str, tuple[str, ...]]:
    """Each channel the config names, with the fields that name it, in the file's order.
    (A file's own `channel:` header is the file's business: its lint, not the daemon's
    readiness.)"""
    found: dict[str, list[str]] = {}

    def add(channel: str | None, field: str) -> None:
        if channel:
            found.setdefault(channel, []).append(field)

    add(config.slack.channel, "slack.channel")
    for severity, channel in config.slack.routes.severity.items():
        add(channel, f"slack.routes.severity.{severity}")
    for owner, channel in config.slack.routes.owner.items():
        add(channel, f"slack.routes.owner.{owner}")
    for name, target in config.targets.items():
        add(target.channel, f"targets.{name}.channel")
    return {channel: tuple(fields) for channel, fields in found.items()}


# The bot scopes invmon's calls use, each with what it is for: one of a group will do (a
# public channel needs channels:*, a private one groups:*). Only chat:write carries every
# alert; without another one, that part fails (said as a warning, not as a broken path).
POST = "chat:write"
NEEDS: tuple[tuple[tuple[str, ...], str], ...] = (
    ((POST,), "every alert"),
    (("files:write",), "the CSV of offending rows"),
    (("files:read",), "telling whether a CSV in doubt was shared"),
    (("channels:history", "groups:history"), "finding a post in doubt before posting it again"),
    (("channels:read", "groups:read"), "finding a channel given by name, and checking each"),
)
GROUPS_NEED = (("usergroups:read",), "ack_allowlist's user groups")
# A classic Slack app's scopes are named otherwise (`bot`, `bot:basic`, `identify`,
# `chat:write:bot`, `files:write:user`, …) and cover the same calls: not judged by NEEDS.
CLASSIC = frozenset({"bot", "bot:basic", "identify", "post", "read", "client", "admin"})
SCOPES_WHERE = (
    "to the Slack app and reinstall it (deploy/slack/manifest.yaml in invmon's source lists "
    "every scope it uses)"
)


def needed_scopes(config: Config) -> tuple[tuple[tuple[str, ...], str], ...]:
    """What the token's scopes are judged by for this config: NEEDS, and usergroups:read
    when `slack.ack_allowlist` names a user group (an S… id)."""
    groups = any(entry.startswith("S") for entry in config.slack.ack_allowlist)
    return NEEDS + ((GROUPS_NEED,) if groups else ())


def lacking_scopes(
    granted: frozenset[str] | None, needs: tuple[tuple[tuple[str, ...], str], ...]
) -> list[tuple[tuple[str, ...], str]]:
    """The needs of which the token was granted no scope, in order; none when Slack did not
    say what it has (no verdict without the facts) or the token is a classic app's."""
    if granted is None or any(s in CLASSIC or s.endswith((":bot", ":user")) for s in granted):
        return []
    return [(names, why) for names, why in needs if not any(n in granted for n in names)]


def scope_verdict(
    granted: frozenset[str] | None, needs: tuple[tuple[tuple[str, ...], str], ...]
) -> tuple[Finding | None, str | None]:
    """(the finding when the token cannot post at all, the warning for the other needs it
    lacks): each None when there is nothing to say."""
    lacking = lacking_scopes(granted, needs)
    cannot_post = any(names == (POST,) for names, _ in lacking)
    finding = (
        Finding("slack.token", None, f"the token lacks the scope {POST}; add it {SCOPES_WHERE}")
        if cannot_post
        else None
    )
    rest = [f"{' or '.join(names)} ({why})" for names, why in lacking if names != (POST,)]
    warning = (
        f"the Slack token lacks {'; '.join(rest)}: that part of an alert will fail; add the "
        f"scope{'s' * (len(rest) > 1)} {SCOPES_WHERE}"
        if rest
        else None
    )
    return finding, warning


def problem_text(findings: tuple[Finding, ...]) -> str | None:
    """What /readyz says, or None when nothing was found."""
    if not findings:
        return None
    # The field after the reason, not before it as `field: reason`: the log's masking takes
    # whatever follows `token:` for a secret.
    return "alerts cannot be delivered: " + "; ".join(f"{f.reason} ({f.where})" for f in findings)


def due(
    now: float,
    next_at: float,
    checked_at: float | None,
    failures: int,
    failures_seen: int,
) -> bool:
    """Whether a check is due at `now` (monotonic seconds): when scheduled, or when a
    delivery has failed for good since the last check and AFTER_FAILURE has passed."""
    if now >= next_at:
        return True
    recent = checked_at is not None and now - checked_at < AFTER_FAILURE
    return failures > failures_seen and not recent


def retry_in(attempts: int, ceiling: float) -> float:
    """After an unfinished check: 2s, 4s, 8s, ... up to `ceiling`."""
    return min(ceiling, float(2 ** min(attempts, 16)))


class DeliveryHealth:
    def __init__(
        self,
        config: Config,
        alerter: Alerter,
        metrics: DeliveryMetrics | None = None,
        store_health: StoreHealth | None = None,
        console: TextIO | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.alerter = alerter
        self.transport = alerter.transport
        self.channels: Mapping[str, tuple[str, ...]] = named_channels(config)
        self.scopes = needed_scopes(config)
        self._short_said: str | None = None  # the last scope warning; _look, under _checking
        self.metrics = metrics
        self.store_health = store_health or StoreHealth("the state store")
        self.console = ConsoleTransport(console)
        self.monotonic = monotonic
        self.ceiling = config.slack.max_backoff.total_seconds()
        self._lock = threading.Lock()  # the verdict, the schedule, and the config's parts
        self._checking = threading.Lock()  # one check at a time
        self._generation = 0  # reconfigure()s so far: a check knows which config it saw
        checkable = isinstance(self.transport, Checkable)
        # The console has nothing to check: it works, and no first check is waited for.
        self._findings: tuple[Finding, ...] | None = None if checkable else ()
        self._unfinished: str | None = NOT_CHECKED if checkable else None
        self._next_at = float("-inf") if checkable else math.inf
        self._checked_at: float | None = None
        self._attempts = 0  # checks in a row that could not complete
        self._failures_seen = 0
        self._said: set[Finding] = set()  # findings logged and counted
        # Whether the next check that passes tries again what failed for the path: at start
        # and after a SIGHUP (a person may have fixed the token or invited the bot since),
        # and on every heal (a broken path found working again).
        self._retry_on_pass = checkable
        self._warned: str | None = None  # the unfinished reason last logged
        if metrics is not None and not checkable:
            metrics.observe_delivery_path(True, 0)

    def reconfigure(self, config: Config) -> None:
        """A SIGHUP took the config live: the channels it names are the ones to check, at
        once (a channel renamed to one that does not exist was never checked, so /readyz
        and invmon_delivery_path_ok kept saying the path worked)."""
        channels = named_channels(config)  # one assignment: _look reads it whole
        scopes = needed_scopes(config)
        with self._lock:
            self.channels = channels
            self.scopes = scopes
            self.ceiling = config.slack.max_backoff.total_seconds()
            if isinstance(self.transport, Checkable):
                self._next_at = float("-inf")  # due now
                self._retry_on_pass = True
            # A check running now looked with the config before: it must not settle as if
            # this one had been checked (its _next_at and _retry_on_pass would win).
            self._generation += 1

    # --- what the daemon asks ------------------------------------------------------------

    def problem(self) -> str | None:
        """For /readyz (503) and the dead man's switch: why no alert can go out, or None."""
        with self._lock:
            return problem_text(self._findings or ())

    def note(self) -> str | None:
        """For /readyz's body under "ok": the last check could not complete, and why."""
        with self._lock:
            if self._findings or self._unfinished is None:
                return None
            if self._findings is None:
                return f"alerts not yet verified: {self._unfinished}"
            return f"alerts verified before, the last check could not complete: {self._unfinished}"

    def verified(self) -> bool | None:
        """True when the last complete check passed, False when the path is broken, None
        while no check has completed."""
        with self._lock:
            return None if self._findings is None else not self._findings

    def tick(self) -> bool:
        """The scheduler's turn: check when one is due; True when it checked."""
        with self._lock:
            is_due = due(
                self.monotonic(),
                self._next_at,
                self._checked_at,
                self.alerter.worker.failures,
                self._failures_seen,
            )
        if is_due:
            self.check()
        return is_due

    def check(self) -> Outcome:
        """Check the path now, and say what changed."""
        with self._checking:
            failures = self.alerter.worker.failures
            with self._lock:  # what this check looks at, of one config
                generation, channels, scopes = self._generation, self.channels, self.scopes
            outcome = self._look(channels, scopes)
            self._settle(outcome, failures, generation)
            return outcome

    # --- the calls -----------------------------------------------------------------------

    def _look(
        self,
        channels: Mapping[str, tuple[str, ...]],
        scopes: tuple[tuple[tuple[str, ...], str], ...],
    ) -> Outcome:
        transport = self.transport
        if not isinstance(transport, Checkable):
            return Outcome()
        try:
            credentials = transport.verify_token()
        except TransportError as error:
            if error.kind == "permanent":
                return Outcome((Finding("slack.token", None, error.message),))
            return Outcome(unfinished=error.message)
        except Exception as error:  # a transport that did not classify it: no verdict
            return Outcome(unfinished=f"{type(error).__name__}: {error}")
        identity = credentials.who
        # A token without a scope passes auth.test, and fails only when an alert needs the
        # scope: every post without chat:write (the path is broken), a CSV without
        # files:write (a warning: the rest of the alert goes out).
        cannot_post, short = scope_verdict(credentials.scopes, scopes)
        if short is not None and short != self._short_said:
            log.warning("%s", short, extra={"fields": {"check": SELF_CHECK}})
        self._short_said = short
        found: list[Finding] = [cannot_post] if cannot_post is not None else []
        for channel, fields in channels.items():
            try:
                transport.check_channel(channel)
            except TransportError as error:
                if error.kind != "permanent":
                    return Outcome(tuple(found), error.message, identity)
                found.append(Finding(", ".join(fields), channel, error.message))
            except Exception as error:
                return Outcome(tuple(found), f"{type(error).__name__}: {error}", identity)
        return Outcome(tuple(found), None, identity)

    # --- what changed --------------------------------------------------------------------

    def _settle(self, outcome: Outcome, failures: int, generation: int) -> None:
        now = self.monotonic()
        with self._lock:
            # A SIGHUP during the check: its verdict stands, and the new config is due now.
            stale = generation != self._generation
            before = self._findings
            findings: tuple[Finding, ...] | None = outcome.findings
            if outcome.unfinished is None:
                self._attempts = 0
                wait = WHILE_BROKEN if findings else math.inf
                self._said.intersection_update(outcome.findings)  # a reason may go and return
            else:
                findings = outcome.findings or before  # a verdict stands until one replaces it
                self._attempts += 1
                wait = retry_in(self._attempts, self.ceiling)
            new = [f for f in findings or () if f not in self._said]
            self._said.update(new)
            self._findings = findings
            self._unfinished = outcome.unfinished
            self._checked_at = now
            self._next_at = now + wait
            after_failure = failures > self._failures_seen  # failures brought this check
            # The failures this check answers; the ones it counts itself are no trigger.
            self._failures_seen = max(failures, self._failures_seen) + len(new)
            warn = outcome.unfinished is not None and outcome.unfinished != self._warned
            self._warned = outcome.unfinished
            passed = outcome.unfinished is None and not findings
            # A check a failure brought that finds the path working: the failure may have
            # healed before it looked (a bot invited at once), or be one the check cannot
            # see (not_in_channel where the channel itself checks out): its rows are tried
            # again, each RETRIES_AFTER_A_FAILURE times at most, since such a check comes
            # after each failure and it could otherwise go on for ever.
            # Not on a stale verdict: the check of the new config, due now, decides.
            retry = not stale and passed and (bool(before) or self._retry_on_pass or after_failure)
            capped = None if before or self._retry_on_pass else RETRIES_AFTER_A_FAILURE
            # After a start or a SIGHUP, any channel: a person acted, and each row is tried
            # once. After a heal, the channels the check saw broken and working: not a
            # file's own channel, which may be broken still and would fail again at every
            # check its failure brought.
            checked = None if self._retry_on_pass else frozenset(self.channels)
            if passed and not stale:
                self._retry_on_pass = False
            if stale:
                self._next_at = float("-inf")
        for _ in new:
            self.alerter.worker.count_failure()
        if new and findings:
            log.error("%s", problem_text(findings), extra={"fields": {"check": SELF_CHECK}})
            self._record(findings, announce=True)
        elif findings and findings != before:  # fewer reasons than before: said in Slack
            self._record(findings, announce=False)
        elif outcome.unfinished is None and not findings:
            if before:
                log.info("alerts can be delivered again: the token and the channels check out")
                self._record((), announce=False)
            elif before is None:
                log.info(
                    "alerts can be delivered: the token (%s) and %d channel(s) check out",
                    outcome.identity or "nothing to check",
                    len(self.channels),
                )
                self._record((), announce=False, only_if_open=True)
        if retry and not self._retry_failed(checked, capped):
            # The store failed under it: the path still checks out, so no check would come
            # again by itself; one soon tries again (with every channel, as after a start).
            with self._lock:
                self._retry_on_pass = True
                self._next_at = min(self._next_at, self.monotonic() + retry_in(1, self.ceiling))
        if warn:
            log.warning(
                "alerts not verified: %s; checking again in %.0fs", outcome.unfinished, wait
            )
        if self.metrics is not None:
            self.metrics.observe_delivery_path(self.verified(), self.alerter.worker.failures)

    def _retry_failed(self, checked: frozenset[str] | None, capped: int | None) -> bool:
        """The path checks out: what failed for good for the token, or for its channel
        (one of `checked`; None: any), is tried again if its incident is still open. False
        when the store failed and nothing was queued."""

        def worth(channel: str, error: str) -> bool:
            broke = fixed_by_the_path(error)
            in_sight = checked is None or channel in checked
            return broke == "token" or (broke == "channel" and in_sight)

        done = False
        with self.store_health.guard("queueing again the alerts that failed for the path"):
            again = self.alerter.ledger.retry_failed(self.alerter.clock(), worth, capped)
            done = True
            if again:
                log.info(
                    "%d alert deliver%s of open incidents that failed for the token or their "
                    "channel %s queued again: the token and the channels check out",
                    again,
                    "y" if again == 1 else "ies",
                    "is" if again == 1 else "are",
                )
        return done

    def _record(
        self, findings: tuple[Finding, ...], announce: bool, only_if_open: bool = False
    ) -> None:
        """Store the self-check's run (it opens, updates or resolves its incident), and
        print the alert when the path broke."""
        store = self.alerter.store
        now = self.alerter.clock()
        rows = [f.row() for f in findings]
        incident_id = 0
        with self.store_health.guard("recording the check of the alert path"):
            if only_if_open and not any(i.invariant == SELF_CHECK for i in store.open_incidents()):
                return
            result = RunResult.of_rows(SELF_CHECK, rows, now, "field")
            store.record_run(SELF_CHECK, result, now, context=CONTEXT)
            incident_id = next(
                (i.id for i in store.open_incidents() if i.invariant == SELF_CHECK), 0
            )
        problem = problem_text(findings)
        if not announce or problem is None:
            return
        view = IncidentView(
            incident_id=incident_id,
            invariant=SELF_CHECK,
            kind="violation",
            severity=CONTEXT.severity,
            description=CONTEXT.description,
            opened_at=now,
            count=len(rows),
            columns=["field", "channel", "reason"],
            rows=rows,
        )
        message = root_message(view, now)
        # The table cuts its cells; the reasons are what the reader acts on, so in full too.
        whole = {"type": "section", "text": {"type": "mrkdwn", "text": escape(problem)}}
        blocks = [*message.blocks[:-1], whole, message.blocks[-1]]
        try:
            self.console.post(CONSOLE, message.text, blocks, "")
        except (OSError, ValueError) as error:  # a closed or broken stdout
            log.warning("the console could not print invmon's own alert: %s", error)
