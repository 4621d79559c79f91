"""The delivery worker: claims due rows from the ledger and performs them through a
Transport, reconciling with Slack before anything whose fate is unknown is tried again.

It renders every message at send time from the state store, so a retried update always shows
the latest state and a late one never overwrites a newer one with old figures.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from alerts.csvfile import csv_title, left_out_because, offending_csv
from alerts.deliveries import Delivery
from alerts.ledger import POST_ACTIONS, Ledger
from alerts.messages import (
    SUMMARY_GROUPS,
    IncidentView,
    Message,
    digest_message,
    escape,
    reminder_message,
    reply_message,
    root_message,
    summary_message,
    with_subject,
)
from alerts.plans import POSTS
from alerts.thread_batching import CHANGED, changes_message
from alerts.transport import Transport, TransportError
from monitor.clock import Clock
from monitor.invariants.header import InvariantHeader
from monitor.store.acks import ack_line
from monitor.store.records import IncidentContext
from monitor.store.state import StateStore
from monitor.store.store_health import STORE_ERRORS

log = logging.getLogger("invmon.alerts")

Describe = Callable[[str], InvariantHeader | None]


def unexpected(error: BaseException) -> TransportError:
    """An exception no transport classified, as the permanent failure it is taken for."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    name = type(error).__name__
    return TransportError(f"{name}: {text}" if text else name, "permanent")


def backoff(attempts: int, ceiling: timedelta) -> timedelta:
    """2s, 4s, 8s, ... up to `ceiling`."""
    return min(ceiling, timedelta(seconds=2 ** min(attempts, 16)))


def send_margin(lease: timedelta) -> timedelta:
    """How much lease must be left for a call that creates something to go out: a quarter
    of the lease, at least 5 s, but at most half of it, since the renewing thread (every
    third of the lease) leaves two thirds at worst and a healthy worker must never refuse."""
    return min(max(timedelta(seconds=5), lease / 4), lease / 2)


@dataclass(frozen=True)
class WorkerSettings:
    lease: timedelta = timedelta(seconds=60)
    settle: timedelta = timedelta(seconds=10)
    csv_max_rows: int = 1000
    max_backoff: timedelta = timedelta(minutes=5)
    csv_max_bytes: int = 4 << 20


class Views:
    """Reads what a message shows from the state store."""

    def __init__(
        self,
        store: StateStore,
        describe: Describe,
        clock: Clock,
        sample: int = 20,
        buttons: tuple[str, ...] = (),
        several_targets: bool = False,
    ) -> None:
        self.store = store
        self.describe = describe
        self.sample = sample
        self.buttons = buttons
        self.clock = clock
        self.several_targets = several_targets

    def incident(self, incident_id: int) -> IncidentView:
        incident = self.store.incident(incident_id)
        if incident is None:
            raise LookupError(f"incident #{incident_id} is not in the state store")
        # Stored before contexts were kept: the file as it is now.
        context = incident.context or IncidentContext.of(self.describe(incident.invariant))
        keys = self.store.incident_keys(incident_id)
        open_rows = [k.row for k in keys if k.gone_at is None and k.row]
        columns = list(open_rows[0]) if open_rows else []
        return IncidentView(
            incident_id=incident_id,
            invariant=incident.invariant,
            kind=incident.kind,
            severity=context.severity,
            description=context.description,
            owner=context.owner,
            runbook=context.runbook,
            opened_at=incident.opened_at,
            resolved_at=incident.resolved_at,
            ended_as=None if incident.state == "open" else incident.state,
            count=incident.last_count,
            detail=incident.detail,
            columns=columns,
            rows=open_rows[: self.sample],
            acknowledged=ack_line(incident, self.clock()),
            acked=bool(incident.acked_by),
            buttons=self.buttons,
            target=incident.target,
            several_targets=self.several_targets,
        )

    def csv_file(self, incident_id: int, max_rows: int, max_bytes: int) -> tuple[bytes, str]:
        """(the CSV, its title): the rows that offended when the incident opened, as they
        were then and duplicates kept, whenever the upload happens, so a retried or a
        reconciled upload attaches the same file with the same title."""
        incident = self.store.incident(incident_id)
        if incident is None:
            raise LookupError(f"incident #{incident_id} is not in the state store")
        opening = self.store.opening_rows(incident_id)
        if opening is not None:
            rows = opening[1]
        else:  # stored before opening rows were kept: the keys first seen at opening
            keys = self.store.incident_keys(incident_id)
            rows = [k.row for k in keys if k.first_seen_at == incident.opened_at and k.row]
        data, attached = offending_csv(rows, max_rows, max_bytes)
        why = left_out_because(len(rows), attached, max_rows, max_bytes)
        return data, csv_title(incident.invariant, attached, incident.first_count, why)


