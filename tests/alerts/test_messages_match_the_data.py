"""What on-call reads equals what the database held: the rows that opened an incident,
duplicates kept, in the thread where the incident lives, with figures no failed run wiped."""

from __future__ import annotations

import json

from builders import build_daemon, daemon_config, quick_slack
from fake_slack import FakeSlack, Message
from helpers import sql
from scenario import World, csv_rows, script, settle

from alerts.messages import TRACKED_ONLY
from monitor.config import DaemonConfig

DUPLICATES = """\
-- description: No payment is negative.
SELECT account, amount FROM (VALUES (1, -5), (1, -5), (2, -7)) AS p(account, amount)
"""


def test_identical_offending_rows_are_all_in_the_csv(world: World) -> None:
    (world.folder / "negative.sql").write_text(DUPLICATES)
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        daemon.evaluate("negative")
        settle(daemon, world.clock, "opened")
        daemon.databases.close()
    [rows] = csv_rows(fake)
    assert rows == [
        {"account": "1", "amount": "-5"},
        {"account": "1", "amount": "-5"},
        {"account": "2", "amount": "-7"},
    ]
    assert [f.title for f in fake.shared_files()] == ["negative: 3 offending rows"]


def test_a_removed_file_closes_its_incident_in_its_own_thread(world: World) -> None:
    (world.folder / "negative.sql").write_text(DUPLICATES)  # an emptied folder is kept loaded
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake, routes={"severity": {"critical": "#payments"}})
        script(world, daemon, 0)
        settle(daemon, world.clock, "opened")
        world.clock.advance(2)  # open for 2s when its file goes
        (world.folder / "bad_items.sql").unlink()
        daemon.reload()
        settle(daemon, world.clock, "retired")
        daemon.databases.close()
    [root] = fake.roots()  # no second root in the default channel
    assert root.channel == "C0PAYMENTS"
    header = root.blocks[0]["text"]["text"]
    assert header == "🗄️ RETIRED · bad_items (after 2s): closed while 2 rows still offended"
    text = str(root.blocks)
    assert "No item is marked bad." in text and "critical" in text.lower()
    assert [m.channel for m in fake.thread(root)] == ["C0PAYMENTS", "C0PAYMENTS"]
    assert fake.thread(root)[-1].text == (
        "🗄️ Closed after 2s: the invariant was removed while 2 rows still offended; it is no "
        "longer evaluated."
    )


def test_a_csv_completed_while_reconciling_reads_as_a_first_try(world: World) -> None:
    with FakeSlack(clock=world.clock) as fake:
        fake.fail_next("files.completeUploadExternal", "error_500")
        daemon = world.daemon(fake)
        script(world, daemon, 0)
        settle(daemon, world.clock, "opened")
        daemon.databases.close()
    assert [f.title for f in fake.shared_files()] == ["bad_items: 2 offending rows"]
    assert ("files.completeUploadExternal", "error_500") in fake.calls


def test_the_csv_holds_the_rows_as_they_were_when_the_incident_opened(world: World) -> None:
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        script(world, daemon, 0)  # rows 1 and 2 offend; Slack is not reached yet
        sql(world.dsn, "UPDATE items SET bad = id = 2")
        world.clock.advance(60)
        daemon.evaluate("bad_items")  # row 1 goes…
        sql(world.dsn, "UPDATE items SET bad = id IN (1, 2), note = 'changed' WHERE id = 1")
        sql(world.dsn, "UPDATE items SET bad = id IN (1, 2)")
        world.clock.advance(60)
        daemon.evaluate("bad_items")  # …and comes back with another note
        settle(daemon, world.clock, "delivered late")
        daemon.databases.close()
    [rows] = csv_rows(fake)
    assert rows == [{"id": "1", "note": "item 1"}, {"id": "2", "note": "item 2"}]


def test_runs_that_evaluated_nothing_keep_the_last_count(world: World) -> None:
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        script(world, daemon, 0)
        settle(daemon, world.clock, "opened")
        [before] = world.store.open_incidents()
        sql(world.dsn, "ALTER TABLE items RENAME TO items_away")
        world.clock.advance(60)
        result = daemon.evaluate("bad_items")
        daemon.databases.close()
    assert result is not None and result.status == "error"
    [after] = [i for i in world.store.open_incidents() if i.kind == "violation"]
    assert (after.last_count, after.last_seen_at) == (2, before.last_seen_at)


