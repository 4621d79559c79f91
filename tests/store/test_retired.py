"""Retired is not resolved: an incident still open when its invariant's file is removed
closes as `retired`, and every place an incident's state shows (the Slack root and its
thread, the daily summary, `status` and `history`, the status page, /metrics) says that,
worded as what happened, never as a green "resolved"."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from builders import process_config, slack_to
from fake_slack import FakeSlack
from helpers import (
    cli,
    http_get,
    items_table,
    listening_url,
    lock_waits,
    start_daemon,
    wait_for,
)
from scenario import World, script, settle

from alerts.alerter import summary_group
from alerts.messages import (
    IncidentView,
    reply_message,
    root_message,
    status_title,
    summary_message,
)
from monitor.authoring.pgtemp import scratch_database
from monitor.cli.render import history_text, status_text
from monitor.daemon.metrics import Metrics
from monitor.execution.results import RunResult
from monitor.store.incidents import retired_reason, while_open
from monitor.store.migrations import migrations
from monitor.store.records import Incident, as_document
from monitor.store.state import RemovedWhileRunning, StateStore
from monitor.store.storage import PostgresStorage, SqliteStorage, Storage, migrate
from monitor.web.detail_views import event_line, invariant_page
from monitor.web.formats import summary_of
from monitor.web.reads import read_invariant, read_overview

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
OPENED = NOW - timedelta(seconds=35)
OPENED_STAMP = "2026-11-30T09:00:00.000000Z"


def view(kind: str = "violation", count: int | None = 1, **fields: object) -> IncidentView:
    values: dict[str, object] = {
        "incident_id": 4,
        "invariant": "shop/paid_twice",
        "kind": kind,
        "severity": "critical",
        "description": "No order is paid twice.",
        "opened_at": OPENED,
        "resolved_at": NOW,
        "ended_as": "retired",
        "count": count,
    }
    values.update(fields)
    return IncidentView(**values)  # type: ignore[arg-type]


# --- the words -------------------------------------------------------------------------------


def test_the_words_say_what_still_stood_when_it_was_retired() -> None:
    assert while_open("violation", 1) == "while 1 row still offended"
    assert while_open("violation", 1200) == "while 1,200 rows still offended"
    assert while_open("violation", None) == "while it was violated"
    assert while_open("cannot_evaluate", None) == "while it could not be evaluated"
    assert while_open("quarantined", None) == "while it was quarantined"
    assert retired_reason("violation", 1) == "the invariant was removed while 1 row still offended"


def test_a_retired_root_is_neither_green_nor_resolved() -> None:
    message = root_message(view(), NOW)
    title = "🗄️ RETIRED · shop/paid_twice (after 35s): closed while 1 row still offended"
    assert status_title(view(), NOW) == title
    assert message.text == title  # the title says the count: no ": 1 offending row" after it
    assert message.blocks[0]["text"]["text"] == title
    assert message.blocks[1]["text"]["text"] == (
        "🗄️ *Retired:* the invariant was removed while 1 row still offended. It is no longer "
        "evaluated, so nothing says whether it holds now."
    )
    everything = json.dumps(message.blocks, ensure_ascii=False)
    assert "✅" not in everything and "RESOLVED" not in everything.upper().replace("RETIRED", "")
    assert not [b for b in message.blocks if b["type"] == "actions"]  # nothing left to ack


def test_each_kind_of_retired_incident_is_titled_with_what_it_was() -> None:
    assert status_title(view("cannot_evaluate", None), NOW) == (
        "🗄️ RETIRED · shop/paid_twice (after 35s): closed while it could not be evaluated"
    )
    assert status_title(view("quarantined", None), NOW) == (
        "🗄️ RETIRED · shop/paid_twice (after 35s): closed while it was quarantined"
    )
    assert status_title(view("violation", 3), NOW).endswith("closed while 3 rows still offended")


def test_a_resolved_incident_is_still_resolved() -> None:
    resolved = view(ended_as=None, count=0)
    assert status_title(resolved, NOW) == "✅ RESOLVED · shop/paid_twice (lasted 35s)"
    assert status_title(view(ended_as="resolved"), NOW).startswith("✅ RESOLVED")
    open_ = view(resolved_at=None, ended_as=None)
    assert status_title(open_, NOW) == "🔴 CRITICAL · shop/paid_twice violated"


def test_the_retired_reply_says_the_invariant_was_removed_while_rows_offended() -> None:
    payload = {
        "kind": "retired",
        "reason": "the invariant was removed while 1 row still offended",
        "incident_kind": "violation",
        "count": 1,
        "lasted_seconds": 35.2,
    }
    reply = reply_message("retired", payload, view())
    assert reply.text == (
        "🗄️ Closed after 35s: the invariant was removed while 1 row still offended; it is no "
        "longer evaluated."
    )
    unexplained = reply_message("retired", {"lasted_seconds": 35}, view("cannot_evaluate", None))
    assert unexplained.text == (
        "🗄️ Closed after 35s: the invariant was removed while it could not be evaluated; it is "
        "no longer evaluated."
    )


def test_the_daily_summary_lists_retired_apart_from_resolved() -> None:
    resolved = view(incident_id=5, invariant="shop/refunds", ended_as=None, count=0)
    message = summary_message("2026-12-01", {"resolved": [resolved], "retired": [view()]}, NOW)
    texts = [b["text"]["text"] for b in message.blocks if b["type"] == "section"]
    assert texts == [
        "*✅ Resolved in the last day* (1)\n• ✅ RESOLVED · shop/refunds (lasted 35s) — 0 rows",
        "*🗄️ Retired in the last day* (1)\n"
        "• 🗄️ RETIRED · shop/paid_twice (after 35s): closed while 1 row still offended",
    ]
    assert message.text.endswith("resolved in the last day: 1, retired in the last day: 1")


# --- the store ---------------------------------------------------------------------------------


def incident(**fields: object) -> Incident:
    values: dict[str, object] = {
        "id": 4,
        "invariant": "shop/paid_twice",
        "kind": "violation",
        "opened_at": OPENED,
        "resolved_at": NOW,
        "first_count": 1,
        "last_count": 1,
        "last_seen_at": OPENED,
    }
    values.update(fields)
    return Incident(**values)  # type: ignore[arg-type]


def test_a_closed_record_that_does_not_say_how_was_resolved() -> None:
    assert incident().state == "resolved"
    assert incident(resolved_at=None).state == "open"
    assert incident(state="retired").state == "retired"
    assert as_document(incident(state="retired"))["state"] == "retired"


def test_removing_a_file_retires_each_kind_of_open_incident(store: StateStore) -> None:
    rows = [{"order_id": 10}, {"order_id": 11}]
    keys = {"[10]": rows[0], "[11]": rows[1]}
    violated = RunResult.counted("shop/paid_twice", 2, ["order_id"], rows, keys=keys)
    store.record_run("shop/paid_twice", violated, OPENED)
    for n in range(3):
        failed = RunResult.failed("shop/broken", "relation does not exist")
        store.record_run("shop/broken", failed, OPENED + timedelta(seconds=n))
    store.record_run("shop/fixed", RunResult.counted("shop/fixed", 1, [], []), OPENED)
    store.record_run("shop/fixed", RunResult.counted("shop/fixed", 0, [], []), NOW)

    events = store.retire("shop/paid_twice", NOW) + store.retire("shop/broken", NOW)

    assert [(e.invariant, e.kind, e.payload) for e in events] == [
        (
            "shop/paid_twice",
            "retired",
            {
                "reason": "the invariant was removed while 2 rows still offended",
                "incident_kind": "violation",
                "count": 2,
                "lasted_seconds": 35.0,
            },
        ),
        (
            "shop/broken",
            "retired",
            {
                "reason": "the invariant was removed while it could not be evaluated",
                "incident_kind": "cannot_evaluate",
                "count": None,
                "lasted_seconds": 33.0,
            },
        ),
    ]
    assert store.open_incidents() == []
    states = {(i.invariant, i.state) for i in store.closed_since(OPENED)}
    assert states == {
        ("shop/paid_twice", "retired"),
        ("shop/broken", "retired"),
        ("shop/fixed", "resolved"),
    }
    [retired] = store.incidents("shop/paid_twice")
    assert (retired.resolved_at, retired.last_seen_at, retired.last_count) == (NOW, OPENED, 2)
    # Nothing saw the rows go: the keys still offended when it stopped being evaluated.
    assert [(k.key, k.gone_at) for k in store.incident_keys(retired.id)] == [
        ("[10]", None),
        ("[11]", None),
    ]
    assert store.counts() == {
        "events_pending": 6,
        "open_incidents": 0,
        "resolved_incidents": 1,
        "retired_incidents": 2,
    }
    assert store.retire("shop/paid_twice", NOW) == []  # nothing open: nothing to retire
    # Retired since their last runs (`status` leaves them out of its last runs); a run of
    # its file added back makes an invariant current again.
    assert store.retired() == {"shop/paid_twice", "shop/broken"}
    later = NOW + timedelta(minutes=1)
    store.record_run("shop/broken", RunResult.counted("shop/broken", 0, [], []), later)
    assert store.retired() == {"shop/paid_twice"}


def test_status_lists_no_last_run_of_a_retired_invariant(tmp_path: Path) -> None:
    """A reviewer saw `status` list a removed invariant as "❌ violated 1" under its last
    runs, after its incident was retired; the page and /metrics had dropped it."""
    store = StateStore.open(path=tmp_path / "state.db")
    rows = [{"order_id": 10}]
    violated = RunResult.counted("shop/paid_twice", 1, ["order_id"], rows, keys={"[10]": rows[0]})
    store.record_run("shop/paid_twice", violated, OPENED)
    store.record_run("shop/holds", RunResult.counted("shop/holds", 0, [], []), OPENED)
    store.retire("shop/paid_twice", NOW)
    store.close()
    (tmp_path / "invmon.yaml").write_text(f"state:\n  path: {tmp_path / 'state.db'}\n")
    shown = cli("status", "--config", str(tmp_path / "invmon.yaml"), "--format", "json")
    document = json.loads(shown.stdout)
    assert [r["invariant"] for r in document["last_runs"]] == ["shop/holds"]


@pytest.fixture(params=["sqlite", "postgres"])
def bare_storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    """A state store's database with no schema yet, of each kind."""
    if request.param == "sqlite":
        yield SqliteStorage(tmp_path / "state.db")
        return
    with scratch_database(request.getfixturevalue("admin_dsn"), prefix="invmon_state") as dsn:
        storage = PostgresStorage(dsn)
        yield storage
        storage.close()


