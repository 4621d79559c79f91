"""What a delivery shows, read when it is sent: the incident as the state store has it now
(`Views`), and from that the delivery's message or CSV file (`Content`), so a retried update
shows the latest state. Not pure: reads the state store; the messages themselves are built
by alerts/messages.py (pure).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from alerts.csvfile import csv_title, left_out_because, offending_csv
from alerts.deliveries import Delivery
from alerts.messages import (
    SUMMARY_GROUPS,
    IncidentView,
    Message,
    digest_message,
    escape,
    mute_ended_message,
    reminder_message,
    reply_message,
    root_message,
    summary_message,
    with_subject,
)
from alerts.plans import CHURN
from alerts.thread_batching import CHANGED, changes_message
from monitor.clock import Clock
from monitor.invariants.header import InvariantHeader
from monitor.links import safe_link
from monitor.store.acks import ack_line, is_quiet
from monitor.store.context import IncidentContext
from monitor.store.incidents import event_kind
from monitor.store.records import Incident
from monitor.store.state import StateStore

Describe = Callable[[str], InvariantHeader | None]


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
        columns, open_rows = self._offending_rows(incident)
        return IncidentView(
            incident_id=incident_id,
            invariant=incident.invariant,
            kind=incident.kind,
            severity=context.severity,
            description=context.description,
            owner=context.owner,
            runbook=safe_link(context.runbook),
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

    def _offending_rows(self, incident: Incident) -> tuple[list[str], list[dict[str, Any]]]:
        """(columns, rows) the root shows: of an open violation, the sample of its latest
        run that found rows, exactly as the database returned it then; a tracked key's
        stored row is as the last run that fetched it whole saw it, which may be long ago
        for a key that has since left the sample. Without such a run (pruned, or an
        incident of another kind), the open keys' rows."""
        if incident.kind == "violation" and incident.resolved_at is None:
            latest = self.store.last_violated_run(incident.invariant, incident.opened_at)
            if latest is not None:
                return list(latest.columns), list(latest.sample)
        keys = self.store.incident_keys(incident.id)
        rows = [k.row for k in keys if k.gone_at is None and k.row]
        return (list(rows[0]) if rows else []), rows

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


# The thread replies an acknowledgement or a snooze silences (docs/slack.md): reminders and
# the notices of rows that come and go. Judged again when one is sent, not only when it was
# planned: a notice held back by thread_update_interval, or a reminder waiting to be retried
# while Slack was down, went out after the ack, one saying "Nobody has acknowledged it yet".
QUIETED = frozenset({*CHURN, CHANGED, "reminder"})


class Content:
    """A delivery's message or file, built from what `Views` reads at send time."""

    def __init__(self, views: Views, csv_max_rows: int, csv_max_bytes: int) -> None:
        self.views = views
        self.csv_max_rows = csv_max_rows
        self.csv_max_bytes = csv_max_bytes

    def csv(self, delivery: Delivery) -> tuple[bytes, str]:
        """An upload's file and its title."""
        assert delivery.incident_id is not None
        return self.views.csv_file(delivery.incident_id, self.csv_max_rows, self.csv_max_bytes)

    def root(self, root: Delivery, now: datetime) -> Message:
        """What a top-level message shows: its incident, a digest or a day's summary."""
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

    def detail(self, incident_id: int, now: datetime) -> Message:
        """The incident's own message (with its buttons), as its detail post in a digest's
        thread shows it."""
        return root_message(self.views.incident(incident_id), now)

    def silenced(self, delivery: Delivery, now: datetime) -> bool:
        """A thread reply its incident's acknowledgement or snooze now silences (QUIETED)."""
        if delivery.action != "post_reply" or delivery.payload.get("kind") not in QUIETED:
            return False
        assert delivery.incident_id is not None
        incident = self.views.store.incident(delivery.incident_id)
        return incident is not None and is_quiet(incident, now)

    def reply(self, delivery: Delivery, now: datetime, in_digest: bool) -> Message:
        """A message in a thread; in a digest's thread it names the incident it is about."""
        assert delivery.incident_id is not None
        view = self.views.incident(delivery.incident_id)
        kind = str(delivery.payload.get("kind"))
        if delivery.action == "post_detail":
            return root_message(view, now)
        if kind == "reminder":
            message = reminder_message(view, now)
        elif kind == "mute_ended":
            message = mute_ended_message(delivery.payload, view)
        elif kind == CHANGED:
            message = changes_message(delivery.payload, view)
        else:
            message = reply_message(event_kind(kind), delivery.payload, view)
        if not in_digest:
            return message
        # A digest thread holds several incidents: say which one this is about.
        return with_subject(message, f"*{escape(view.invariant)}* (incident #{view.incident_id})")
