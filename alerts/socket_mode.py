"""Receiving button clicks over Slack's Socket Mode: an outbound websocket opened with the
app-level token, so nothing has to listen next to production. slack-sdk's built-in client
reconnects by itself; each envelope is acknowledged first and handled after."""

from __future__ import annotations

import logging

from slack_sdk import WebClient
from slack_sdk.socket_mode import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from alerts.interactions import Interactions
from monitor.config import SlackConfig

log = logging.getLogger("invmon.interactions")


class SocketModeReceiver:
    def __init__(self, interactions: Interactions, config: SlackConfig) -> None:
        assert config.app_token, "Socket Mode needs slack.app_token"
        self.interactions = interactions
        web = WebClient(token=config.token, base_url=config.api_url, retry_handlers=[])
        self.client = SocketModeClient(
            app_token=config.app_token, web_client=web, auto_reconnect_enabled=True
        )
        self.client.socket_mode_request_listeners.append(self._on_request)  # type: ignore[arg-type]

    def _on_request(self, client: SocketModeClient, request: SocketModeRequest) -> None:
        # Ack within Slack's 3 seconds, before any work: the work is durable on its own.
        client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
        if request.type == "interactive":
            try:
                self.interactions.handle(request.payload, "slack-socket")
            except Exception:
                log.exception("could not handle a Socket Mode interaction")

    def start(self) -> None:
        self.client.connect()
        log.info("Socket Mode connected")

    def stop(self) -> None:
        self.client.close()