def test_incidents_a_removal_closed_before_the_migration_read_as_retired(
    bare_storage: Storage,
) -> None:
    storage = bare_storage
    steps = migrations("INTEGER PRIMARY KEY AUTOINCREMENT", "INTEGER", "REAL")
    if storage.kind == "postgresql":
        steps = migrations(
            "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "BIGINT", "DOUBLE PRECISION"
        )
    # The schema as the release before end states left it: every step before the one that
    # adds `ended_as`, wherever later steps put it.
    before = next(n for n, step in enumerate(steps) if "ended_as" in step)
    migrate(storage, steps[:before])
    with storage.transaction() as tx:
        for number, reason in ((1, "the invariant was removed"), (2, None), (3, "open")):
            closed = None if reason == "open" else "2026-11-30T10:00:00.000000Z"
            [(incident_id,)] = tx.rows(
                "INSERT INTO incidents (invariant, kind, opened_at, resolved_at,"
                " last_seen_at) VALUES (?, 'violation', ?, ?, ?) RETURNING id",
                (f"inv{number}", OPENED_STAMP, closed, OPENED_STAMP),
            )
            # How the release before wrote the closing event of a removal: `resolved`.
            payload: dict[str, object] = {"lasted_seconds": 3600}
            payload |= {"count": 0} if reason in (None, "open") else {"reason": reason}
            tx.run(
                "INSERT INTO events (incident_id, invariant, kind, created_at, payload_json)"
                " VALUES (?, ?, 'resolved', '2026-11-30T10:00:00.000000Z', ?)",
                (incident_id, f"inv{number}", json.dumps(payload)),
            )
    migrate(storage, steps)
    store = StateStore(storage)
    assert [(i.invariant, i.state) for i in store.incidents()] == [
        ("inv3", "open"),
        ("inv2", "resolved"),
        ("inv1", "retired"),
    ]
    assert store.counts()["retired_incidents"] == 1


