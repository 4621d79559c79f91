"""Alerting's side of mutes (the rule is monitor/store/mutes.py).

While a mute covers an incident, its events are planned like any other (claimed once, in
the planning transaction) but nothing that notifies is queued: no root, CSV, thread reply
or reminder. A root already posted is still edited in place, silently, so it never shows a
state the database no longer holds. The incident is recorded as held by the mute.

When the mute ends, one daemon claims its release (a conditional update) and, in the same
transaction, queues what each held incident that is still open needs, once: its opening
(the same delivery keys as if it had been planned then, so it cannot post twice), or, when
its root was posted before the mute, one reply saying the mute ended and how it stands.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from alerts.planned import PlannedDeliveries
from alerts.plans import Spec, delivery_key, plan_event
from alerts.roots import Roots
from monitor.store.mute_table import MuteTable
from monitor.store.mutes import Mute, muting
from monitor.store.records import Incident, StoredEvent
from monitor.store.state import StateStore
from monitor.store.storage import Tx

log = logging.getLogger("invmon.alerts")

# What a muted event still queues for an incident whose root is posted: a silent edit.
SILENT = frozenset({"update_root"})


class Mutes:
    def __init__(
        self,
        store: StateStore,
        roots: Roots,
        planned: PlannedDeliveries,
        channel: Callable[[Incident | None, str], str],
    ) -> None:
        self.store = store
        self.table = MuteTable(store.storage)
        self.roots = roots
        self.planned = planned
        self.channel = channel  # where an incident's opening goes (Alerter.channel)

    def silencing(
        self,
        tx: Tx,
        events: Sequence[StoredEvent],
        incidents: Mapping[int, Incident | None],
        now: datetime,
    ) -> set[int]:
        """The events (ids) a mute kept quiet when they were created (an event planned a
        turn after its mute ended is still one it covered); their incidents are held by it
        until it is released."""
        if not events:
            return set()
        mutes = self.table.unreleased_since(tx, min(e.created_at for e in events))
        quiet: set[int] = set()
        for event in events if mutes else ():
            incident = incidents.get(event.incident_id)
            target = incident.target if incident is not None else ""
            found = muting(mutes, event.invariant, target, event.created_at)
            if found is not None:
                self.table.hold(tx, found.id, event.incident_id)
                quiet.add(event.id)
        return quiet

    def muted(self, tx: Tx, incident: Incident, now: datetime) -> Mute | None:
        return muting(self.table.current(tx, now), incident.invariant, incident.target, now)

    @staticmethod
    def still_said(specs: Sequence[Spec], has_root: bool) -> list[Spec]:
        """What a muted event still queues: a silent edit of a root already posted."""
        return [s for s in specs if s.action in SILENT] if has_root else []

    def release(self, now: datetime) -> int:
        """Queue, once, what the mutes that ended hold that is still open; the number of
        deliveries queued."""
        with self.store.storage.transaction() as tx:
            ended = self.table.ended_unreleased(tx, now)
        queued = 0
        for mute in ended:
            queued += self._release(mute, now)
        return queued

    def _release(self, mute: Mute, now: datetime) -> int:
        queued = 0
        with self.store.storage.transaction() as tx:
            held = self.table.release(tx, mute.id, now)
            if held is None:
                return 0  # another daemon released it
            active = self.table.current(tx, now)
            for incident_id in held:
                incident = self.store.incident_in(tx, incident_id)
                if incident is None or incident.resolved_at is not None:
                    continue  # opened and closed while muted: recorded, shown, not posted
                still = muting(active, incident.invariant, incident.target, now)
                if still is not None:
                    self.table.hold(tx, still.id, incident_id)  # another mute goes on
                    continue
                queued += self._announce(tx, incident, mute, now)
        log.info(
            "mute ended",
            extra={"fields": {"mute": mute.id, "covers": mute.what, "deliveries": queued}},
        )
        return queued

    def _announce(self, tx: Tx, incident: Incident, mute: Mute, now: datetime) -> int:
        channels = self.roots.channels(tx, incident.id)
        if not channels:
            opening = self.store.opening_event_in(tx, incident.id)
            channel = self.channel(incident, incident.invariant)
            if opening is not None:
                specs = plan_event(opening, channel)
                return len(
                    self.planned.enqueue(
                        tx, opening, incident.invariant, incident.id, channel, specs, now
                    )
                )
            channels = [channel]  # its opening was pruned: a root is announced late
        queued = 0
        for channel in channels:
            base = (incident.invariant, incident.id, "mute-ended", mute.id, channel)
            payload = {"kind": "mute_ended", "mute": mute.id, "reason": mute.reason}
            specs = [
                Spec("post_reply", delivery_key(*base, "reply"), True, payload),
                Spec("update_root", delivery_key(*base, "update"), True, payload),
            ]
            queued += len(
                self.planned.enqueue(tx, None, incident.invariant, incident.id, channel, specs, now)
            )
        return queued