REGIONS = """\
-- description: No item is marked bad.
-- key: [region, id]
-- sample: 3
SELECT region, id, note FROM regional WHERE bad
"""


def root_rows(fake: FakeSlack) -> str:
    [root] = fake.roots()
    return json.dumps(root.blocks, ensure_ascii=False)


def test_the_root_shows_rows_in_key_order_as_they_are_now_and_bounds_what_it_cannot_count(
    world: World,
) -> None:
    """A truth review found three things the thread said that the database did not hold:
    keys sorted as their JSON text ([10] before [9]); a key's row as the run that first saw
    it, never refreshed; and, past daemon.track_keys, counts of new and gone rows given as
    exact where only the first keys were compared."""
    sql(
        world.dsn,
        "CREATE TABLE regional (region text, id int, note text, bad bool);"
        " INSERT INTO regional VALUES ('a', 100, 'a100', true), ('a', 10, 'a10', true),"
        " ('b', 2, 'b2', false), ('a', 9, 'a9 old', true), ('a', 1, 'a1', false),"
        " ('c', 1, 'c1', false), ('d', 5, 'd5', false)",
    )
    (world.folder / "regions.sql").write_text(REGIONS)
    steps = [
        "",  # a/9, a/10, a/100
        "UPDATE regional SET note = 'a9 NEW' WHERE id = 9;"
        " UPDATE regional SET bad = true WHERE region = 'b'",  # 4 rows, all 4 tracked
        "UPDATE regional SET bad = true WHERE region IN ('c', 'd') OR id = 1",  # 7, 4 tracked
        "UPDATE regional SET bad = region = 'a' AND id > 1",  # back to a/9, a/10, a/100
    ]
    shown = []
    with FakeSlack(clock=world.clock) as fake:
        config = daemon_config(
            world.folder, daemon=DaemonConfig(track_keys=4), slack=quick_slack(fake)
        )
        daemon = build_daemon(config, world.dsn, world.store, world.clock, call_timeout=0.3)
        daemon.reload()
        for n, step in enumerate(steps):
            if step:
                sql(world.dsn, step)
            world.clock.advance(600)  # past the thread's update interval: a reply each
            daemon.evaluate("regions")
            settle(daemon, world.clock, f"step {n}")
            shown.append(root_rows(fake))
        daemon.databases.close()
    # The root's rows in key order, as the database sorts (region, id): a/9, a/10, a/100.
    assert shown[0].index("a9 old") < shown[0].index("a10") < shown[0].index("a100")
    # a/9's row as it is now, once a run fetched it whole again.
    assert "a9 NEW" in shown[1] and "a9 old" not in shown[1]
    [root] = fake.roots()
    replies = [m.text for m in fake.thread(root) if not m.files]
    assert replies == [
        '➕ 1 new offending row (now 4 in total): `["b", 2]`',
        f'➕ at least 1 new offending row (now 7 in total){TRACKED_ONLY}: `["a", 1]`',
        f"➖ at least 2 rows no longer offend (now 3 in total){TRACKED_ONLY}: "
        '`["a", 1]`, `["b", 2]`',
    ]


TRACKED = """\
-- description: No event is left.
-- key: [id]
-- sample: 2
SELECT id FROM events_left
"""


def test_a_row_that_offended_all_along_untracked_is_never_called_new(world: World) -> None:
    """Five rows offend, three are tracked (daemon.track_keys). One tracked row goes: the
    next run's first three keys now take in a row that offended from the start, which two
    reviews saw announced as "at least 1 new offending row". Nothing is new: the thread
    says only what went, and the row is tracked from then on."""
    sql(
        world.dsn,
        "CREATE TABLE events_left (id int);"
        " INSERT INTO events_left SELECT g FROM generate_series(1, 5) g",
    )
    (world.folder / "left.sql").write_text(TRACKED)
    with FakeSlack(clock=world.clock) as fake:
        config = daemon_config(
            world.folder, daemon=DaemonConfig(track_keys=3), slack=quick_slack(fake)
        )
        daemon = build_daemon(config, world.dsn, world.store, world.clock, call_timeout=0.3)
        daemon.reload()
        for step in ("", "DELETE FROM events_left WHERE id = 2", "DELETE FROM events_left"):
            if step:
                sql(world.dsn, step)
            world.clock.advance(600)
            daemon.evaluate("left")
            settle(daemon, world.clock, f"after {step or 'the opening'}")
        [root] = fake.roots()
        replies = [m.text for m in fake.thread(root) if not m.files]
        daemon.databases.close()
    # Row 2's going cannot be told either (4 offend, 3 compared): the resolution alone.
    assert replies == ["✅ Resolved after 20m: the query returns no rows."]