def test_the_daily_summary_groups_a_retired_incident_as_retired() -> None:
    assert summary_group(incident(state="retired"), NOW) == "retired"
    assert summary_group(incident(), NOW) == "resolved"
    assert summary_group(incident(resolved_at=None), NOW) == "open"


# --- the command line, the page's views, the metrics ---------------------------------------


def test_history_and_status_tables_say_retired() -> None:
    retired = incident(state="retired")
    table = history_text("shop/paid_twice", [], [retired])
    header, _, row = table.split("\n")[-3:]
    assert header.split() == [
        "incident",
        "kind",
        "state",
        "opened",
        "closed",
        "first",
        "count",
        "last",
        "count",
    ]
    assert row.split()[:4] == ["#4", "violation", "🗄️", "retired"]
    assert "resolved" not in table
    text = status_text([], [], [retired, incident(id=5, invariant="shop/refunds")])
    assert text.startswith("No open incidents.\n\nClosed in the last day (2):\n")
    lines = text.split("\n")
    assert lines[5].split()[:5] == ["#4", "shop/paid_twice", "violation", "🗄️", "retired"]
    assert lines[6].split()[:5] == ["#5", "shop/refunds", "violation", "✅", "resolved"]


def test_the_page_shows_retired_with_its_own_word_and_icon() -> None:
    summary = summary_of(incident(state="retired"), NOW)
    assert (summary.state, summary.state_word, summary.state_icon, summary.state_class) == (
        "retired",
        "Retired",
        "⊘",
        "stale",
    )
    assert summary.retired_note == (
        "the invariant was removed while 1 row still offended; it is no longer evaluated"
    )
    resolved = summary_of(incident(), NOW)
    assert (resolved.state_word, resolved.state_icon, resolved.retired_note) == (
        "Resolved",
        "✔",
        "",
    )
    from monitor.store.records import StoredEvent

    payload = {"reason": retired_reason("violation", 1), "lasted_seconds": 35}
    line = event_line(StoredEvent(9, 4, "shop/paid_twice", "retired", NOW, payload))
    assert (line.icon, line.text) == (
        "⊘",
        "Retired after 35s: the invariant was removed while 1 row still offended; it is no "
        "longer evaluated",
    )


