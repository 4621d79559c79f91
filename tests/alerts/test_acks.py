"""Acknowledge, snooze and unacknowledge from Slack buttons (a signed HTTP endpoint and
Socket Mode) and from the command line: recorded once, shown in place, reminders stop."""

from __future__ import annotations

import dataclasses
import getpass
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import timedelta

import pytest
from builders import config_file, signed_click, slack_signature
from fake_slack import APP_TOKEN, FakeSlack
from fake_socket_mode import FakeSocketMode
from helpers import invmon, sql, wait_for
from scenario import World, script, settle

from alerts.interactions import NOT_RECORDED, Interactions, parse_clicks
from monitor.daemon.daemon import Daemon
from monitor.daemon.http import Listener
from monitor.store.acks import Action, decide_action
from monitor.store.records import Incident

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


def click_payload(
    action_id: str, incident: int, user: str = "U_ALICE", name: str = "alice"
) -> dict[str, object]:
    return {
        "type": "block_actions",
        "user": {"id": user, "username": name},
        "channel": {"id": "C0INVARIANTS"},
        "actions": [{"action_id": action_id, "value": str(incident)}],
    }


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(f"{url}/slack/actions", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


class Setup:
    def __init__(self, world: World, fake: FakeSlack, **slack: object) -> None:
        self.world = world
        self.fake = fake
        self.daemon = world.daemon(fake, targets=None, signing_secret=SECRET, **slack)
        self.listener = Listener("127.0.0.1:0", self.daemon.probes.routes())
        self.listener.start()
        self.url = f"http://{self.listener.address}"

    def open_incident(self) -> int:
        script(self.world, self.daemon, 0)
        settle(self.daemon, self.world.clock, "opened")
        [incident] = self.world.store.open_incidents()
        return incident.id

    def incident(self, incident_id: int) -> Incident:
        found = self.world.store.incident(incident_id)
        assert found is not None
        return found

    def root_text(self) -> str:
        [root] = self.fake.roots()
        return json.dumps(root.blocks, ensure_ascii=False)

    def bad(self, *ids: int) -> None:
        """The items that offend now, then a run."""
        marked = ",".join(str(i) for i in ids) or "0"
        sql(self.world.dsn, f"UPDATE items SET bad = id IN ({marked})")
        self.world.clock.advance(60)
        self.daemon.evaluate("bad_items")

    def click(self, action_id: str, incident: int) -> int:
        body, headers = signed_click(click_payload(action_id, incident), SECRET)
        return post(self.url, body, headers)

    def thread(self) -> list[str]:
        [root] = self.fake.roots()
        return [m.text for m in self.fake.thread(root) if not m.files]

    def close(self) -> None:
        self.listener.stop()
        self.daemon.databases.close()


@pytest.fixture
def setup(world: World) -> Iterator[Setup]:
    with FakeSlack(clock=world.clock) as fake:
        made = Setup(world, fake)
        yield made
        made.close()


def test_a_signed_ack_click_acks_once_updates_the_message_and_stops_reminders(
    setup: Setup,
) -> None:
    incident = setup.open_incident()
    assert '"action_id": "invmon_ack_until_resolved"' in setup.root_text()
    body, headers = signed_click(click_payload("invmon_ack_until_resolved", incident), SECRET)
    assert post(setup.url, body, headers) == 200
    acked = setup.incident(incident)
    assert (acked.acked_by, acked.acked_by_name, acked.ack_mode) == (
        "U_ALICE",
        "alice",
        "until_resolved",
    )
    settle(setup.daemon, setup.world.clock, "ack shown")
    text = setup.root_text()
    assert "👀 Acknowledged by @alice at " in text
    assert '"action_id": "invmon_unack"' in text
    assert '"action_id": "invmon_ack_until_resolved"' not in text
    wait_for(lambda: setup.fake.ephemerals, 5, "the ephemeral answer")
    assert setup.fake.ephemerals == [
        ("C0INVARIANTS", "U_ALICE", f"You acknowledged incident #{incident} until resolved.")
    ]
    # Reminders stop; change notices stop; the resolution still posts.
    setup.world.clock.advance(5 * 3600)
    assert setup.daemon.alerter.remind() == 0
    for step in (1, 2):
        script(setup.world, setup.daemon, step)
        settle(setup.daemon, setup.world.clock, f"step {step}")
    [root] = setup.fake.roots()
    replies = [m.text.split(" ")[0] for m in setup.fake.thread(root) if not m.files]
    assert replies == ["✅"]


@pytest.mark.parametrize("click", ["invmon_ack_until_resolved", "invmon_snooze_24h"])
def test_a_change_notice_held_back_before_an_ack_or_snooze_is_never_posted(
    setup: Setup, click: str
) -> None:
    """A notice held back by thread_update_interval was judged quiet or not only when it
    was planned: an ack or snooze meanwhile did not stop it."""
    setup.bad(1, 2)
    settle(setup.daemon, setup.world.clock, "opened")
    [incident] = setup.world.store.open_incidents()
    setup.bad(1, 2, 3)  # the first change: replied at once
    settle(setup.daemon, setup.world.clock, "first change")
    before = setup.thread()
    assert [t.split(" ")[0] for t in before] == ["➕"]
    setup.bad(1, 2, 3, 4)  # within thread_update_interval: held back
    setup.daemon.deliver()
    assert setup.click(click, incident.id) == 200
    setup.world.clock.advance(6 * 60)
    settle(setup.daemon, setup.world.clock, "after the click")
    assert setup.thread() == before
    replies = [d for d in setup.daemon.alerter.ledger.all() if d.action == "post_reply"]
    assert {d.state for d in replies} == {"SENT"}  # the held one finished, unposted
    if click == "invmon_ack_until_resolved":
        # Unacknowledged, the next change is told at once: the silenced reply went nowhere,
        # so it does not count as the thread's latest (at most one per interval).
        assert setup.click("invmon_unack", incident.id) == 200
        setup.bad(1, 2, 3, 4, 5)
        setup.daemon.deliver()  # no clock moved: a held reply would wait its interval
        told = setup.thread()
        assert told[: len(before)] == before
        assert [t.split(" ")[0] for t in told[len(before) :]] == ["➕"], told


def test_a_reminder_waiting_on_slack_before_an_ack_from_the_shell_is_never_posted(
    setup: Setup,
) -> None:
    """Slack down: a queued reminder waited for its retry; the on-call acked from the shell
    (as the manual says to), and the reminder then went out saying "Nobody has
    acknowledged it yet"."""
    setup.bad(1, 2)
    settle(setup.daemon, setup.world.clock, "opened")
    [incident] = setup.world.store.open_incidents()
    setup.world.clock.advance(4 * 3600 + 1)
    for _ in range(3):
        setup.fake.fail_next("chat.postMessage", "error_500")
    assert setup.daemon.alerter.remind() == 1
    setup.daemon.deliver()  # refused: retried later
    home = setup.world.folder.parent
    config = config_file(home, state={"path": home / "state.db"})
    done = invmon("ack", str(incident.id), "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert setup.incident(incident.id).acked_by is not None
    settle(setup.daemon, setup.world.clock, "after the ack")
    assert setup.thread() == []


def test_a_click_is_answered_within_slacks_deadline_while_the_store_is_held(
    setup: Setup,
) -> None:
    """The HTTP endpoint answered only once the click was recorded: a store held by a long
    write (storing a large run) made Slack give up after its 3 s and show the person an
    error, though the ack was then recorded. The answer no longer waits on the store; the
    outcome follows by message."""
    setup.bad(1, 2)
    settle(setup.daemon, setup.world.clock, "opened")
    [incident] = setup.world.store.open_incidents()
    holding, release = threading.Event(), threading.Event()

    def long_write() -> None:
        with setup.world.store.storage.transaction():
            holding.set()
            release.wait(60)

    writer = threading.Thread(target=long_write, daemon=True)
    writer.start()
    assert holding.wait(10)
    body, headers = signed_click(click_payload("invmon_ack_until_resolved", incident.id), SECRET)
    try:
        # Answered while the store is still held: the answer did not wait for it.
        assert post(setup.url, body, headers) == 200
        # A replay is refused at once, though the store's own check cannot answer yet.
        assert post(setup.url, body, headers) == 401
        assert release.is_set() is False
        assert setup.fake.ephemerals == []
    finally:
        release.set()
        writer.join(10)
    wait_for(lambda: setup.incident(incident.id).acked_by == "U_ALICE", 10, "the ack")
    wait_for(lambda: setup.fake.ephemerals, 10, "the answer")
    assert setup.fake.ephemerals == [
        ("C0INVARIANTS", "U_ALICE", f"You acknowledged incident #{incident.id} until resolved.")
    ]


def test_a_click_the_store_cannot_record_is_answered_saying_so(setup: Setup) -> None:
    """Over Socket Mode a click is acked to Slack before it is recorded: a store that failed
    then lost it with nothing said to the person (over HTTP, Slack showed an error). Both
    now answer that it was not recorded."""
    setup.bad(1, 2)
    settle(setup.daemon, setup.world.clock, "opened")
    [incident] = setup.world.store.open_incidents()
    with setup.world.store.storage.transaction() as tx:  # a store that refuses the write
        tx.run(
            "CREATE TRIGGER refuses BEFORE INSERT ON incident_actions"
            " BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
        )
    answers = setup.daemon.interactions.handle(
        click_payload("invmon_ack_until_resolved", incident.id), "slack-socket"
    )
    said = NOT_RECORDED.format(incident=incident.id)
    assert answers == [said]
    wait_for(lambda: setup.fake.ephemerals, 10, "the answer")
    assert setup.fake.ephemerals == [("C0INVARIANTS", "U_ALICE", said)]
    assert setup.incident(incident.id).acked_by is None
    with setup.world.store.storage.transaction() as tx:
        tx.run("DROP TRIGGER refuses")
    assert setup.click("invmon_ack_until_resolved", incident.id) == 200  # clicked again
    assert setup.incident(incident.id).acked_by == "U_ALICE"


@pytest.mark.parametrize(
    ("case", "status"),
    [("bad signature", 401), ("stale timestamp", 401), ("missing headers", 401)],
)
def test_a_forged_or_stale_request_changes_nothing(setup: Setup, case: str, status: int) -> None:
    incident = setup.open_incident()
    payload = click_payload("invmon_ack_until_resolved", incident)
    if case == "bad signature":
        body, headers = signed_click(payload, "not-the-secret")
    elif case == "stale timestamp":
        body, headers = signed_click(payload, SECRET, age=6 * 60)
    else:
        body, headers = signed_click(payload, SECRET)
        headers = {"Content-Type": headers["Content-Type"]}
    assert post(setup.url, body, headers) == status
    assert setup.incident(incident).acked_by is None
    assert setup.fake.ephemerals == []


def test_a_replayed_request_is_refused(setup: Setup) -> None:
    incident = setup.open_incident()
    body, headers = signed_click(click_payload("invmon_snooze_1h", incident), SECRET)
    assert post(setup.url, body, headers) == 200
    assert post(setup.url, body, headers) == 401
    # A restarted daemon remembers it too (the state store keeps seen signatures).
    restarted = Interactions(setup.daemon.alerter, setup.daemon.config.slack)
    assert restarted.http(body, headers) == (401, "replayed request")
    with setup.world.store.storage.transaction() as tx:
        assert tx.rows("SELECT count(*) FROM incident_actions") == [(1,)]


def test_two_people_clicking_at_once_yield_one_ack(setup: Setup) -> None:
    incident = setup.open_incident()
    barrier = threading.Barrier(2)
    statuses: list[int] = []

    def click(user: str) -> None:
        body, headers = signed_click(
            click_payload("invmon_ack_until_resolved", incident, user, user), SECRET
        )
        barrier.wait()
        statuses.append(post(setup.url, body, headers))

    threads = [threading.Thread(target=click, args=(u,)) for u in ("U_ONE", "U_TWO")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [200, 200]
    with setup.world.store.storage.transaction() as tx:
        assert tx.rows("SELECT count(*) FROM incident_actions WHERE action = 'ack'") == [(1,)]
    winner = setup.incident(incident).acked_by
    loser = "U_TWO" if winner == "U_ONE" else "U_ONE"
    wait_for(lambda: len(setup.fake.ephemerals) == 2, 5, "both answers")
    answers = dict((user, text) for _, user, text in setup.fake.ephemerals)
    assert answers[str(winner)].startswith("You acknowledged")
    assert answers[loser].startswith(f"incident #{incident} was already acknowledged by @{winner}")


def test_a_click_on_a_resolved_incident_gets_an_answer_and_changes_nothing(setup: Setup) -> None:
    incident = setup.open_incident()
    script(setup.world, setup.daemon, 2)
    body, headers = signed_click(click_payload("invmon_ack_until_resolved", incident), SECRET)
    assert post(setup.url, body, headers) == 200
    assert setup.incident(incident).acked_by is None
    wait_for(lambda: setup.fake.ephemerals, 5, "the answer")
    assert setup.fake.ephemerals[0][2] == (
        f"incident #{incident} is already resolved; there is nothing to do."
    )


def test_only_the_allowlist_may_acknowledge(world: World) -> None:
    with FakeSlack(clock=world.clock) as fake:
        fake.usergroups["S_ONCALL"] = ["U_BOB"]
        setup = Setup(world, fake, ack_allowlist=["U_ALICE", "S_ONCALL"])
        try:
            incident = setup.open_incident()
            body, headers = signed_click(
                click_payload("invmon_ack_until_resolved", incident, "U_EVE"), SECRET
            )
            assert post(setup.url, body, headers) == 200
            assert setup.incident(incident).acked_by is None
            body, headers = signed_click(
                click_payload("invmon_ack_until_resolved", incident, "U_BOB"), SECRET
            )
            assert post(setup.url, body, headers) == 200
            assert setup.incident(incident).acked_by == "U_BOB"
            wait_for(lambda: len(fake.ephemerals) == 2, 5, "both answers")
            assert sorted(fake.ephemerals) == [
                ("C0INVARIANTS", "U_BOB", f"You acknowledged incident #{incident} until resolved."),
                (
                    "C0INVARIANTS",
                    "U_EVE",
                    "You are not on the list of people who may acknowledge invmon alerts.",
                ),
            ]
        finally:
            setup.close()


def test_an_ack_until_new_rows_ends_when_a_new_row_appears(setup: Setup) -> None:
    incident = setup.open_incident()
    body, headers = signed_click(click_payload("invmon_ack_until_new_rows", incident), SECRET)
    assert post(setup.url, body, headers) == 200
    script(setup.world, setup.daemon, 1)  # row 3 appears, row 1 goes
    settle(setup.daemon, setup.world.clock, "new rows")
    assert setup.incident(incident).acked_by is None
    [root] = setup.fake.roots()
    replies = [m.text.split(" ")[0] for m in setup.fake.thread(root) if not m.files]
    assert replies == ["🔁"]
    assert '"action_id": "invmon_ack_until_new_rows"' in setup.root_text()


def test_the_cli_acks_snoozes_and_unacks_and_slack_reflects_it(setup: Setup) -> None:
    incident = setup.open_incident()
    home = setup.world.folder.parent
    config = config_file(home, state={"path": home / "state.db"})
    done = invmon("ack", str(incident), "--until-new-rows", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"You acknowledged incident #{incident} until new rows appear.")
    again = invmon("ack", str(incident), "--config", str(config))
    assert again.returncode == 1
    settle(setup.daemon, setup.world.clock, "cli ack")
    assert f"👀 Acknowledged by {getpass.getuser()} (command line) at " in setup.root_text()
    assert invmon("snooze", str(incident), "4h", "--config", str(config)).returncode == 0
    until = setup.incident(incident).snoozed_until
    assert until is not None
    unacked = invmon("unack", str(incident), "--config", str(config))
    assert unacked.returncode == 0
    # Not "reminders resume": the snooze still silences them (is_quiet).
    assert unacked.stdout.startswith(
        f"You removed the acknowledgement of incident #{incident}; it stays snoozed until "
        f"{until:%Y-%m-%d %H:%M UTC}, then reminders resume."
    ), unacked.stdout
    settle(setup.daemon, setup.world.clock, "cli unack")
    # One update planned for the snooze's end, whatever was done meanwhile; and it is no
    # alert "not delivered yet" (`run --once`'s note).
    later = [d for d in setup.daemon.alerter.ledger.all() if d.state == "PENDING"]
    assert [d.action for d in later] == ["update_root"]
    assert setup.daemon.alerter.ledger.undelivered(setup.world.clock()) == 0
    text = setup.root_text()
    assert "👀 Acknowledged" not in text
    assert f"💤 Snoozed until {until:%Y-%m-%d %H:%M} UTC by {getpass.getuser()} (command line)" in (
        text
    )
    # When the snooze ends, the message says so: nothing else would update it then.
    setup.world.clock.advance(4 * 3600 + 60)
    settle(setup.daemon, setup.world.clock, "the snooze over")
    assert "💤 Snoozed" not in setup.root_text()
    bad = invmon("snooze", str(incident), "soon", "--config", str(config))
    assert (bad.returncode, bad.stderr.strip()) == (
        2,
        "invmon: 'soon' is not a duration; write it like 30s, 5m, 1h or 1h30m",
    )


def test_socket_mode_clicks_are_acked_by_envelope_and_survive_a_reconnect(world: World) -> None:
    with FakeSlack(clock=world.clock) as fake, FakeSocketMode() as socket_server:
        fake.socket_url = socket_server.url
        daemon: Daemon = world.daemon(fake, app_token=APP_TOKEN)
        receiver = daemon.socket_mode
        assert receiver is not None
        try:
            script(world, daemon, 0)
            settle(daemon, world.clock, "opened")
            [incident] = world.store.open_incidents()
            receiver.start()
            wait_for(lambda: socket_server.connections == 1, 10, "the connection")
            first = socket_server.send_interactive(
                click_payload("invmon_ack_until_resolved", incident.id)
            )
            wait_for(lambda: first in socket_server.acks, 10, "the envelope ack")
            wait_for(
                lambda: getattr(world.store.incident(incident.id), "acked_by", None), 10, "the ack"
            )
            socket_server.disconnect()
            wait_for(lambda: socket_server.connections == 2, 20, "the reconnect")
            second = socket_server.send_interactive(click_payload("invmon_unack", incident.id))
            wait_for(lambda: second in socket_server.acks, 10, "the second ack")
            wait_for(
                lambda: getattr(world.store.incident(incident.id), "acked_by", None) is None,
                10,
                "the unack",
            )
            settle(daemon, world.clock, "updates")
            [root] = fake.roots()
            assert root.updates == 2
        finally:
            receiver.stop()
            daemon.databases.close()


def test_signed_hostile_payloads_get_a_400_or_no_action_never_a_500(setup: Setup) -> None:
    """With a valid signature, nesting past the JSON decoder's depth raised RecursionError,
    and an id past 64 bits raised OverflowError in the store: both a 500 and a traceback."""
    incident = setup.open_incident()
    deep = urllib.parse.urlencode({"payload": "[" * 100_000}).encode()
    deep_headers = {
        **slack_signature(deep, SECRET, str(int(time.time()))),
        "Content-Type": "application/x-www-form-urlencoded",
    }
    assert post(setup.url, deep, deep_headers) == 400
    for value in ("9223372036854775808", "9" * 30, "0"):
        payload = {
            **click_payload("invmon_ack_until_resolved", incident),
            "actions": [{"action_id": "invmon_ack_until_resolved", "value": value}],
        }
        body, headers = signed_click(payload, SECRET)
        assert post(setup.url, body, headers) == 200
    assert setup.incident(incident).acked_by is None
    too_big = [{"action_id": "invmon_unack", "value": str(2**63)}]
    assert parse_clicks({**payload, "actions": too_big}) == []


def test_clicks_parse_into_actions_and_decisions_are_pure() -> None:
    payload = {
        "type": "block_actions",
        "user": {"id": "U1", "username": "ana"},
        "channel": {"id": "C1"},
        "actions": [
            {"action_id": "invmon_ack_until_new_rows", "value": "7"},
            {"action_id": "invmon_snooze_4h", "value": "7"},
            {"action_id": "invmon_runbook", "value": "7"},
            {"action_id": "invmon_ack_forever", "value": "7"},
            {"action_id": "invmon_unack", "value": "not-a-number"},
        ],
    }
    clicks = parse_clicks(payload)
    assert [(c.incident_id, c.action.kind, c.action.mode, c.action.snooze_for) for c in clicks] == [
        (7, "ack", "until_new_rows", None),
        (7, "snooze", "until_resolved", timedelta(hours=4)),
    ]
    assert parse_clicks({"type": "view_submission"}) == []
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, tzinfo=UTC)
    incident = Incident(3, "x", "violation", now, None, 1, 1, now)
    outcome = decide_action(incident, Action("ack", "U1", "ana"), now)
    assert outcome.changed and outcome.updates["acked_by"] == "U1"
    taken = dataclasses.replace(incident, acked_by="U2")
    assert not decide_action(taken, Action("ack", "U1"), now).changed


def test_an_app_token_slack_refuses_is_said_in_readyz_and_the_daemon_still_alerts(
    world: World,
) -> None:
    """The deploy kit's placeholder app token ended the daemon at start with a traceback:
    now Slack's refusal is /readyz's 503, naming the setting, and alerts still go out."""
    with FakeSlack(clock=world.clock) as fake:
        daemon: Daemon = world.daemon(fake, app_token="xapp-replace-me")
        receiver = daemon.socket_mode
        assert receiver is not None
        try:
            receiver.start()
            refused = "Slack refused the app token: invalid_auth (slack.app_token)"
            wait_for(lambda: receiver.problem() == refused, 10, "the refusal")
            assert receiver.note() is None
            assert daemon.probes.readiness() == refused
            assert "xapp-replace-me" not in refused
            script(world, daemon, 0)
            settle(daemon, world.clock, "opened")
            assert len(fake.roots()) == 1
        finally:
            receiver.stop()
            daemon.databases.close()
        assert not receiver._thread.is_alive()


def test_a_slack_not_reached_for_socket_mode_is_a_note_until_it_connects(world: World) -> None:
    with FakeSlack(clock=world.clock) as fake, FakeSocketMode() as socket_server:
        fake.socket_url = socket_server.url
        fake.fail_next("apps.connections.open", "error_500")
        daemon: Daemon = world.daemon(fake, app_token=APP_TOKEN)
        receiver = daemon.socket_mode
        assert receiver is not None
        receiver.first_retry = 0.5
        try:
            receiver.start()
            wait_for(lambda: receiver.note() is not None, 10, "the failed connect")
            note = receiver.note()
            assert note is not None and note.startswith("Slack did not open Socket Mode: ")
            assert note.endswith("(slack.app_token)")
            assert note in str(daemon.probes.readiness_note())
            assert receiver.problem() is None
            wait_for(lambda: socket_server.connections == 1, 10, "the connect retried")
            wait_for(lambda: receiver.note() is None, 10, "the note cleared")
            assert "Socket Mode" not in (daemon.probes.readiness_note() or "")
        finally:
            receiver.stop()
            daemon.databases.close()


def test_a_connect_that_completes_after_the_stop_leaves_no_session_open(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a review: Slack answered the socket's URL after stop() had stopped waiting;
    the connect then completed, and a session stayed open that took clicks and answered
    none. It is closed as soon as the connect returns."""
    from alerts import socket_mode

    monkeypatch.setattr(socket_mode, "STOP_WAIT", 0.2)
    with FakeSlack(clock=world.clock) as fake, FakeSocketMode() as socket_server:
        fake.socket_url = socket_server.url
        late = threading.Event()
        fake.gates["apps.connections.open"] = late
        daemon: Daemon = world.daemon(fake, app_token=APP_TOKEN)
        receiver = daemon.socket_mode
        assert receiver is not None
        try:
            receiver.start()
            wait_for(
                lambda: any(m == "apps.connections.open" for m, _ in fake.calls), 10, "the call"
            )
            receiver.stop()  # gives up waiting after 0.2 s
            late.set()
            wait_for(lambda: not receiver._thread.is_alive(), 15, "the connect to return")
            wait_for(lambda: socket_server.open_connections() == 0, 10, "the session closed")
            assert not receiver.client.is_connected()
        finally:
            daemon.databases.close()
