"""From the events outbox to the delivery ledger, and from the ledger to Slack.

Planning marks each event dispatched in the same transaction that creates its deliveries,
so an event is planned once even when two daemons share a PostgreSQL state store.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta

from alerts import bursts
from alerts.console import ConsoleTransport
from alerts.content import Describe, Views
from alerts.ledger import Ledger
from alerts.muting import Mutes
from alerts.planned import PlannedDeliveries, RecentOpenings
from alerts.plans import (
    CHURN,
    OPENING,
    Spec,
    delivery_key,
    plan_event,
    reminder_spec,
    summary_spec,
)
from alerts.roots import Roots
from alerts.routing import Route, route
from alerts.slack import SlackTransport
from alerts.thread_batching import Hold, Merge, decide, first, merged
from alerts.transport import Transport
from alerts.worker import DeliveryWorker, WorkerSettings
from monitor.clock import stamp, utc_now
from monitor.config import SlackConfig
from monitor.store.acks import Action, Outcome, is_quiet
from monitor.store.context import IncidentContext
from monitor.store.records import Incident, StoredEvent
from monitor.store.state import StateStore
from monitor.store.storage import Tx

log = logging.getLogger("invmon.alerts")
DAY = timedelta(days=1)
PRUNE_BATCH = 500  # deliveries removed per transaction


def summary_group(incident: Incident, now: datetime) -> str:
    if incident.resolved_at is not None:
        # Retired (its file removed while open) is its own group: never counted resolved.
        return "retired" if incident.state == "retired" else "resolved"
    if incident.snoozed_until is not None and incident.snoozed_until > now:
        return "snoozed"
    return "acked" if incident.acked_by else "open"


def record_action(
    store: StateStore,
    config: SlackConfig,
    incident_id: int,
    action: Action,
    source: str,
    clock: Callable[[], datetime] = utc_now,
) -> Outcome:
    """An ack, unack or snooze from outside the daemon (`invmon ack`): recorded with its
    message update queued in the ledger, which the running daemon then delivers."""
    alerter = Alerter(store, config, lambda _: None, clock, ConsoleTransport())
    return alerter.act(incident_id, action, source)


def transport_for(config: SlackConfig) -> Transport:
    if config.token:
        return SlackTransport(config.token, config.api_url, config.timeout.total_seconds())
    return ConsoleTransport()


class Alerter:
    def __init__(
        self,
        store: StateStore,
        config: SlackConfig,
        describe: Describe,
        clock: Callable[[], datetime],
        transport: Transport | None = None,
        owner: str | None = None,
        several_targets: bool = False,
    ) -> None:
        """`several_targets`: more than one monitored database is configured, so every
        message names the one it is about."""
        self.store = store
        self.config = config
        self.describe = describe
        self.clock = clock
        self.ledger = Ledger(store.storage)
        self.roots = Roots(store.storage)
        self.planned = PlannedDeliveries(self.roots)
        self.mutes = Mutes(store, self.roots, self.planned, self.channel)
        self.transport = transport or transport_for(config)
        self.worker = DeliveryWorker(
            self.ledger,
            self.transport,
            Views(
                store,
                describe,
                clock,
                buttons=tuple(config.ack_modes) if config.interactive else (),
                several_targets=several_targets,
            ),
            clock,
            WorkerSettings(
                config.lease,
                config.settle,
                config.csv_max_rows,
                config.max_backoff,
                config.csv_max_bytes,
            ),
            owner,
        )

    def route(self, incident: Incident | None, invariant: str) -> Route:
        """Where an incident's root goes, and why: routed by its file as it was when the
        incident opened (kept with it), else by the file as it is now, else the default."""
        context = incident.context if incident is not None else None
        if context is None:
            header = self.describe(invariant)
            if header is None:
                return Route(self.config.channel, "slack.channel")
            context = IncidentContext.of(header)
        return route(self.config, context)

    def channel(self, incident: Incident | None, invariant: str) -> str:
        return self.route(incident, invariant).channel

    def channels(self, tx: Tx, event: StoredEvent, incident: Incident | None) -> list[str]:
        """An opening goes where its incident routes; everything after it goes to the
        threads its roots are in, whatever the file says now (it may be gone)."""
        if event.kind not in OPENING:
            roots = self.roots.channels(tx, event.incident_id)
            if roots:
                return roots
        return [self.channel(incident, event.invariant)]

    def hold(self, events: Sequence[StoredEvent], running: Collection[str] = ()) -> bursts.Decision:
        """Which pending events to plan now and until when the others wait at the latest,
        decided per channel (alerts/bursts.py). `running`: the invariants with a run due or
        in flight on this daemon, whose openings may be about to join a burst."""
        if not events:
            return bursts.Decision((), None)
        now = self.clock()
        incidents = self.store.incidents_by_id({e.incident_id for e in events})
        by_channel: dict[str, list[StoredEvent]] = defaultdict(list)
        for event in events:
            by_channel[self.channel(incidents.get(event.incident_id), event.invariant)].append(
                event
            )
        busy = {self.channel(None, name) for name in running}
        recent: dict[str, RecentOpenings] = {}
        if any(e.kind in OPENING for e in events):
            interval = self.config.digest_group_interval
            with self.store.storage.transaction() as tx:
                recent = self.planned.recent_openings(
                    tx, now - max(self.config.digest_window, interval)
                )
        rule = bursts.Rule(self.config.digest_window, self.config.digest_threshold)
        joinable = now - self.config.digest_group_interval
        go: list[StoredEvent] = []
        until: datetime | None = None
        for channel, group in by_channel.items():
            seen = recent.get(channel, RecentOpenings(None, None))
            known = bursts.Channel(
                group,
                running=channel in busy,
                last_opening=seen.opening,
                digest_open=seen.digest is not None and seen.digest >= joinable,
            )
            decision = bursts.decide(known, now, rule)
            go.extend(decision.go)
            if decision.held_until is not None:
                until = decision.held_until if until is None else min(until, decision.held_until)
        return bursts.Decision(tuple(sorted(go, key=lambda e: e.id)), until)

    def plan(self, events: Sequence[StoredEvent]) -> list[StoredEvent]:
        """Turn these pending events into deliveries now (`hold` chooses which may go);
        return the events this call planned (another daemon may have planned some)."""
        if not events:
            return []
        now = self.clock()
        incidents = self.store.incidents_by_id({e.incident_id for e in events})
        quiet = {
            e.id for e in events if e.kind in ("keys_appeared", "keys_gone") and self._quiet(e, now)
        }
        with self.store.storage.transaction() as tx:
            # Claim first, then group: only the events this call planned are grouped, and a
            # digest that another daemon planned while these claims waited on it is seen.
            planned = [e for e in events if self.store.claim_event(tx, e.id, now)]
            muted = self.mutes.silencing(tx, planned, incidents, now)
            openings: dict[str, list[StoredEvent]] = defaultdict(list)
            for event in planned:
                if event.kind in OPENING and event.id not in muted:
                    incident = incidents.get(event.incident_id)
                    openings[self.channel(incident, event.invariant)].append(event)
            digested: set[int] = set()
            for channel, group in openings.items():
                if self._group(tx, channel, group, now):
                    digested.update(e.id for e in group)
            for event in planned:
                posted = bool(self.roots.channels(tx, event.incident_id))
                for channel in self.channels(tx, event, incidents.get(event.incident_id)):
                    specs = plan_event(event, channel)
                    if event.id in muted:
                        specs = self.mutes.still_said(specs, posted)
                    elif event.id in quiet:
                        # Acknowledged or snoozed: the root still shows the new count, but
                        # the thread gets no notice (a cleared "until new rows" ack is not
                        # quiet).
                        specs = [s for s in specs if s.action != "post_reply"]
                    elif event.kind in CHURN:
                        specs = [
                            s
                            for s in (self._churn_reply(tx, event, channel, s, now) for s in specs)
                            if s is not None
                        ]
                    if event.id in digested:
                        specs = [
                            Spec("post_detail", s.key, True, s.payload)
                            if s.action == "post_root"
                            else s
                            for s in specs
                        ]
                    self.planned.enqueue(
                        tx, event, event.invariant, event.incident_id, channel, specs, now
                    )
        return planned

    def _group(self, tx: Tx, channel: str, group: Sequence[StoredEvent], now: datetime) -> bool:
        """Openings in one channel: they join the channel's recent digest, or become one
        when there are enough of them. True when their roots are a digest's thread."""
        recent = self.planned.recent_digest(tx, channel, now - self.config.digest_group_interval)
        if recent is not None:
            self._join(tx, recent, channel, group, now)
            return True
        if len(group) >= self.config.digest_threshold:
            self._digest(tx, channel, group, now)
            return True
        return False

    def _digest(self, tx: Tx, channel: str, group: Sequence[StoredEvent], now: datetime) -> None:
        incidents = sorted({e.incident_id for e in group})
        key = delivery_key("digest", channel, *sorted(e.id for e in group))
        spec = Spec("post_digest", key, False, {"kind": "digest", "incidents": incidents})
        created = self.planned.enqueue(tx, None, "(digest)", incidents[0], channel, [spec], now)
        for incident_id in incidents if created else []:
            self.roots.link(tx, incident_id, channel, created[0])

    def _join(
        self, tx: Tx, digest_id: int, channel: str, group: Sequence[StoredEvent], now: datetime
    ) -> None:
        """Late openings of a burst join its digest: listed in it (edited in place, or
        posted listing them if it has not gone out yet), their messages in its thread."""
        joining = sorted({e.incident_id for e in group})
        self.planned.join_digest(tx, digest_id, channel, joining)
        # An update of the digest, queued on the first joiner's root (now the digest): it
        # re-renders the digest from its payload at send time. Keyed by the events that
        # joined, so planning them again (it cannot: they are claimed) adds nothing.
        key = delivery_key("digest-join", channel, digest_id, *sorted(e.id for e in group))
        payload = {"kind": "digest_joined", "incidents": joining}
        spec = Spec("update_root", key, True, payload)
        self.planned.enqueue(tx, None, "(digest)", joining[0], channel, [spec], now)

    def _churn_reply(
        self, tx: Tx, event: StoredEvent, channel: str, spec: Spec, now: datetime
    ) -> Spec | None:
        """At most one reply per incident per `thread_update_interval` about rows that
        appear and go (see alerts/thread_batching.py): a reply now, a reply held until the
        interval has passed, or nothing when the change was merged into a reply not sent
        yet. Other deliveries (the root's update: the live count) pass unchanged."""
        if spec.action != "post_reply":
            return spec
        last = self.planned.last_churn_reply(tx, event.incident_id, channel)
        decision = decide(last, now, self.config.thread_update_interval)
        if isinstance(decision, Merge):
            if self.planned.merge_pending(
                tx, decision.delivery_id, lambda p: merged(p, event), now
            ):
                return None
            # Taken by a worker meanwhile: it is sent, or as good as; wait an interval.
            decision = Hold(now + self.config.thread_update_interval)
        if isinstance(decision, Hold):
            return Spec(spec.action, spec.key, True, first(event, held=True), decision.until)
        return Spec(spec.action, spec.key, True, first(event, held=False))

    def _quiet(self, event: StoredEvent, now: datetime) -> bool:
        incident = self.store.incident(event.incident_id)
        return incident is not None and is_quiet(incident, now)

    def count_moved(self, incident_id: int, invariant: str, seen_at: str) -> None:
        """Queue the root's update after a run whose count moved with nothing else to say:
        no row known to come or go (a key shared by several rows, a file without `key:` past
        its sample, rows past daemon.track_keys, keys made again after an edit). The root
        shows the live count and rows; the thread says nothing. No event: one for each such
        run filled the pages' event lists, and a daemon of the previous release reads the
        events and knows no new kind. `seen_at` (the run's stamp) keys the update."""
        now = self.clock()
        with self.store.storage.transaction() as tx:
            for channel in self.roots.channels(tx, incident_id):
                key = delivery_key(incident_id, "count", seen_at, channel)
                spec = Spec("update_root", key, True, {"kind": "count"})
                self.planned.enqueue(tx, None, invariant, incident_id, channel, [spec], now)

    def after_action(self, tx: Tx, incident: Incident, action_id: int) -> None:
        """Queue the root message's update after an ack, unack or snooze (same transaction);
        after a snooze, another for when it ends, which nothing else would show."""
        now = self.clock()
        acted = self.store.incident_in(tx, incident.id) or incident
        # A snooze just given (not an ack or unack during one: its end is planned already).
        ends = acted.snoozed_until if acted.snoozed_until != incident.snoozed_until else None
        for channel in self.roots.channels(tx, incident.id):
            payload = {"kind": "action", "action_id": action_id}
            specs = [
                Spec(
                    "update_root",
                    delivery_key(incident.id, "action", action_id, channel),
                    True,
                    payload,
                )
            ]
            if ends is not None and ends > now:
                # Keyed by its end: one update however often the same end is planned.
                key = delivery_key(incident.id, "snooze ends", stamp(ends), channel)
                specs.append(Spec("update_root", key, True, payload, not_before=ends))
            self.planned.enqueue(tx, None, incident.invariant, incident.id, channel, specs, now)

    def act(self, incident_id: int, action: Action, source: str) -> Outcome:
        """Record an ack/unack/snooze and queue the message update, atomically."""
        return self.store.apply_action(
            incident_id,
            action,
            self.clock(),
            source,
            then=self.after_action,
        )

    def remind(self) -> int:
        """Queue a reminder in the thread of each open violation every repeat_interval."""
        now = self.clock()
        every = self.config.repeat_interval.total_seconds()
        queued = 0
        for incident in self.store.open_incidents():
            if incident.kind != "violation" or is_quiet(incident, now):
                continue
            with self.store.storage.transaction() as tx:
                if self.mutes.muted(tx, incident, now) is not None:
                    continue
            nth = int((now - incident.opened_at).total_seconds() // every)
            if nth < 1:
                continue
            with self.store.storage.transaction() as tx:
                channels = self.roots.channels(tx, incident.id)
            for channel in channels:
                root = self.roots.root_of(incident.id, channel)
                if root is None or root.state != "SENT":
                    continue
                spec = reminder_spec(incident.invariant, incident.id, channel, nth)
                with self.store.storage.transaction() as tx:
                    queued += len(
                        self.planned.enqueue(
                            tx, None, incident.invariant, incident.id, channel, [spec], now
                        )
                    )
        return queued

    def summarise(self, now: datetime) -> int:
        """Queue each channel's daily summary: what is open, acknowledged, snoozed, and
        what resolved or was retired in the last day. Once per channel and day, whoever
        calls it."""
        incidents = self.store.open_incidents() + self.store.closed_since(now - DAY)
        by_channel: dict[str, dict[str, list[int]]] = defaultdict(
            lambda: {"open": [], "acked": [], "snoozed": [], "resolved": [], "retired": []}
        )
        queued = 0
        with self.store.storage.transaction() as tx:
            for incident in incidents:
                group = summary_group(incident, now)
                for channel in self.roots.channels(tx, incident.id):
                    by_channel[channel][group].append(incident.id)
            for channel, groups in sorted(by_channel.items()):
                spec = summary_spec(channel, now.date().isoformat(), groups)
                queued += len(
                    self.planned.enqueue(tx, None, "(summary)", None, channel, [spec], now)
                )
        return queued

    def prune(self, before: datetime, go_on: Callable[[], bool] = lambda: True) -> int:
        """Remove the finished deliveries nothing needs any more (alerts/ledger.py says
        which), finished before `before` and at least a day ago whatever the retention (a
        daily summary's key is its day), with the alert_roots rows of the threads they
        rooted; in batches, each its own transaction, until `go_on` says to stop (a daemon
        stopping). Then the SENT count is made again from the rows (Ledger.recount_sent).
        Returns how many went."""
        cutoff = min(before, self.clock() - DAY)
        removed = 0
        after: int | None = 0
        while after is not None:
            if not go_on():
                return removed
            with self.store.storage.transaction() as tx:
                doomed, after = self.ledger.prunable(tx, cutoff, after, PRUNE_BATCH)
                self.roots.forget(tx, [i for i, _ in doomed])
                self.ledger.delete(tx, doomed)
            removed += len(doomed)
        self.ledger.recount_sent()
        return removed

    def deliver(self) -> int:
        self.mutes.release(self.clock())
        return self.worker.run_due()
