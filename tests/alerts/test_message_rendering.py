"""Alert messages and CSV files on their own: escaping, Slack's limits, whole rows in the CSV."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from alerts.csvfile import csv_title, left_out_because, offending_csv
from alerts.messages import (
    HEADER_LIMIT,
    SECTION_LIMIT,
    IncidentView,
    digest_message,
    reply_message,
    root_message,
    rows_table,
)
from alerts.thread_batching import changes_message

NOW = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)
VIEW = IncidentView(4, "shop/paid_twice", "violation", opened_at=NOW - timedelta(hours=1))


def wide_rows(count: int) -> tuple[list[str], list[dict[str, object]]]:
    columns = [f"column_{i:02d}_with_a_long_name" for i in range(40)]
    rows: list[dict[str, object]] = [
        {c: f"<b>&value {n}-{i}</b> ``` " + "x" * 300 for i, c in enumerate(columns)}
        for n in range(count)
    ]
    return columns, rows


def limits_hold(blocks: list[dict[str, object]]) -> None:
    assert len(blocks) <= 50
    for block in blocks:
        text = json.dumps(block)
        if block["type"] == "header":
            assert len(block["text"]["text"]) <= HEADER_LIMIT  # type: ignore[index]
        if block["type"] == "section":
            if "text" in block:
                assert len(block["text"]["text"]) <= SECTION_LIMIT  # type: ignore[index]
            for field in block.get("fields", []):  # type: ignore[attr-defined]
                assert len(field["text"]) <= 2000
        assert "<b>" not in text


def test_a_40_column_row_of_long_text_renders_within_slack_limits() -> None:
    columns, rows = wide_rows(20)
    view = IncidentView(
        incident_id=7,
        invariant="wide/" + "n" * 200,
        kind="violation",
        severity="critical",
        description="<script>" + "d" * 5000,
        owner="@payments",
        runbook="https://example.com/rb",
        opened_at=NOW - timedelta(hours=1),
        count=123_456,
        columns=columns,
        rows=rows,
    )
    message = root_message(view, NOW)
    limits_hold(message.blocks)
    assert len(message.text) <= 300
    sections = [b["text"]["text"] for b in message.blocks if b["type"] == "section" and "text" in b]
    table = next(t for t in sections if t.startswith("```"))
    text = table
    assert "&lt;b&gt;&amp;value 0-0" in text
    assert "more columns in the CSV" in text
    assert "more rows not shown" in text
    assert text.count("```") == 2  # user backticks cannot close the code block


def test_every_kind_of_message_stays_within_limits() -> None:
    columns, rows = wide_rows(3)
    for kind in ("violation", "cannot_evaluate", "replica_stale", "invalid_file"):
        view = IncidentView(
            1, "x" * 300, kind, detail="e" * 10_000, opened_at=NOW, columns=columns, rows=rows
        )
        limits_hold(root_message(view, NOW).blocks)
        resolved = IncidentView(1, "x", kind, opened_at=NOW - timedelta(hours=2), resolved_at=NOW)
        assert root_message(resolved, NOW).blocks[0]["text"]["text"].startswith("✅ ")
    keys = [json.dumps([i, "k" * 200]) for i in range(500)]
    reply = reply_message(
        "keys_appeared", {"keys": keys, "count": 500}, IncidentView(1, "x", "violation")
    )
    limits_hold(reply.blocks)
    assert "and 480 more" in reply.blocks[0]["text"]["text"]
    views = [IncidentView(i, "inv" * 40, "violation", count=i) for i in range(300)]
    limits_hold(digest_message(views, NOW).blocks)


def test_an_error_is_never_worded_as_a_violation() -> None:
    cannot = root_message(IncidentView(1, "refunds", "cannot_evaluate", detail="timeout"), NOW)
    assert cannot.blocks[0]["text"]["text"] == "⚠️ CANNOT EVALUATE · refunds"
    assert "not a violation" in cannot.blocks[1]["text"]["text"]
    stale = root_message(IncidentView(2, "(replica)", "replica_stale"), NOW)
    assert stale.blocks[0]["text"]["text"] == "⏸️ REPLICA STALE · invariants paused"


def test_the_csv_holds_a_wide_row_whole() -> None:
    columns, rows = wide_rows(3)
    data, attached = offending_csv(rows, max_rows=2, max_bytes=1 << 20)
    assert attached == 2
    parsed = list(csv.reader(io.StringIO(data.decode())))
    assert parsed[0] == columns
    assert parsed[1:] == [[str(rows[n][c]) for c in columns] for n in range(2)]
    assert csv_title("wide", 2, 3) == "wide: 2 of 3 offending rows (1 left out)"
    assert csv_title("wide", 3, 3) == "wide: 3 offending rows"


def test_the_csv_tells_null_from_an_empty_text_as_postgresql_does() -> None:
    """Both were an empty field: a NULL read back as a text left empty. As PostgreSQL's
    COPY writes CSV, NULL is an empty field and an empty text `""`."""
    rows: list[dict[str, Any]] = [
        {"a": None, "b": "", "c": "x,y"},
        {"a": 'say "hi"', "b": "two\nlines", "c": " padded "},
    ]
    data, _ = offending_csv(rows, max_rows=10, max_bytes=1 << 20)
    assert data == b'a,b,c\n,"","x,y"\n"say ""hi""","two\nlines", padded \n'
    assert list(csv.reader(io.StringIO(data.decode()))) == [
        ["a", "b", "c"],
        ["", "", "x,y"],
        ['say "hi"', "two\nlines", " padded "],
    ]


