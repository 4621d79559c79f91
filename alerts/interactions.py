"""Clicks on the alert buttons: Acknowledge, Unacknowledge, Snooze.

They arrive either over Socket Mode (an outbound websocket: nothing listens next to
production) or as signed HTTP requests on the daemon's listener at /slack/actions. Either
way the click is recorded durably on the incident first (alerts/alerter.py `act`), the root
message update goes through the delivery ledger, and the person who clicked gets an
ephemeral answer. Parsing a payload into clicks is pure; everything else is the shell.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier

from alerts.alerter import Alerter
from alerts.replays import SeenRequests
from monitor.config import ACK_MODES, SlackConfig
from monitor.store.acks import Action
from monitor.store.store_health import STORE_ERRORS, store_error

log = logging.getLogger("invmon.interactions")

SNOOZES = {"1h": timedelta(hours=1), "4h": timedelta(hours=4), "24h": timedelta(hours=24)}
REPLAY_WINDOW = 5 * 60  # Slack's own limit on a request's age
# Slack shows the person an error when an interaction's request is not answered within 3
# seconds. The HTTP endpoint waits this long for the click's work (the replay check, the
# allowlist, recording it), then answers and lets the work finish: its outcome is said by
# an ephemeral message, as over Socket Mode.
ANSWER_WITHIN = 2.0
MAX_RECENT = 10_000  # signatures remembered in memory (Interactions._sent_lately)
# What the person is told when the click could not be recorded.
NOT_RECORDED = (
    "Your click on incident #{incident} was not recorded: invmon's state store did not "
    "answer. Click again in a minute, or use `invmon ack`, `invmon snooze` or `invmon unack` "
    "from a shell."
)


@dataclass(frozen=True)
class Click:
    incident_id: int
    action: Action
    channel: str | None


MAX_INCIDENT_ID = 2**63 - 1  # the state store's integer (SQLite's and PostgreSQL's bigint)


def parse_clicks(payload: Mapping[str, Any]) -> list[Click]:
    """The invmon button clicks in a block_actions payload. Pure."""
    if payload.get("type") != "block_actions":
        return []
    # A signed payload is Slack's, but its shape is still checked, not assumed.
    user = _mapping(payload.get("user"))
    actor = str(user.get("id") or "")
    name = user.get("username") or user.get("name")
    name = name if isinstance(name, str) else None
    channel = _mapping(payload.get("channel")).get("id")
    channel = channel if isinstance(channel, str) else None
    actions = payload.get("actions")
    clicks = []
    for item in actions if isinstance(actions, list) else []:
        if not isinstance(item, dict):
            continue
        action_id = str(item.get("action_id") or "")
        try:
            incident_id = int(str(item.get("value") or ""))
        except ValueError:
            continue
        if not 0 < incident_id <= MAX_INCIDENT_ID:
            continue  # no incident has such an id; the store's integer could not hold it
        action: Action | None = None
        if action_id.startswith("invmon_ack_") and action_id[11:] in ACK_MODES:
            action = Action("ack", actor, name, mode=action_id[11:])  # type: ignore[arg-type]
        elif action_id == "invmon_unack":
            action = Action("unack", actor, name)
        elif action_id.startswith("invmon_snooze_") and action_id[14:] in SNOOZES:
            action = Action("snooze", actor, name, snooze_for=SNOOZES[action_id[14:]])
        if action is not None and actor:
            clicks.append(Click(incident_id, action, channel))
    return clicks


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


class Interactions:
    def __init__(self, alerter: Alerter, config: SlackConfig) -> None:
        self.alerter = alerter
        self.config = config
        self.web = (
            WebClient(
                token=config.token,
                base_url=config.api_url,
                retry_handlers=[],
                timeout=max(1, int(config.timeout.total_seconds())),
            )
            if config.token
            else None
        )
        self.verifier = SignatureVerifier(config.signing_secret) if config.signing_secret else None
        self.seen = SeenRequests(alerter.store.storage)
        self._groups: dict[str, tuple[float, set[str]]] = {}
        # The signatures this process was sent lately (to when, on time.monotonic): a replay
        # to it is refused at once, before the store's own check, which may be slow and
        # then finishes after the answer went.
        self._recent_lock = threading.Lock()  # guards _recent
        self._recent: dict[str, float] = {}

    # --- what a click does ---------------------------------------------------------------

    def handle(self, payload: Mapping[str, Any], source: str) -> list[str]:
        """Apply every click in the payload; return what each person is told."""
        answers = []
        for click in parse_clicks(payload):
            if not self.allowed(click.action.actor):
                answer = "You are not on the list of people who may acknowledge invmon alerts."
                log.warning(
                    "refused a click from outside the allowlist",
                    extra={"fields": {"user": click.action.actor, "incident": click.incident_id}},
                )
            else:
                try:
                    outcome = self.alerter.act(click.incident_id, click.action, source)
                except STORE_ERRORS as exc:
                    # Over Socket Mode the click is acked to Slack already, and over HTTP it
                    # may be: the person is told, never left to think it was recorded.
                    log.error(
                        "a click on incident %s was not recorded: the state store failed: %s",
                        click.incident_id,
                        store_error(exc),
                        extra={"fields": {"source": source, "user": click.action.actor}},
                    )
                    answer = NOT_RECORDED.format(incident=click.incident_id)
                else:
                    answer = outcome.message
                    log.info(
                        "incident %s: %s by %s%s",
                        click.incident_id,
                        click.action.kind,
                        click.action.actor,
                        "" if outcome.changed else " (no change)",
                        extra={"fields": {"source": source}},
                    )
            answers.append(answer)
            self._tell(click, answer)
        return answers

    def allowed(self, user: str) -> bool:
        allowlist = self.config.ack_allowlist
        if not allowlist or user in allowlist:
            return True
        return any(user in self._group(group) for group in allowlist if group.startswith("S"))

    def _group(self, group: str) -> set[str]:
        cached = self._groups.get(group)
        if cached and time.monotonic() - cached[0] < 300:
            return cached[1]
        members: set[str] = set()
        if self.web is not None:
            try:
                members = set(self.web.usergroups_users_list(usergroup=group)["users"])
            except (SlackApiError, OSError) as exc:
                log.warning("cannot read user group %s: %s", group, exc)
                return cached[1] if cached else set()
        self._groups[group] = (time.monotonic(), members)
        return members

    def _tell(self, click: Click, text: str) -> None:
        if self.web is None or not click.channel:
            return
        web, channel, user = self.web, click.channel, click.action.actor

        def post() -> None:
            try:
                web.chat_postEphemeral(channel=channel, user=user, text=text)
            except (SlackApiError, OSError) as exc:
                log.warning("could not answer %s: %s", user, exc)

        # After the ack: Slack wants an answer within 3 seconds, the message can follow.
        threading.Thread(target=post, name="invmon-ephemeral", daemon=True).start()

    # --- the signed HTTP endpoint --------------------------------------------------------

    def http(self, body: bytes, headers: Mapping[str, str]) -> tuple[int, str]:
        """POST /slack/actions: (status, text). Unsigned, forged, stale or replayed: 401."""
        if self.verifier is None:
            return 404, "interactivity over HTTP is not configured (slack.signing_secret)"
        try:
            valid = self.verifier.is_valid_request(body, dict(headers))
        except (ValueError, TypeError, OverflowError):  # a timestamp of "", "abc" or 1e10
            valid = False
        if not valid:
            log.warning("rejected a Slack request: missing, wrong or stale signature")
            return 401, "invalid signature"
        lowered = {k.lower(): v for k, v in headers.items()}
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
        try:
            payload = json.loads(form["payload"][0])
        except (KeyError, IndexError, ValueError, RecursionError):
            # RecursionError: nesting deeper than the decoder goes; a payload of Slack's
            # is a few levels deep.
            return 400, "no payload"
        if not isinstance(payload, dict):
            return 400, "the payload is not a JSON object"
        signature = lowered.get("x-slack-signature", "")
        if self._sent_lately(signature):
            log.warning("rejected a replayed Slack request")
            return 401, "replayed request"
        answered: list[tuple[int, str]] = []  # the work's own answer, when it has one
        done = threading.Event()

        def work() -> None:
            try:
                answered.append(self._accepted(signature, payload))
            except Exception:
                log.exception("could not handle a Slack interaction")
                answered.append((500, "the interaction could not be handled"))
            finally:
                done.set()

        # A thread of its own, not a pool's: one held by a hung store must not hold the
        # interpreter's exit (a daemon thread), nor the next click.
        threading.Thread(target=work, name="invmon-click", daemon=True).start()
        if done.wait(ANSWER_WITHIN):
            return answered[0]
        log.warning(
            "answered a Slack click before it was recorded (the state store or Slack is "
            "slow); the person is told its outcome by message"
        )
        return 200, ""

    def _sent_lately(self, signature: str) -> bool:
        """Whether this process was sent `signature` within the replay window; noted now.
        At most MAX_RECENT are kept, the oldest forgotten first (the store remembers all)."""
        now = time.monotonic()
        with self._recent_lock:
            seen = self._recent.get(signature)
            if seen is not None and now - seen < 2 * REPLAY_WINDOW:
                return True
            self._recent[signature] = now
            if len(self._recent) > MAX_RECENT:
                for old in sorted(self._recent, key=self._recent.__getitem__)[: MAX_RECENT // 2]:
                    del self._recent[old]
        return False

    def _accepted(self, signature: str, payload: Mapping[str, Any]) -> tuple[int, str]:
        """A signed request's clicks applied, unless it is a replay: (status, text)."""
        try:
            replayed = self._replayed(signature)
        except STORE_ERRORS as exc:
            log.error(
                "a Slack request was not handled: the state store failed while checking it "
                "for a replay: %s",
                store_error(exc),
            )
            for click in parse_clicks(payload):
                self._tell(click, NOT_RECORDED.format(incident=click.incident_id))
            return 503, "the state store did not answer"
        if replayed:
            log.warning("rejected a replayed Slack request")
            return 401, "replayed request"
        self.handle(payload, "slack-http")
        return 200, ""

    def _replayed(self, signature: str) -> bool:
        # Remembered in the state store, so a restart does not reopen the window. Slack
        # refuses requests older than 5 minutes; twice that is kept to be safe.
        now = self.alerter.clock()
        forget = now - timedelta(seconds=2 * REPLAY_WINDOW)
        return not self.seen.first_sighting(signature, now, forget)
