"""The Slack side of delivery: slack-sdk's WebClient, with retries turned off.

slack-sdk's default handler retries a request after a connection error, which can post a
message twice without anyone knowing; here every retry decision belongs to the ledger, so the
client gets an empty list of retry handlers and each failure is classified exactly once.
"""

from __future__ import annotations

import http.client
import math
import re
import socket
import urllib.error
import urllib.request
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from alerts.path_errors import CHANNEL_ERRORS, NEEDED, TOKEN_ERRORS, missing_scope
from alerts.transport import Credentials, ErrorKind, Posted, TransportError

METADATA_EVENT = "invmon_alert"
DEFAULT_API_URL = "https://slack.com/api/"

# Errors that no retry will fix; the delivery fails with a clear log line instead of looping.
PERMANENT = (
    TOKEN_ERRORS
    | CHANNEL_ERRORS
    | {
        "invalid_blocks",
        "invalid_arguments",
        "msg_too_long",
        "cant_update_message",
        "message_not_found",
        "thread_not_found",
    }
)
# Errors Slack returns when it may or may not have done the work.
AMBIGUOUS = {"internal_error", "fatal_error", "service_unavailable", "request_timeout"}
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{6,}$")


def _seconds(retry_after: str | None) -> float | None:
    """Retry-After as seconds (Slack sends whole ones; a fraction is rounded up), or None
    when absent or unreadable (then the row backs off by its attempts)."""
    try:
        wait = float(retry_after or "")
    except ValueError:
        return None
    return float(math.ceil(wait)) if 0 <= wait <= 3600 else None


def classify_api_error(
    status: int, error: str, retry_after: str | None, needed: str = ""
) -> TransportError:
    """`needed`: the scopes Slack says a missing_scope call needed, said in the message
    (path_errors.py tells from them whether the path failed or one part of an alert)."""
    if status == 429 or error in ("ratelimited", "rate_limited", "message_limit_exceeded"):
        wait = _seconds(retry_after)
        return TransportError(f"rate limited by Slack (retry after {wait}s)", "retry", wait)
    if status >= 500 or error in AMBIGUOUS:
        return TransportError(f"Slack answered {status} {error or ''}".strip(), "ambiguous")
    # Only errors known not to heal are final; anything unknown might have landed, so it is
    # reconciled before any retry rather than dropped.
    kind: ErrorKind = "permanent" if error in PERMANENT else "ambiguous"
    said = f" ({NEEDED}{needed[:200]})" if error == "missing_scope" and needed else ""
    return TransportError(f"Slack refused the call: {error or status}{said}", kind)