def test_a_text_value_a_spreadsheet_would_run_is_written_as_text() -> None:
    """=HYPERLINK(…) in a row went into the CSV as is: opened in a spreadsheet, it ran."""
    rows = [{"=cmd": '=HYPERLINK("http://x")', "n": -5, "t": "-12.50", "d": "-1 days"}]
    data, _ = offending_csv(rows, max_rows=10, max_bytes=1 << 20)
    assert list(csv.reader(io.StringIO(data.decode()))) == [
        ["'=cmd", "n", "t", "d"],
        ['\'=HYPERLINK("http://x")', "-5", "-12.50", "'-1 days"],  # numbers stay numbers
    ]


def test_the_csv_stops_at_its_byte_cap_and_the_title_says_why() -> None:
    rows = [{"id": n, "note": "x" * 100} for n in range(50)]
    data, attached = offending_csv(rows, max_rows=1000, max_bytes=1024)
    assert len(data) <= 1024
    assert attached == len(data.decode().splitlines()) - 1 == 9
    why = left_out_because(len(rows), attached, 1000, 1024)
    assert csv_title("big", attached, 5000, why) == (
        "big: 9 of 5,000 offending rows (4,991 left out: the file stops at 1,024 bytes "
        "(slack.csv_max_bytes))"
    )
    assert left_out_because(20, 20, 1000, 1 << 20) == (
        "a run keeps whole rows only for its sample (the header's `sample:`), within "
        "limits.sample_bytes"
    )
    assert left_out_because(5000, 1000, 1000, 1 << 30) == (
        "the file stops at 1,000 rows (slack.csv_max_rows)"
    )


def test_only_exact_mentions_pass_through_and_everything_else_is_escaped() -> None:
    view = IncidentView(
        1,
        "x",
        "violation",
        owner="<@U123> <!channel> <http://evil|click>",
        acknowledged="👀 Acknowledged by <@U999> at 2026-01-01 00:00 UTC",
        opened_at=NOW,
    )
    text = json.dumps(root_message(view, NOW).blocks, ensure_ascii=False)
    assert "<@U123> &lt;!channel&gt; &lt;http://evil|click&gt;" in text
    assert "Acknowledged by <@U999> at" in text
    assert "<!channel>" not in text
    # The fallback text, read as mrkdwn where blocks cannot show (notifications), escapes
    # the invariant's name too: it comes from a file name, which can hold `<!channel>`.
    named = dataclasses.replace(view, invariant="<!channel>/<http://evil|x>", count=2)
    assert root_message(named, NOW).text == (
        "🟠 WARNING · &lt;!channel&gt;/&lt;http://evil|x&gt; violated: 2 offending rows"
    )