def test_metrics_count_closed_incidents_by_how_they_ended() -> None:
    figures = {"open_incidents": 0, "events_pending": 0}
    figures |= {"resolved_incidents": 3, "retired_incidents": 1}
    text = Metrics(lambda: figures).render().decode()
    assert 'invmon_closed_incidents{ended_as="resolved"} 3.0' in text
    assert 'invmon_closed_incidents{ended_as="retired"} 1.0' in text
    # A counts source that does not report them (an older store reader): not a false zero.
    older = Metrics(lambda: {"open_incidents": 0, "events_pending": 0}).render().decode()
    assert 'invmon_closed_incidents{ended_as="retired"} NaN' in older


# --- end to end: the real daemon, the fake Slack, SIGHUP -------------------------------------

PAID_TWICE = """\
-- description: No order is paid twice.
-- severity: critical
-- owner: "@payments"
-- key: [order_id]
SELECT id AS order_id, note FROM items WHERE bad
"""
HOLDS = """\
-- description: No item has a negative id.
SELECT id FROM items WHERE id < 0
"""


def test_removing_a_violated_invariant_and_sighup_retire_it_everywhere(
    database: str, tmp_path: Path
) -> None:
    items_table(database, rows=12, bad=(10,))  # order 10 paid twice, and it stays so
    folder = tmp_path / "invariants"
    (folder / "shop").mkdir(parents=True)
    (folder / "shop" / "paid_twice.sql").write_text(PAID_TWICE)
    (folder / "shop" / "holds.sql").write_text(HOLDS)  # an emptied folder is kept loaded
    with FakeSlack() as fake:
        config = process_config(
            tmp_path,
            folder,
            http={"listen": "127.0.0.1:0"},
            log={"format": "json"},
            defaults={"schedule": "every 1s"},
            daemon={"shutdown_grace": "2s"},
            slack=slack_to(fake, settle="1s", timeout="2s", digest_window="1s"),
        )
        log = tmp_path / "daemon.log"
        process = start_daemon(config, log, database)
        try:
            base = listening_url(log)
            root = wait_for(
                lambda: next(
                    (r for r in fake.roots() if any(m.files for m in fake.thread(r))), None
                ),
                30,
                "the incident's root and its CSV in Slack",
            )
            assert root.blocks[0]["text"]["text"] == "🔴 CRITICAL · shop/paid_twice violated"

            for path in (folder / "shop").glob("paid_twice.*"):
                path.unlink()
            process.send_signal(signal.SIGHUP)

            closing = wait_for(
                lambda: (
                    [m for m in fake.thread(root) if not m.files and m.text]
                    if root.updates
                    else None
                ),
                30,
                "the closing reply and the root's update",
            )
            [incident_doc] = json.loads(
                cli(
                    "history", "shop/paid_twice", "--config", str(config), "--format", "json"
                ).stdout
            )["incidents"]
            number = incident_doc["id"]
            page_status, page = http_get(f"{base}/incidents/{number}")
            listing_status, listing = http_get(f"{base}/invariants/shop/paid_twice")
            metrics_status, metrics = http_get(f"{base}/metrics")
            status = json.loads(cli("status", "--config", str(config), "--format", "json").stdout)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
        assert process.returncode == 0, log.read_text()[-3000:]
    # Slack: the root says retired and what still offended, not green, not resolved.
    header = root.blocks[0]["text"]["text"]
    assert re.fullmatch(
        r"🗄️ RETIRED · shop/paid_twice \(after \d+s\): closed while 1 row still offended", header
    ), header
    assert root.text == header
    root_words = json.dumps(root.blocks, ensure_ascii=False)
    assert "✅" not in root_words and "RESOLVED" not in root_words.upper().replace("RETIRED", "")
    [reply] = closing
    assert re.fullmatch(
        r"🗄️ Closed after \d+s: the invariant was removed while 1 row still offended; "
        r"it is no longer evaluated\.",
        reply.text,
    ), reply.text
    assert len(fake.roots()) == 1
    # history and status
    assert (incident_doc["invariant"], incident_doc["kind"], incident_doc["state"]) == (
        "shop/paid_twice",
        "violation",
        "retired",
    )
    assert incident_doc["last_count"] == 1 and incident_doc["resolved_at"] is not None
    assert status["open_incidents"] == []
    assert [(i["id"], i["state"]) for i in status["closed_incidents"]] == [(number, "retired")]
    # the page
    assert (page_status, listing_status, metrics_status) == (200, 200, 200)
    assert "⊘</span> Retired</span> after" in page
    assert "the invariant was removed while 1 row still offended" in page
    assert "resolved" not in page.lower()
    assert f"Incident #{number}</a>: Violation, retired</h3>" in listing
    assert "resolved" not in listing.lower()
    # the metrics
    assert 'invmon_closed_incidents{ended_as="retired"} 1.0' in metrics
    assert 'invmon_closed_incidents{ended_as="resolved"} 0.0' in metrics
    assert "invmon_open_incidents 0.0" in metrics


