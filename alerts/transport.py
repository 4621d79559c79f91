"""What a message destination must do, and the one error every destination raises.

The delivery worker talks only to this interface; `slack.py` implements it over slack-sdk,
`console.py` prints. Errors are classified once, at the boundary, by what they mean for a
retry: that decision is the whole point of the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

ErrorKind = Literal["ambiguous", "retry", "permanent"]


class TransportError(Exception):
    """A failed call.

    - ambiguous: the request may have reached Slack (timeout, reset, 5xx). Never retried
      blindly: the delivery becomes UNKNOWN and is reconciled first.
    - retry: it certainly did not take effect (connection refused, 429); retry later,
      after `retry_after` seconds when Slack said so.
    - permanent: it will not heal (channel_not_found, invalid_auth, ...): FAILED.
    """

    def __init__(self, message: str, kind: ErrorKind, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.retry_after = retry_after


@dataclass(frozen=True)
class Credentials:
    """Who the token is, and the scopes it was granted: None when the answer did not say
    (Slack sends them in its `x-oauth-scopes` header; a proxy may drop it)."""

    who: str
    scopes: frozenset[str] | None = None


@dataclass(frozen=True)
class Posted:
    channel: str  # the channel id Slack answered with
    ts: str


class Transport(Protocol):
    name: str

    def post(
        self,
        channel: str,
        text: str,
        blocks: list[dict[str, Any]],
        key: str,
        thread_ts: str | None = None,
    ) -> Posted: ...

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None: ...

    def find_posted(
        self, channel: str, key: str, oldest: float, thread_ts: str | None = None
    ) -> Posted | None:
        """The message carrying `key` in its metadata, or None when a complete scan shows
        it was never posted. Raises TransportError when the scan cannot complete."""
        ...

    def start_upload(self, filename: str, data: bytes) -> str:
        """Reserve an upload and send the bytes; return the file id (not yet shared)."""
        ...

    def complete_upload(self, file_id: str, title: str, channel: str, thread_ts: str) -> None: ...

    def file_shared(self, file_id: str, channel: str) -> bool | None:
        """True when shared in `channel`; False when the file exists unshared; None when
        Slack does not know the file (the upload never completed)."""
        ...


@runtime_checkable
class Checkable(Protocol):
    """A destination whose path can be checked before anything is sent (Slack: the token
    and the channels); the console has nothing to check and does not implement it."""

    def verify_token(self) -> Credentials:
        """Who the credentials are, and what they may do; TransportError when they are
        refused or unreachable."""
        ...

    def check_channel(self, channel: str) -> str:
        """The channel's id, looked up afresh; TransportError, permanent, when messages
        cannot go there."""
        ...