def classify_exception(exc: BaseException) -> TransportError:
    """A network failure: refused means it never left; anything later may have landed."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, ConnectionRefusedError):
        return TransportError(f"cannot reach Slack: {reason}", "retry")
    if isinstance(reason, socket.gaierror):
        return TransportError(f"cannot resolve Slack's address: {reason}", "retry")
    if isinstance(reason, TimeoutError | socket.timeout):
        return TransportError("no answer from Slack before the timeout", "ambiguous")
    return TransportError(
        f"connection to Slack failed: {type(reason).__name__}: {reason}", "ambiguous"
    )


def _field(answer: Any, name: str, method: str) -> Any:
    """A field of an ok answer. Slack always sends it; an answer without it (a proxy, a
    broken server) means the call may or may not have taken effect."""
    try:
        value = answer[name]  # a SlackResponse answers None for a missing key
    except (KeyError, TypeError, ValueError):
        value = None
    if value is None:
        raise TransportError(f"Slack's answer to {method} has no {name!r}", "ambiguous")
    return value


class SlackTransport:
    name = "slack"

    def __init__(self, token: str, api_url: str = DEFAULT_API_URL, timeout: float = 10) -> None:
        base = api_url if api_url.endswith("/") else api_url + "/"
        # urllib takes a float timeout, though slack-sdk annotates it as an int.
        self.client = WebClient(
            token=token,
            base_url=base,
            timeout=timeout,  # type: ignore[arg-type]
            retry_handlers=[],
        )
        self.timeout = timeout
        self._channel_ids: dict[str, str] = {}

    # --- the calls -----------------------------------------------------------------------

    def _call(self, method: str, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, method)(**kwargs)
        except SlackApiError as exc:
            response = exc.response
            data = response.data if isinstance(response.data, dict) else {}
            headers = response.headers or {}
            retry_after = headers.get("Retry-After") or headers.get("retry-after")
            raise classify_api_error(
                response.status_code,
                str(data.get("error") or ""),
                retry_after,
                str(data.get("needed") or ""),
            ) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise classify_exception(exc) from None
        except SlackClientError as exc:
            # Raised before anything is sent (an API URL slack-sdk will not call, a proxy
            # setting it cannot use): no retry changes that.
            raise TransportError(f"cannot call Slack: {exc}", "permanent") from None
        except ValueError as exc:  # a body that is not JSON: a proxy or a broken answer
            raise TransportError(f"unreadable answer from Slack: {exc}", "ambiguous") from None

    def verify_token(self) -> Credentials:
        """Who the token is (auth.test): `user on team`, with the scopes Slack says it has
        (its `x-oauth-scopes` header); TransportError when Slack refuses it."""
        answer = self._call("auth_test")
        who = f"{answer.get('user') or answer.get('user_id')} on {answer.get('team')}"
        headers = getattr(answer, "headers", None) or {}
        granted = next((v for k, v in headers.items() if str(k).lower() == "x-oauth-scopes"), None)
        if not isinstance(granted, str):
            return Credentials(who)
        return Credentials(who, frozenset(s.strip() for s in granted.split(",") if s.strip()))

    def check_channel(self, channel: str) -> str:
        """Slack's id for `channel`, looked up afresh (a channel renamed, archived or gone
        since it was cached is found), and its details read (conversations.info), which
        is what shows an id that names no channel: TransportError, permanent, when it
        cannot take messages."""
        self._channel_ids.pop(channel.lstrip("#"), None)
        channel_id = self.channel_id(channel)
        try:
            answer = self._call("conversations_info", channel=channel_id)
        except TransportError as error:
            if channel_id == channel and missing_scope(error.message):
                # Given by id, it takes posts without channels:read, which only this look
                # needs: no verdict on the channel (the scope check warns of the scope).
                return channel_id
            raise
        info = _field(answer, "channel", "conversations.info")
        if isinstance(info, dict) and info.get("is_archived"):
            raise TransportError(f"channel {channel!r} is archived", "permanent")
        return channel_id

    def channel_id(self, channel: str) -> str:
        """Slack's id for a channel given by name (`#alerts`) or id; history needs ids."""
        if _CHANNEL_ID.match(channel):
            return channel
        name = channel.lstrip("#")
        if name not in self._channel_ids:
            cursor = None
            while True:
                page = self._call(
                    "conversations_list",
                    types="public_channel,private_channel",
                    limit=1000,
                    cursor=cursor,
                    exclude_archived=True,
                )
                for found in page.get("channels", []):
                    if isinstance(found, dict) and "name" in found and "id" in found:
                        self._channel_ids[str(found["name"])] = str(found["id"])
                cursor = (page.get("response_metadata") or {}).get("next_cursor")
                if name in self._channel_ids or not cursor:
                    break
        if name not in self._channel_ids:
            raise TransportError(f"channel {channel!r} not found or not visible", "permanent")
        return self._channel_ids[name]

    def post(
        self,
        channel: str,
        text: str,
        blocks: list[dict[str, Any]],
        key: str,
        thread_ts: str | None = None,
    ) -> Posted:
        response = self._call(
            "chat_postMessage",
            channel=self.channel_id(channel),
            text=text,
            blocks=blocks,
            thread_ts=thread_ts,
            metadata={"event_type": METADATA_EVENT, "event_payload": {"key": key}},
            unfurl_links=False,
            unfurl_media=False,
        )
        return Posted(
            str(_field(response, "channel", "chat.postMessage")),
            str(_field(response, "ts", "chat.postMessage")),
        )

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None:
        self._call("chat_update", channel=self.channel_id(channel), ts=ts, text=text, blocks=blocks)

    def find_posted(
        self, channel: str, key: str, oldest: float, thread_ts: str | None = None
    ) -> Posted | None:
        channel_id = self.channel_id(channel)
        cursor = None
        while True:
            if thread_ts:
                page = self._call(
                    "conversations_replies",
                    channel=channel_id,
                    ts=thread_ts,
                    include_all_metadata=True,
                    limit=200,
                    cursor=cursor,
                )
            else:
                page = self._call(
                    "conversations_history",
                    channel=channel_id,
                    oldest=f"{oldest:.6f}",
                    include_all_metadata=True,
                    limit=200,
                    cursor=cursor,
                )
            for message in page.get("messages", []):
                metadata = message.get("metadata") or {}
                payload = metadata.get("event_payload") or {}
                if metadata.get("event_type") == METADATA_EVENT and payload.get("key") == key:
                    return Posted(channel_id, str(_field(message, "ts", "conversations.history")))
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                return None

    def start_upload(self, filename: str, data: bytes) -> str:
        reserved = self._call("files_getUploadURLExternal", filename=filename, length=len(data))
        url = str(_field(reserved, "upload_url", "files.getUploadURLExternal"))
        request = urllib.request.Request(url, data=data, method="POST")
        request.add_header("Content-Type", "application/octet-stream")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                answer.read()
        except urllib.error.HTTPError as exc:
            raise classify_api_error(exc.code, "", exc.headers.get("Retry-After")) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise classify_exception(exc) from None
        except ValueError as exc:
            # urllib refuses the URL before sending anything; the next reservation brings
            # a new one.
            raise TransportError(f"Slack's upload URL cannot be used: {exc}", "retry") from None
        return str(_field(reserved, "file_id", "files.getUploadURLExternal"))

    def complete_upload(self, file_id: str, title: str, channel: str, thread_ts: str) -> None:
        self._call(
            "files_completeUploadExternal",
            files=[{"id": file_id, "title": title}],
            channel_id=self.channel_id(channel),
            thread_ts=thread_ts,
        )

    def file_shared(self, file_id: str, channel: str) -> bool | None:
        try:
            info = self._call("files_info", file=file_id)
        except TransportError as exc:
            if "file_not_found" in exc.message:
                return None
            raise
        shares = _field(info, "file", "files.info").get("shares") or {}
        channel_id = self.channel_id(channel)
        return any(channel_id in shares.get(kind, {}) for kind in ("public", "private"))