def test_the_daily_summary_after_a_removal_lists_it_as_retired(world: World) -> None:
    (world.folder / "holds.sql").write_text(HOLDS)  # an emptied folder is kept loaded
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        script(world, daemon, 0)
        settle(daemon, world.clock, "opened")
        world.clock.advance(2)  # open for 2s when its file goes
        (world.folder / "bad_items.sql").unlink()
        daemon.reload()
        settle(daemon, world.clock, "retired")
        assert daemon.alerter.summarise(world.clock()) == 1
        settle(daemon, world.clock, "summary")
        daemon.databases.close()
    [summary] = [m for m in fake.roots() if m.text.startswith("🗓️ Daily summary")]
    sections = [b["text"]["text"] for b in summary.blocks if b["type"] == "section"]
    assert sections == [
        "*🗄️ Retired in the last day* (1)\n"
        "• 🗄️ RETIRED · bad_items (after 2s): closed while 2 rows still offended"
    ]
    assert summary.text.endswith(
        "open: 0, acknowledged: 0, snoozed: 0, resolved in the last day: 0, "
        "retired in the last day: 1"
    )


def test_a_file_removed_while_no_daemon_ran_is_retired_when_one_starts(world: World) -> None:
    (world.folder / "holds.sql").write_text(HOLDS)
    with FakeSlack(clock=world.clock) as fake:
        first = world.daemon(fake)
        script(world, first, 0)
        settle(first, world.clock, "opened")
        first.databases.close()
        (world.folder / "bad_items.sql").unlink()
        (world.folder / "holds.sql").unlink()
        empty = world.daemon(fake)  # an empty folder (an unmounted volume) retires nothing
        assert [i.invariant for i in world.store.open_incidents()] == ["bad_items"]
        empty.databases.close()
        (world.folder / "holds.sql").write_text(HOLDS)
        world.clock.advance(5)
        second = world.daemon(fake)  # a restart after the deploy that removed the file
        settle(second, world.clock, "retired")
        second.databases.close()
    assert world.store.open_incidents() == []
    [incident] = world.store.incidents("bad_items")
    assert incident.state == "retired"
    assert [e.kind for e in world.store.events("bad_items")] == ["opened", "retired"]
    [root] = fake.roots()
    assert incident.resolved_at is not None
    lasted = int((incident.resolved_at - incident.opened_at).total_seconds())
    assert root.blocks[0]["text"]["text"] == (
        f"🗄️ RETIRED · bad_items (after {lasted}s): closed while 2 rows still offended"
    )


