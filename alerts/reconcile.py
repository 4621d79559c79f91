"""Reconciling a delivery whose outcome is UNKNOWN: Slack is asked whether the call took
effect (the post in its channel's or thread's history, the file shared in the channel), and
the row is recorded SENT, or sent again only once Slack shows it absent. Not pure: calls
Slack through the Transport and records in the ledger.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from alerts.content import Content
from alerts.deliveries import Delivery
from alerts.ledger import OUTCOME_UNCHECKED, Ledger
from alerts.plans import POSTS
from alerts.retrying import backoff, unexpected
from alerts.transport import Transport, TransportError
from monitor.store.store_health import STORE_ERRORS

log = logging.getLogger("invmon.alerts")


class Sending(Protocol):
    """What reconciling needs of the worker that sends (alerts/worker.py)."""

    def send(self, delivery: Delivery) -> None: ...

    def may_send(self, delivery: Delivery, call: str) -> bool: ...

    def after_error(self, delivery: Delivery, error: TransportError) -> None: ...


@dataclass(frozen=True)
class Reconciler:
    """Decides an UNKNOWN delivery from what Slack shows, after the settle window."""

    ledger: Ledger
    transport: Transport
    content: Content  # the file's title, for an upload completed late
    sending: Sending  # the worker: sends again what Slack shows absent, judges errors
    clock: Callable[[], datetime]
    settle: timedelta  # how long Slack's history may lag a post
    max_backoff: timedelta

    def reconcile(self, delivery: Delivery) -> None:
        """Find out whether an UNKNOWN delivery took effect; re-send only if it did not."""
        now = self.clock()
        since = delivery.unknown_since or now
        if delivery.action == "update_root":
            # Idempotent: applying the latest state again is harmless.
            self.sending.send(delivery)
            return
        if now < since + self.settle:
            # Slack's history can lag the post; look only after the settle window.
            self.ledger.unknown(
                delivery,
                now,
                since + self.settle,
                delivery.last_error or "in doubt",
                since,
            )
            return
        try:
            if delivery.action in POSTS:
                self._post(delivery, now)
            else:
                self._upload(delivery, now)
        except LookupError as error:  # what it belongs to is gone from the store
            self.ledger.failed(delivery, now, str(error))
        except STORE_ERRORS:
            raise
        except Exception as caught:  # the boundary, as in DeliveryWorker.send
            failure = caught if isinstance(caught, TransportError) else unexpected(caught)
            if failure.kind == "permanent":
                # No scan will ever complete (the token is refused, the channel is gone):
                # waiting in UNKNOWN would be the quiet queue nobody sees.
                cause = f"{OUTCOME_UNCHECKED}{failure.message}"
                self.sending.after_error(delivery, TransportError(cause, "permanent"))
                return
            # The scan could not complete: still unknown, look again later.
            self.ledger.unknown(
                delivery,
                now,
                now + backoff(delivery.attempts, self.max_backoff),
                f"reconciliation incomplete: {failure.message}",
                since,
            )

    def _post(self, delivery: Delivery, now: datetime) -> None:
        thread_ts = None
        channel = delivery.channel
        if delivery.action in ("post_reply", "post_detail"):
            root = self.ledger.thread_root(delivery)
            thread_ts, channel = root.slack_ts, root.channel
        oldest = (delivery.created_at - timedelta(minutes=5)).timestamp()
        found = self.transport.find_posted(channel, delivery.idem_key, oldest, thread_ts)
        if found is not None:
            log.info(
                "reconciled: the message was posted", extra={"fields": {"delivery": delivery.id}}
            )
            self.ledger.sent(delivery, now, found.channel, found.ts)
        else:
            log.info(
                "reconciled: the message was not posted; sending it",
                extra={"fields": {"delivery": delivery.id}},
            )
            self.ledger.retry_at(delivery, now, now, "not found in Slack after an unknown outcome")

    def _upload(self, delivery: Delivery, now: datetime) -> None:
        if delivery.slack_file_id is None:
            # Never reached the point of sharing: start again.
            self.ledger.retry_at(delivery, now, now, "upload never completed")
            return
        root = self.ledger.thread_root(delivery)
        shared = self.transport.file_shared(delivery.slack_file_id, root.channel)
        if shared:
            self.ledger.sent(delivery, now)
            return
        if shared is None:
            self.ledger.record_file(delivery, None)
            self.ledger.retry_at(
                delivery, now, now, "Slack does not know the file; uploading again"
            )
            return
        # Uploaded but not shared once the settle window passed: the completion never
        # landed, and a file id can be completed only once, so completing it now is safe.
        if not self.sending.may_send(delivery, "files.completeUploadExternal"):
            return
        try:
            self.transport.complete_upload(
                delivery.slack_file_id,
                self.content.csv(delivery)[1],
                root.channel,
                str(root.slack_ts),
            )
        except TransportError as error:
            self.sending.after_error(delivery, error)
            return
        self.ledger.sent(delivery, self.clock())
