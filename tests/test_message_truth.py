"""What on-call reads equals what the database held: the rows that opened an incident,
duplicates kept, in the thread where the incident lives, with figures no failed run wiped."""

from __future__ import annotations

from pathlib import Path

from fake_slack import FakeSlack
from helpers import cli, sql
from scenario import World, csv_rows, script, settle

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


def test_the_readme_lists_every_scope_the_slack_app_asks_for() -> None:
    import yaml

    root = Path(__file__).resolve().parent.parent
    manifest = yaml.safe_load((root / "deploy" / "slack" / "manifest.yaml").read_text())
    scopes = manifest["oauth_config"]["scopes"]["bot"]
    readme = (root / "README.md").read_text()
    assert [s for s in scopes if f"`{s}`" not in readme] == []


def test_a_key_that_is_not_unique_is_a_warning_in_lint_and_in_test(tmp_path: Path) -> None:
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "dup.sql").write_text(
        "-- description: x\n-- key: [id]\nSELECT 1 AS id, v FROM (VALUES (1), (2)) AS t(v)\n"
    )
    (folder / "dup.test.yaml").write_text(
        "cases:\n  - name: twice\n    expect:\n      rows: [{id: 1, v: 1}, {id: 1, v: 2}]\n"
    )
    warning = (
        "'twice': the key (id) is not unique: [1] {} more than once, and an incident tracks "
        "rows by key, so those rows would count as one (the count and the CSV keep them all)"
    )
    linted = cli("lint", str(folder))
    assert linted.returncode == 0
    assert f"dup.test.yaml:2: warning: {warning.format('is expected')}" in linted.stdout
    tested = cli("test", "--invariants", str(folder))
    assert "✅ twice" in tested.stdout
    assert f"warning: {warning.format('was returned')}" in tested.stdout