def test_an_invalid_file_deleted_is_retired_and_one_fixed_is_resolved(world: World) -> None:
    """A file removed while it did not validate was announced as "FILE FIXED" and "The
    file validates again": a reviewer had deleted it. It is retired now, saying what stood;
    only a file that loads again resolves its incident as fixed."""
    (world.folder / "holds.sql").write_text(HOLDS)  # an emptied folder retires nothing
    broken = "-- description: x\n-- severty: high\nSELECT 1 AS id WHERE false\n"
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        for name in ("deleted", "fixed"):
            (world.folder / f"{name}.sql").write_text(broken)
        daemon.reload()
        settle(daemon, world.clock, "opened")
        world.clock.advance(3)
        (world.folder / "deleted.sql").unlink()
        (world.folder / "fixed.sql").write_text(HOLDS)
        daemon.reload()
        settle(daemon, world.clock, "closed")
        daemon.databases.close()
    [deleted] = world.store.incidents("deleted")
    [fixed] = world.store.incidents("fixed")
    assert (deleted.kind, deleted.state, fixed.kind, fixed.state) == (
        "invalid_file",
        "retired",
        "invalid_file",
        "resolved",
    )
    assert [e.kind for e in world.store.events("deleted")] == ["file_invalid", "retired"]
    assert [e.kind for e in world.store.events("fixed")] == ["file_invalid", "file_fixed"]
    roots = {m.text.split(" · ")[1].split(" ")[0]: m for m in fake.roots()}
    said = roots["deleted"].blocks[0]["text"]["text"]
    assert said == "🗄️ RETIRED · deleted (after 3s): closed while its file did not validate"
    assert "FIXED" not in " ".join(
        m.text for m in [roots["deleted"], *fake.thread(roots["deleted"])]
    )