class DeliveryWorker:
    def __init__(
        self,
        ledger: Ledger,
        transport: Transport,
        views: Views,
        clock: Callable[[], datetime],
        settings: WorkerSettings | None = None,
        owner: str | None = None,
    ) -> None:
        self.ledger = ledger
        self.transport = transport
        self.views = views
        self.clock = clock
        self.settings = settings or WorkerSettings()
        self.owner = owner or f"worker-{uuid.uuid4().hex[:8]}"
        self.failures = 0  # permanent failures, for the metric
        # The alerts job and the watchdog's turn both deliver; a count must not be lost.
        self._counting = threading.Lock()

    def count_failure(self) -> None:
        """One more permanent failure for `invmon_delivery_failures` (a delivery that
        failed for good, or a check that found the delivery path broken)."""
        with self._counting:
            self.failures += 1

    def run_due(self, limit: int = 50) -> int:
        """Perform up to `limit` due deliveries; return how many were handled."""
        handled = 0
        while handled < limit:
            claimed = self.ledger.claim(self.owner, self.clock(), self.settings.lease)
            if claimed is None:
                break
            delivery, previous_state = claimed
            with self._holding(delivery):
                if previous_state == "UNKNOWN":
                    self._reconcile(delivery)
                else:
                    self._send(delivery)
            handled += 1
        return handled

    @contextlib.contextmanager
    def _holding(self, delivery: Delivery) -> Iterator[None]:
        """Renew the lease while the work runs, so a slow Slack call never lets another
        worker take the row over (and reconcile a post that is still in flight)."""
        lease = self.settings.lease
        done = threading.Event()

        def renew() -> None:
            while not done.wait(lease.total_seconds() / 3):
                if not self.ledger.renew(delivery, self.clock() + lease):
                    return

        keeper = threading.Thread(target=renew, name="invmon-lease", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            done.set()
            keeper.join()

    # --- sending -------------------------------------------------------------------------

    def _send(self, delivery: Delivery) -> None:
        try:
            self._perform(delivery)
        except TransportError as error:
            self._after_error(delivery, error)
        except LookupError as error:
            self.ledger.failed(delivery, self.clock(), str(error))
        except STORE_ERRORS:
            raise  # the store's own trouble: StoreHealth says it, and the row stays claimed
        except Exception as error:
            # The boundary: a transport that raised something other than TransportError, or
            # a message that cannot be built. Nothing can say the call was sent (the Slack
            # transport classifies everything it sends), and sending it again would meet
            # the same error: it fails for good, said once, not as a traceback every turn.
            self._after_error(delivery, unexpected(error))

    def _perform(self, delivery: Delivery) -> None:
        now = self.clock()
        action = delivery.action
        if action in ("post_root", "post_digest", "post_summary"):
            message = self._root_content(delivery, now)
            if not self._may_send(delivery, "chat.postMessage"):
                return
            posted = self.transport.post(
                delivery.channel, message.text, message.blocks, delivery.idem_key
            )
            self.ledger.sent(delivery, self.clock(), posted.channel, posted.ts)
            return
        root = self._root(delivery)
        if action == "update_root":
            if root.action == "post_digest" and delivery.incident_id is not None:
                # In a digest, the incident's own message (with its buttons) is the detail
                # post in the thread; it is what changes, and the digest's summary too.
                detail = self.ledger.detail_of(delivery.incident_id, root.id)
                if detail is not None and detail.slack_ts:
                    own = root_message(self.views.incident(delivery.incident_id), now)
                    self.transport.update(root.channel, detail.slack_ts, own.text, own.blocks)
            message = self._root_content(root, now)
            self.transport.update(root.channel, str(root.slack_ts), message.text, message.blocks)
            self.ledger.sent(delivery, self.clock())
        elif action in ("post_reply", "post_detail"):
            message = self._reply_content(delivery, now, in_digest=root.action == "post_digest")
            if not self._may_send(delivery, "chat.postMessage"):
                return
            posted = self.transport.post(
                root.channel,
                message.text,
                message.blocks,
                delivery.idem_key,
                thread_ts=root.slack_ts,
            )
            self.ledger.sent(delivery, self.clock(), posted.channel, posted.ts)
        elif action == "upload_csv":
            self._upload(delivery, root)

    def _may_send(self, delivery: Delivery, call: str) -> bool:
        """Re-check the lease in the store immediately before a call that creates something.

        Slack has no idempotency key: a worker frozen (a GC pause, SIGSTOP, a stalled VM)
        between its claim and the call, for longer than the lease, would post after another
        worker took the row over, reconciled and posted. So the call goes out only while the
        row is still this worker's with at least `send_margin` of lease left (which also
        covers the clocks of two hosts disagreeing a little); otherwise whoever holds the row
        now decides, and this worker leaves it untouched."""
        now = self.clock()
        lease = self.settings.lease
        if self.ledger.still_held(delivery, now + send_margin(lease), now + lease):
            return True
        log.warning(
            "not sending: the lease on this delivery was lost or is about to run out;"
            " the worker that holds it now decides",
            extra={
                "fields": {
                    "delivery": delivery.id,
                    "action": delivery.action,
                    "call": call,
                    "invariant": delivery.invariant,
                }
            },
        )
        return False

    def _upload(self, delivery: Delivery, root: Delivery) -> None:
        assert delivery.incident_id is not None
        data, title = self._csv(delivery)
        # Files carry no metadata, so the upload is recognised by its file id: stored before
        # the upload is completed (shared), and looked up with files.info when in doubt.
        file_id = self.transport.start_upload(f"{delivery.invariant.replace('/', '_')}.csv", data)
        self.ledger.record_file(delivery, file_id)
        # An upload not completed is invisible to users: only the completion must be fenced.
        if not self._may_send(delivery, "files.completeUploadExternal"):
            return
        self.transport.complete_upload(file_id, title, root.channel, str(root.slack_ts))
        self.ledger.sent(delivery, self.clock())

    def _after_error(self, delivery: Delivery, error: TransportError) -> None:
        now = self.clock()
        if error.kind == "permanent":
            self.count_failure()
            log.error(
                "delivery failed for good: %s",
                error.message,
                extra={
                    "fields": {
                        "delivery": delivery.id,
                        "action": delivery.action,
                        "invariant": delivery.invariant,
                        "channel": delivery.channel,
                    }
                },
            )
            self.ledger.failed(delivery, now, error.message)
        elif error.kind == "retry" or delivery.action == "update_root":
            # Certainly not applied (or, for an update, harmless to apply twice).
            wait = (
                timedelta(seconds=error.retry_after)
                if error.retry_after is not None
                else backoff(delivery.attempts, self.settings.max_backoff)
            )
            self.ledger.retry_at(delivery, now, now + wait, error.message)
            if error.retry_after is not None and delivery.action in POST_ACTIONS:
                # Slack limits posts per channel: the channel's other posts wait too.
                self.ledger.hold_posts(delivery.channel, now + wait)
        else:
            log.warning(
                "delivery outcome unknown, will check Slack before retrying: %s",
                error.message,
                extra={"fields": {"delivery": delivery.id}},
            )
            self.ledger.unknown(delivery, now, now + self.settings.settle, error.message)

    # --- reconciling ---------------------------------------------------------------------

    def _reconcile(self, delivery: Delivery) -> None:
        """Find out whether an UNKNOWN delivery took effect; re-send only if it did not."""
        now = self.clock()
        since = delivery.unknown_since or now
        if delivery.action == "update_root":
            self._send(delivery)  # idempotent: applying the latest state again is harmless
            return
        if now < since + self.settings.settle:
            # Slack's history can lag the post; look only after the settle window.
            self.ledger.unknown(
                delivery,
                now,
                since + self.settings.settle,
                delivery.last_error or "in doubt",
                since,
            )
            return
        try:
            if delivery.action in POSTS:
                self._reconcile_post(delivery, now)
            else:
                self._reconcile_upload(delivery, now)
        except LookupError as error:  # what it belongs to is gone from the store
            self.ledger.failed(delivery, now, str(error))
        except STORE_ERRORS:
            raise
        except Exception as caught:  # the boundary, as in _send
            failure = caught if isinstance(caught, TransportError) else unexpected(caught)
            if failure.kind == "permanent":
                # No scan will ever complete (the token is refused, the channel is gone):
                # waiting in UNKNOWN would be the quiet queue nobody sees.
                cause = f"its outcome cannot be checked: {failure.message}"
                self._after_error(delivery, TransportError(cause, "permanent"))
                return
            # The scan could not complete: still unknown, look again later.
            self.ledger.unknown(
                delivery,
                now,
                now + backoff(delivery.attempts, self.settings.max_backoff),
                f"reconciliation incomplete: {failure.message}",
                since,
            )

    def _reconcile_post(self, delivery: Delivery, now: datetime) -> None:
        thread_ts = None
        channel = delivery.channel
        if delivery.action in ("post_reply", "post_detail"):
            root = self._root(delivery)
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

    def _reconcile_upload(self, delivery: Delivery, now: datetime) -> None:
        if delivery.slack_file_id is None:
            # Never reached the point of sharing: start again.
            self.ledger.retry_at(delivery, now, now, "upload never completed")
            return
        root = self._root(delivery)
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
        if not self._may_send(delivery, "files.completeUploadExternal"):
            return
        try:
            self.transport.complete_upload(
                delivery.slack_file_id, self._csv(delivery)[1], root.channel, str(root.slack_ts)
            )
        except TransportError as error:
            self._after_error(delivery, error)
            return
        self.ledger.sent(delivery, self.clock())

    # --- content -------------------------------------------------------------------------

    def _csv(self, delivery: Delivery) -> tuple[bytes, str]:
        assert delivery.incident_id is not None
        return self.views.csv_file(
            delivery.incident_id, self.settings.csv_max_rows, self.settings.csv_max_bytes
        )

    def _root(self, delivery: Delivery) -> Delivery:
        if delivery.root_id is None:
            raise LookupError(f"delivery #{delivery.id} has no root message")
        return self.ledger.get(delivery.root_id)

    def _root_content(self, root: Delivery, now: datetime) -> Message:
        if root.action == "post_summary":
            payload = root.payload
            groups = {
                group: [self.views.incident(int(i)) for i in payload.get(group, [])]
                for group, _ in SUMMARY_GROUPS
            }
            return summary_message(str(payload.get("day")), groups, now)
        if root.action == "post_digest":
            ids = [int(i) for i in root.payload.get("incidents", [])]
            return digest_message([self.views.incident(i) for i in ids], now)
        assert root.incident_id is not None
        return root_message(self.views.incident(root.incident_id), now)

    def _reply_content(self, delivery: Delivery, now: datetime, in_digest: bool) -> Message:
        assert delivery.incident_id is not None
        view = self.views.incident(delivery.incident_id)
        kind = str(delivery.payload.get("kind"))
        if delivery.action == "post_detail":
            return root_message(view, now)
        if kind == "reminder":
            message = reminder_message(view, now)
        elif kind == CHANGED:
            message = changes_message(delivery.payload, view)
        else:
            message = reply_message(kind, delivery.payload, view)
        if not in_digest:
            return message
        # A digest thread holds several incidents: say which one this is about.
        return with_subject(message, f"*{escape(view.invariant)}* (incident #{view.incident_id})")
