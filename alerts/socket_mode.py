"""Receiving button clicks over Slack's Socket Mode: an outbound websocket opened with the
app-level token, so nothing has to listen next to production. slack-sdk's built-in client
reconnects by itself once connected; each envelope is acknowledged first and handled after.

The first connect is tried on a thread of its own, again and again with a backoff: an app
token Slack refuses (the deploy kit's placeholder) or a Slack that cannot be reached at start
ended the daemon (a traceback, or a listener's error naming http.listen). Now the daemon
runs and alerts; `problem()` says a refused token (/readyz 503: a person must fix the
config), `note()` a Slack not reached (under /readyz's "ok": an outage reaches every
daemon of a fleet at once, as DeliveryHealth reasons)."""

from __future__ import annotations

import logging
import threading

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from alerts.interactions import Interactions
from monitor.config import SlackConfig

log = logging.getLogger("invmon.interactions")

FIRST_RETRY = 5.0  # seconds after a failed connect; doubled each time, up to LAST_RETRY
LAST_RETRY = 300.0
STOP_WAIT = 5.0  # seconds stop() waits for a connect under way (its web call is bounded)
# The web call that hands out the socket's URL: bounded, so a Slack that does not answer
# holds the connecting thread this long, not the SDK's default 30 s.
CALL_TIMEOUT = 10
# What Slack says of a token it will never accept: the config must change.
REFUSALS = {
    "invalid_auth",
    "not_authed",
    "account_inactive",
    "token_revoked",
    "not_allowed_token_type",
}


def failure(exc: Exception) -> tuple[bool, str]:
    """(refused, what to say) of a failed connect; never quotes the token."""
    if isinstance(exc, SlackApiError):
        error = str(exc.response.get("error", "")) if exc.response is not None else ""
        if error in REFUSALS:
            return True, f"Slack refused the app token: {error} (slack.app_token)"
        return False, f"Slack did not open Socket Mode: {error or exc} (slack.app_token)"
    reason = getattr(exc, "reason", None) or exc
    return False, f"cannot reach Slack for Socket Mode: {reason} (slack.app_token)"


class SocketModeReceiver:
    def __init__(self, interactions: Interactions, config: SlackConfig) -> None:
        assert config.app_token, "Socket Mode needs slack.app_token"
        self.interactions = interactions
        web = WebClient(
            token=config.token, base_url=config.api_url, retry_handlers=[], timeout=CALL_TIMEOUT
        )
        self.client = SocketModeClient(
            app_token=config.app_token, web_client=web, auto_reconnect_enabled=True
        )
        self.client.socket_mode_request_listeners.append(self._on_request)  # type: ignore[arg-type]
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._connect_until_done, name="invmon-socket-mode", daemon=True
        )
        self._lock = threading.Lock()  # guards _failure
        self._failure: tuple[bool, str] | None = None  # (refused, why) of the last connect
        self.first_retry = FIRST_RETRY

    def _on_request(self, client: SocketModeClient, request: SocketModeRequest) -> None:
        # Ack within Slack's 3 seconds, before any work: the work is durable on its own.
        client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
        if request.type == "interactive":
            try:
                self.interactions.handle(request.payload, "slack-socket")
            except Exception:
                log.exception("could not handle a Socket Mode interaction")

    def start(self) -> None:
        self._thread.start()

    def _connect_until_done(self) -> None:
        wait = self.first_retry
        said = None
        while not self._stopped.is_set():
            try:
                self.client.connect()
            except Exception as exc:
                refused, reason = failure(exc)
                with self._lock:
                    self._failure = (refused, reason)
                if reason != said:  # each new reason once, not every retry
                    log.error("Socket Mode: %s; buttons do nothing until it connects", reason)
                    said = reason
                self._stopped.wait(wait)
                wait = min(wait * 2, LAST_RETRY)
                continue
            if self._stopped.is_set():
                # Connected after stop() gave up waiting and closed the client: a session
                # left open would take Slack's clicks and answer none of them.
                self.client.close()
                return
            with self._lock:
                self._failure = None
            log.info("Socket Mode connected")
            return  # from here the SDK reconnects by itself

    def problem(self) -> str | None:
        """A refused app token: buttons cannot work until the config changes."""
        with self._lock:
            found = self._failure
        return found[1] if found is not None and found[0] else None

    def note(self) -> str | None:
        """Slack not reached for Socket Mode yet: said, but no reason to be out of service."""
        with self._lock:
            found = self._failure
        return found[1] if found is not None and not found[0] else None

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(STOP_WAIT)
            if self._thread.is_alive():
                log.warning(
                    "Socket Mode: a connect still under way after %.0fs; it ends with the process",
                    STOP_WAIT,
                )
        self.client.close()