def test_an_invalid_file_deleted_from_a_folder_of_invalid_files_is_retired(
    world: World,
) -> None:
    """Only an empty folder (an unmounted volume) retires nothing: one whose files are all
    invalid left a deleted file's incident open for good (a reviewer's)."""
    broken = "-- description: x\n-- schedule: every banana\nSELECT 1 AS id WHERE false\n"
    (world.folder / "bad_items.sql").unlink()
    (world.folder / "kept.sql").write_text(broken)
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        (world.folder / "gone.sql").write_text(broken)
        daemon.reload()
        settle(daemon, world.clock, "opened")
        (world.folder / "gone.sql").unlink()
        daemon.reload()
        settle(daemon, world.clock, "retired")
        daemon.databases.close()
    assert [(i.invariant, i.state) for i in world.store.incidents("gone")] == [("gone", "retired")]
    assert [i.invariant for i in world.store.open_incidents()] == ["kept"]


def test_a_retired_invariant_s_page_says_retired_not_violated(store: StateStore) -> None:
    """An operator's review: after its file was removed, /invariants/NAME headlined
    "✖ Violated · 1 offending row" from its last run; the front page had dropped it."""
    rows = [{"order_id": 10}]
    violated = RunResult.counted("shop/paid_twice", 1, ["order_id"], rows, keys={"[10]": rows[0]})
    store.record_run("shop/paid_twice", violated, OPENED)
    store.retire("shop/paid_twice", NOW)
    records = read_invariant(store, "shop/paid_twice")
    page = invariant_page("shop/paid_twice", None, records, read_overview(store, [], NOW), NOW, 30)
    assert page is not None
    assert (page.row.status.key, page.row.status.word, page.row.count) == (
        "retired",
        "Retired: no longer evaluated",
        1,
    )


def test_a_run_in_flight_when_its_file_is_removed_is_not_stored(world: World) -> None:
    """From an SRE's review: the run under way when SIGHUP retired the incident finished two
    seconds later, was stored, and opened a new incident (with its Slack root) for an
    invariant that no longer existed; /metrics kept its series until a restart."""
    # An emptied folder (an unmounted volume) retires nothing: another file stays.
    (world.folder / "other.sql").write_text("-- description: x holds\nSELECT 1 AS id WHERE false\n")
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        try:
            script(world, daemon, 0)  # bad_items violated: its incident opens
            settle(daemon, world.clock, "opened")
            [opened] = world.store.open_incidents()
            assert b'invariant="bad_items"' in daemon.metrics.render()
            with psycopg.connect(world.dsn) as holder:
                holder.execute("LOCK TABLE items IN ACCESS EXCLUSIVE MODE")
                world.clock.advance(60)
                with ThreadPoolExecutor(1) as pool:
                    run = pool.submit(daemon.evaluate, "bad_items")
                    wait_for(
                        lambda: lock_waits(world.dsn, "invmon:bad_items") == 1,
                        10,
                        "the run waiting on the lock",
                    )
                    world.clock.advance(1)
                    (world.folder / "bad_items.sql").unlink()
                    daemon.reload()  # retires the open incident
                    holder.rollback()  # the run goes on, and finds the rows still bad
                    assert run.result(timeout=30) is None
            settle(daemon, world.clock, "retired")
        finally:
            daemon.databases.close()
    assert world.store.open_incidents() == []
    assert [e.kind for e in world.store.events("bad_items")] == ["opened", "retired"]
    assert [i.id for i in world.store.incidents("bad_items")] == [opened.id]
    assert b'invariant="bad_items"' not in daemon.metrics.render()
    assert world.store.retired() == {"bad_items"}
    assert len(fake.roots()) == 1