def _offending_rows_field(message: Message) -> str:
    fields = [
        f["text"]
        for block in message.blocks
        for f in block.get("fields", [])
        if f["text"].startswith("*Offending rows*")
    ]
    assert len(fields) == 1, fields
    return str(fields[0])


def test_the_root_shows_the_live_count_when_no_row_is_known_to_come_or_go(
    world: World,
) -> None:
    """From the message-truth review: keyed on `k`, four rows share two keys; two rows of
    key 1 went, and the root said 4 for good (and listed rows gone), as only a key that
    came or went moved the root. The count moving is enough now, and says nothing in the
    thread; also when the same run ends a "cannot evaluate" (an event of another incident,
    which had kept the root as it was in a first version)."""
    sql(
        world.dsn,
        "CREATE TABLE nk (k int, n int); INSERT INTO nk VALUES (1, 1), (1, 2), (1, 3), (2, 4)",
    )
    (world.folder / "nk.sql").write_text(
        "-- description: nk is empty\n-- key: [k]\nSELECT k, n FROM nk\n"
    )
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        try:
            daemon.evaluate("nk")
            settle(daemon, world.clock, "opened")
            [root] = fake.roots()
            assert _offending_rows_field(root) == "*Offending rows*\n4"
            replies = len(fake.thread(root))
            sql(world.dsn, "ALTER TABLE nk RENAME TO nk_away")
            for _ in range(3):  # three errors: cannot evaluate
                world.clock.advance(60)
                daemon.evaluate("nk")
            settle(daemon, world.clock, "cannot evaluate")
            assert {i.kind for i in world.store.open_incidents()} == {
                "violation",
                "cannot_evaluate",
            }
            sql(world.dsn, "ALTER TABLE nk_away RENAME TO nk; DELETE FROM nk WHERE n IN (1, 2)")
            world.clock.advance(60)
            daemon.evaluate("nk")  # recovered, and the count moved
            settle(daemon, world.clock, "count moved")
        finally:
            daemon.databases.close()
    [root] = [r for r in fake.roots() if r.blocks[0]["text"]["text"].endswith("nk violated")]
    assert _offending_rows_field(root) == "*Offending rows*\n2"
    tables = [b["text"]["text"] for b in root.blocks if "```" in b.get("text", {}).get("text", "")]
    assert tables == ["```k  n\n1  3\n2  4```"]  # the rows the database holds now
    assert len(fake.thread(root)) == replies  # the root changed; its thread did not
    # No event: one a run filled the pages' lists, and an earlier release knows no new kind.
    assert [e.kind for e in world.store.events("nk")] == ["opened", "cannot_evaluate", "recovered"]


def test_a_key_edited_while_open_says_no_row_came_or_went(world: World) -> None:
    """From the SRE review: `key: [id]` edited to `key: [id, note]` while rows 1 and 2
    offended posted "2 new offending rows" and "2 rows no longer offend": nothing in
    the data had changed. The keys are made again, silently; later changes are told."""
    with FakeSlack(clock=world.clock) as fake:
        daemon = world.daemon(fake)
        try:
            script(world, daemon, 0)  # rows 1 and 2 offend
            settle(daemon, world.clock, "opened")
            [root] = fake.roots()
            replies = len(fake.thread(root))
            path = world.folder / "bad_items.sql"
            path.write_text(path.read_text().replace("-- key: [id]", "-- key: [id, note]"))
            daemon.reload()
            world.clock.advance(60)
            daemon.evaluate("bad_items")
            settle(daemon, world.clock, "re-keyed")
            assert len(fake.thread(root)) == replies
            [incident] = world.store.open_incidents()
            keys = {k.key for k in world.store.incident_keys(incident.id) if k.gone_at is None}
            assert keys == {'[1, "item 1"]', '[2, "item 2"]'}
            script(world, daemon, 1)  # rows 2 and 3: 3 is new, 1 is gone
            settle(daemon, world.clock, "changed")
        finally:
            daemon.databases.close()
    told = [(e.kind, e.payload.get("keys")) for e in world.store.events("bad_items")]
    assert told == [
        ("opened", ["[1]", "[2]"]),
        ("keys_appeared", ['[3, "item 3"]']),
        ("keys_gone", ['[1, "item 1"]']),
    ]
