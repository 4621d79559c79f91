"""The delivery worker: claims due rows from the ledger and performs them through a
Transport, reconciling with Slack (alerts/reconcile.py) before anything whose fate is unknown
is tried again.

It renders every message at send time from the state store (alerts/content.py), so a
retried update always shows the latest state and a late one never overwrites a newer one
with old figures.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from alerts.content import Content, Views
from alerts.deliveries import Delivery
from alerts.ledger import POST_ACTIONS, Ledger
from alerts.reconcile import Reconciler
from alerts.retrying import backoff, unexpected
from alerts.transport import Transport, TransportError
from monitor.store.store_health import STORE_ERRORS

log = logging.getLogger("invmon.alerts")


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


class DeliveryWorker:
    """Claims due rows under a lease and performs them; a row whose outcome is UNKNOWN
    goes to its `Reconciler` first."""

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
        self.content = Content(views, self.settings.csv_max_rows, self.settings.csv_max_bytes)
        self.reconciler = Reconciler(
            ledger,
            transport,
            self.content,
            self,
            clock,
            self.settings.settle,
            self.settings.max_backoff,
        )

    def count_failure(self) -> None:
        """One more permanent failure for `invmon_delivery_failures` (a delivery that
        failed for good, or a check that found the delivery path broken)."""
        with self._counting:
            self.failures += 1

    def run_due(self, limit: int = 50) -> int:
        """Perform up to `limit` due deliveries; return how many were handled."""
        handled = 0
        while handled < limit:
            # Each claim holds the row under a name of its own: the alerts loop and the
            # watchdog's turn deliver through this one worker, and a lease re-check that
            # compared only the worker's name let one of them send on the other's claim.
            holder = f"{self.owner}/{uuid.uuid4().hex[:8]}"
            claimed = self.ledger.claim(holder, self.clock(), self.settings.lease)
            if claimed is None:
                break
            delivery, previous_state = claimed
            with self._holding(delivery):
                if previous_state == "UNKNOWN":
                    self.reconciler.reconcile(delivery)
                else:
                    self.send(delivery)
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
                try:
                    if not self.ledger.renew(delivery, self.clock() + lease):
                        return  # taken over: the re-check before each send refuses
                except STORE_ERRORS as exc:
                    # One failed renewal must not end the renewals: the next may work, and
                    # if none does, the lease lapses and the re-check before a send refuses.
                    log.warning("could not renew the lease of delivery %s: %s", delivery.id, exc)
                except Exception:
                    log.exception("the lease of delivery %s is renewed no more", delivery.id)
                    return

        keeper = threading.Thread(target=renew, name="invmon-lease", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            done.set()
            # It can only be inside one renewal, a store call the store's own timeouts bound;
            # past a lease, it is left (a daemon thread) and said.
            keeper.join(lease.total_seconds())
            if keeper.is_alive():
                log.warning(
                    "the lease keeper of delivery %s did not end within %ss: still in a "
                    "renewal; leaving it",
                    delivery.id,
                    lease.total_seconds(),
                )

    # --- sending -------------------------------------------------------------------------

    def send(self, delivery: Delivery) -> None:
        """Perform a claimed row and record what came of it."""
        try:
            self._perform(delivery)
        except TransportError as error:
            self.after_error(delivery, error)
        except LookupError as error:
            self.ledger.failed(delivery, self.clock(), str(error))
        except STORE_ERRORS:
            raise  # the store's own trouble: StoreHealth says it, and the row stays claimed
        except Exception as error:
            # The boundary: a transport that raised something other than TransportError, or
            # a message that cannot be built. Nothing can say the call was sent (the Slack
            # transport classifies everything it sends), and sending it again would meet
            # the same error: it fails for good, said once, not as a traceback every turn.
            self.after_error(delivery, unexpected(error))

    def _perform(self, delivery: Delivery) -> None:
        now = self.clock()
        action = delivery.action
        if action in ("post_root", "post_digest", "post_summary"):
            message = self.content.root(delivery, now)
            if not self.may_send(delivery, "chat.postMessage"):
                return
            posted = self.transport.post(
                delivery.channel, message.text, message.blocks, delivery.idem_key
            )
            self.ledger.sent(delivery, self.clock(), posted.channel, posted.ts)
            return
        root = self.ledger.thread_root(delivery)
        if action == "update_root":
            if root.action == "post_digest" and delivery.incident_id is not None:
                # In a digest, the incident's own message (with its buttons) is the detail
                # post in the thread; it is what changes, and the digest's summary too.
                detail = self.ledger.detail_of(delivery.incident_id, root.id)
                if detail is not None and detail.slack_ts:
                    own = self.content.detail(delivery.incident_id, now)
                    self.transport.update(root.channel, detail.slack_ts, own.text, own.blocks)
            message = self.content.root(root, now)
            self.transport.update(root.channel, str(root.slack_ts), message.text, message.blocks)
            self.ledger.sent(delivery, self.clock())
        elif action in ("post_reply", "post_detail"):
            if self.content.silenced(delivery, now):
                # Finished with nothing to post: SENT, with no message of its own.
                log.info(
                    "not posted: the incident was acknowledged or snoozed since this was planned",
                    extra={"fields": {"delivery": delivery.id, "invariant": delivery.invariant}},
                )
                self.ledger.sent(delivery, self.clock())
                return
            message = self.content.reply(delivery, now, in_digest=root.action == "post_digest")
            if not self.may_send(delivery, "chat.postMessage"):
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

    def may_send(self, delivery: Delivery, call: str) -> bool:
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
        data, title = self.content.csv(delivery)
        # Files carry no metadata, so the upload is recognised by its file id: stored before
        # the upload is completed (shared), and looked up with files.info when in doubt.
        file_id = self.transport.start_upload(f"{delivery.invariant.replace('/', '_')}.csv", data)
        self.ledger.record_file(delivery, file_id)
        # An upload not completed is invisible to users: only the completion must be fenced.
        if not self.may_send(delivery, "files.completeUploadExternal"):
            return
        self.transport.complete_upload(file_id, title, root.channel, str(root.slack_ts))
        self.ledger.sent(delivery, self.clock())

    def after_error(self, delivery: Delivery, error: TransportError) -> None:
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
