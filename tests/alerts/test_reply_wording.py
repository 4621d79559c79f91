"""Each surface words every event kind from one table keyed by kind: Slack's thread reply
for each kind that follows an opening, the status page for every kind. A kind added to the
incident rules without wording fails here, not in front of the on-call."""

from __future__ import annotations

from alerts.messages import IncidentView, reply_message, reply_wording
from monitor.store.incidents import EVENT_KINDS, FOLLOWING_EVENTS, OPENING_EVENTS
from monitor.web.detail_views import event_wording

VIEW = IncidentView(3, "orders/paid_twice", "quarantined")


def test_slack_words_every_event_that_follows_an_opening_and_only_those() -> None:
    assert set(reply_wording({}, VIEW)) == set(FOLLOWING_EVENTS)
    assert set(EVENT_KINDS) == FOLLOWING_EVENTS | OPENING_EVENTS
    for kind in sorted(FOLLOWING_EVENTS):
        text = reply_message(kind, {"lasted_seconds": 60}, VIEW).text
        assert kind not in text, (kind, text)  # a sentence, never the bare word


def test_a_lifted_quarantine_says_so_in_its_thread() -> None:
    payload = {"lasted_seconds": 7200, "reason": "its file changed"}
    assert reply_message("unquarantined", payload, VIEW).text == (
        "✅ Out of quarantine after 2h: its file changed; it is scheduled again."
    )


def test_the_page_words_every_event_kind() -> None:
    assert set(event_wording({})) == set(EVENT_KINDS)
    for kind, (icon, text) in event_wording({"lasted_seconds": 60}).items():
        assert icon and text and text != kind, kind