def test_status_leaves_out_an_invariant_removed_while_it_held(tmp_path: Path) -> None:
    """A reviewer saw `status` list a file removed while it held as "✅ ok" for good: only
    a retired incident marked a removal. Added back and run, it is listed again."""
    store = StateStore.open(path=tmp_path / "state.db")
    store.record_run("shop/holds", RunResult.counted("shop/holds", 0, [], []), OPENED)
    store.record_run("shop/other", RunResult.counted("shop/other", 0, [], []), OPENED)
    assert store.retire("shop/holds", NOW) == []  # nothing open, but marked removed
    (tmp_path / "invmon.yaml").write_text(f"state:\n  path: {tmp_path / 'state.db'}\n")

    def listed() -> list[str]:
        shown = cli("status", "--config", str(tmp_path / "invmon.yaml"), "--format", "json")
        return [r["invariant"] for r in json.loads(shown.stdout)["last_runs"]]

    assert listed() == ["shop/other"]
    added_back = NOW + timedelta(minutes=1)
    rerun = RunResult.counted("shop/holds", 0, [], [], started_at=added_back)
    store.record_run("shop/holds", rerun, added_back + timedelta(seconds=1))
    assert listed() == ["shop/holds", "shop/other"]
    store.close()


def test_a_run_that_began_before_the_removal_is_refused_and_one_after_is_stored(
    store: StateStore,
) -> None:
    began = OPENED
    store.retire("shop/gone", began + timedelta(seconds=5))
    late = RunResult.counted("shop/gone", 1, ["id"], [{"id": 1}], started_at=began)
    with pytest.raises(RemovedWhileRunning) as refused:
        store.record_run("shop/gone", late, began + timedelta(seconds=9))
    assert str(refused.value) == (
        "its file was removed at 2026-12-01T11:59:30.000000Z, while it ran"
    )
    assert (store.open_incidents(), store.runs("shop/gone")) == ([], [])
    after = RunResult.counted(
        "shop/gone", 1, ["id"], [{"id": 1}], started_at=began + timedelta(seconds=6)
    )
    store.record_run("shop/gone", after, began + timedelta(seconds=7))
    assert [i.invariant for i in store.open_incidents()] == ["shop/gone"]


def test_a_fleet_member_with_an_older_folder_marks_no_file_it_never_had(world: World) -> None:
    """A rolling deploy: one daemon has the new `added.sql` and ran it; another, with the
    folder before it, reloads. Marking every stored invariant its folder lacks (tried, and
    found by a review) marked `added` removed, and the newer daemon's run in flight was not
    stored. Only what a daemon had, or an open incident, is retired."""
    (world.folder / "added.sql").write_text("-- description: x holds\nSELECT 1 AS id WHERE false\n")
    with FakeSlack(clock=world.clock) as fake:
        newer = world.daemon(fake)
        assert newer.evaluate("added") is not None
        (world.folder / "added.sql").unlink()  # the older member's folder
        world.clock.advance(60)
        older = world.daemon(fake)  # reloads at its start
        older.databases.close()
        assert world.store.retired() == set()  # `status` still lists it; a run would be stored
        (world.folder / "added.sql").write_text(
            "-- description: x holds\nSELECT 1 AS id WHERE false\n"
        )
        world.clock.advance(60)
        newer.reload()
        after = newer.evaluate("added")
        newer.databases.close()
    assert after is not None and after.status == "ok"
    assert world.store.retired() == set()