def test_a_message_names_its_database_once_there_are_named_targets() -> None:
    def shown(target: str, kind: str) -> str:
        view = IncidentView(7, "billing/bad", kind, count=2, target=target)
        return json.dumps(root_message(view, NOW).blocks, ensure_ascii=False)

    for kind in ("violation", "cannot_evaluate", "invalid_file"):
        assert "database billing" in shown("billing", kind)
        assert "database default" not in shown("default", kind)
        assert "*Database*" not in shown("default", kind)
    assert "*Database*\\nbilling" in shown("billing", "violation")


def test_a_closed_root_no_longer_says_the_trouble_is_still_there() -> None:
    """An operator's review: "✅ FILE FIXED" over "The invariant file no longer validates …
    the new one will not run until it is fixed". Every kind's closed root says what is true
    now, and what the trouble said is kept as such."""
    opened = NOW - timedelta(minutes=4)
    fixed = root_message(
        IncidentView(
            3,
            "refunds",
            "invalid_file",
            opened_at=opened,
            resolved_at=NOW,
            detail="function pg_sleep() is VOLATILE",
        ),
        NOW,
    )
    texts = [b["text"]["text"] for b in fixed.blocks if b["type"] == "section"]
    assert texts == [
        "The invariant file validates again, and its current version runs.",
        "*It said:* ```function pg_sleep() is VOLATILE```",
    ]
    for kind in ("cannot_evaluate", "replica_stale", "target_unreachable", "quarantined"):
        view = IncidentView(4, "refunds", kind, opened_at=opened, resolved_at=NOW)
        said = " ".join(
            b["text"]["text"] for b in root_message(view, NOW).blocks if b["type"] == "section"
        )
        assert "again" in said or "lifted" in said, (kind, said)
        assert "not being evaluated" not in said and "is not scheduled" not in said, kind


def test_a_long_change_reply_keeps_its_gone_rows_whatever_the_new_ones_take() -> None:
    """From the message-truth review: 20 new keys of 100 `<` each (escaped, 400 characters
    apiece) filled the section, and the reply lost its "no longer offend" part entirely,
    cut mid-entity with no "and N more"."""
    appeared = [json.dumps(["<" * 100 + str(n)]) for n in range(20)]
    payload = {
        "changes": 1,
        "count": 20,
        "appeared": appeared,
        "gone": ['["plain-gone"]'],
        "complete": True,
    }
    text = changes_message(payload, VIEW).blocks[0]["text"]["text"]
    assert len(text) <= SECTION_LIMIT
    assert text.endswith('➖ 1 row no longer offends: `["plain-gone"]`')
    assert "➕ 20 new offending rows: " in text
    listed = text.count("…#")  # each new key is cut to 80 characters, with a digest
    assert 0 < listed < 20 and f"and {20 - listed} more" in text
    assert "&lt…" not in text and "&l…" not in text  # never cut inside an entity


def test_keys_and_cells_that_differ_never_show_alike() -> None:
    """A backtick shown as a quote, a cut at a fixed width and a bidi override shown raw:
    keys `a`b` and `a'b`, two long keys differing at the end, and a reversed key looked
    alike, or looked like something else."""
    keys = [
        '["a`b"]',
        '["a\'b"]',
        json.dumps(["x" * 100 + "END1"]),
        json.dumps(["x" * 100 + "END2"]),
    ]
    shown = reply_message("keys_appeared", {"keys": keys, "count": 4}, VIEW).blocks[0]["text"][
        "text"
    ]
    items = shown.split(": ", 1)[1].split(", ")
    assert len(set(items)) == 4
    assert items[0] == '`["a\\u0060b"]`' and items[1] == '`["a\'b"]`'
    rtl = reply_message("keys_gone", {"keys": ['["ab\u202ecd"]'], "count": 1}, VIEW)
    assert "\u202e" not in rtl.blocks[0]["text"]["text"]
    assert '`["ab\\u202ecd"]`' in rtl.blocks[0]["text"]["text"]
    table = rows_table(
        ["v"], [{"v": "a`b"}, {"v": "a'b"}, {"v": "y" * 30 + "1"}, {"v": "y" * 30 + "2"}], 4
    )
    lines = table.strip("`").splitlines()[1:]
    assert len(set(lines)) == 4 and "a'b" in lines and '"a\\u0060b"' in lines
