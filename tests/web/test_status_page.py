"""The status page's pure core: view models from records, and the HTML rendered from them.
Hostile invariant names and row values are escaped; filters, the chart and the SQL colouring
are exact; access is decided in constant time. No server, no store: plain data in, text out."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.config import ConfigError, HttpConfig, parse_config
from monitor.store.context import IncidentContext
from monitor.store.records import Incident, Run, StoredEvent
from monitor.web.access import Access, presented
from monitor.web.chart import Bucket, downsample, sparkline
from monitor.web.detail_views import history_view, incident_page, invariant_page
from monitor.web.filters import (
    MAX_QUERY,
    Filters,
    QueryTooLong,
    Window,
    parse_filters,
    parse_window,
)
from monitor.web.formats import InvariantInfo, slack_link
from monitor.web.reads import (
    ActionRecord,
    History,
    IncidentRecords,
    InvariantRecords,
    Overview,
    RunPoint,
    SlackPost,
)
from monitor.web.render import environment, render
from monitor.web.sqlhighlight import highlight
from monitor.web.views import overview_page, rows_of

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HOSTILE = "<script>alert('x')</script>&\"q\""
HOSTILE_VALUE = '<img src=x onerror="alert(1)">'


def info(name: str, **fields: object) -> InvariantInfo:
    values: dict[str, object] = {
        "name": name,
        "description": f"{name} holds",
        "severity": "warning",
        "owner": "@team",
        "runbook": None,
        "tags": (),
        "target": "default",
        "schedule": "every 15m",
        "timeout": "30s",
        "key": ("id",),
        "sql": "SELECT id FROM t WHERE bad",
        "for_runs": 1,
    }
    values.update(fields)
    return InvariantInfo(**values)  # type: ignore[arg-type]


def point(name: str, n: int, count: int | None, status: str = "violated") -> RunPoint:
    at = NOW - timedelta(minutes=60 - n)
    return RunPoint(
        n, name, at, at + timedelta(seconds=1), status, count, 12.5, 0.0, None, "default"
    )


def latest(
    p: RunPoint, columns: list[str] | None = None, rows: list[dict[str, object]] | None = None
) -> Run:
    return Run(
        p.id,
        p.invariant,
        p.started_at,
        p.finished_at,
        p.status,  # type: ignore[arg-type]
        p.count,
        p.error,
        p.replica_lag_seconds,
        p.duration_ms,
        columns or [],
        rows or [],
        p.target,
    )


def incident(name: str, number: int = 7, **fields: object) -> Incident:
    values: dict[str, object] = {
        "id": number,
        "invariant": name,
        "kind": "violation",
        "opened_at": NOW - timedelta(hours=2, minutes=5),
        "resolved_at": None,
        "first_count": 2,
        "last_count": 3,
        "last_seen_at": NOW,
        "context": IncidentContext(severity="critical", description=f"{name} holds", owner="@o"),
    }
    values.update(fields)
    return Incident(**values)  # type: ignore[arg-type]


def overview_of(points: dict[str, list[RunPoint]]) -> Overview:
    return Overview(
        {n: p[-1] for n, p in points.items()},
        {n: [r.count for r in p] for n, p in points.items()},
        [],
    )


class Tags(HTMLParser):
    """Every element and attribute of a document, to prove nothing hostile became markup."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def elements(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = Tags()
    parser.feed(html)
    return parser.tags


def assert_inert(html: str) -> None:
    tags = elements(html)
    scripts = [attrs.get("src") for tag, attrs in tags if tag == "script"]
    assert scripts == ["/static/page.js"]
    assert [t for t, _ in tags if t == "img"] == []
    handlers = [(t, k) for t, attrs in tags for k in attrs if k.startswith("on")]
    assert handlers == []


def test_hostile_names_and_row_values_are_escaped_on_every_page() -> None:
    name = f"evil/{HOSTILE}"
    infos = {name: info(name, description=HOSTILE, owner=HOSTILE, tags=(HOSTILE,))}
    points = {name: [point(name, 1, 2), point(name, 2, 1)]}
    run = latest(points[name][-1], ["id", HOSTILE], [{"id": 1, HOSTILE: HOSTILE_VALUE}])
    counts = {name: [p.count for p in points[name]]}
    overview = Overview({name: points[name][-1]}, counts, [incident(name)])

    front = render(
        "overview.html",
        page=overview_page(infos, overview, Filters(), NOW, 30),
        generated="now",
        refresh_seconds=30,
    )
    assert HOSTILE not in front and HOSTILE_VALUE not in front
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&#34;q&#34;" in front
    # The link is percent-encoded: the name cannot end the attribute or start a query.
    assert 'href="/invariants/evil/%3Cscript%3Ealert%28%27x%27%29%3C/script%3E%26%22q%22"' in front
    assert_inert(front)

    records = InvariantRecords([points[name][-1]], run, [incident(name)], {})
    history = History([(p.started_at, p.count) for p in points[name]], truncated=True)
    detail = invariant_page(name, infos[name], records, overview, NOW, 30, history)
    assert detail is not None
    page = render("invariant.html", page=detail, generated="now", refresh_seconds=30)
    assert HOSTILE not in page and HOSTILE_VALUE not in page
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in page
    assert_inert(page)

    event = StoredEvent(1, 7, name, "opened", NOW, {"count": 1, "keys": [HOSTILE_VALUE]})
    action = ActionRecord(7, "ack", HOSTILE, HOSTILE, "until_resolved", "cli", NOW)
    one = IncidentRecords(
        incident(name), [event], [action], [(HOSTILE_VALUE, NOW, NOW, None)], 1, []
    )
    timeline = render(
        "incident.html", page=incident_page(one, NOW, 30), generated="now", refresh_seconds=30
    )
    assert HOSTILE not in timeline and HOSTILE_VALUE not in timeline
    assert_inert(timeline)


def test_rows_are_worst_first_each_status_with_a_word_and_an_icon_removed_files_left_out() -> None:
    infos = {
        n: info(n, severity=s)
        for n, s in [
            ("a_ok", "critical"),
            ("b_warn", "warning"),
            ("c_crit", "critical"),
            ("d_error", "info"),
            ("e_new", "info"),
            ("f_big", "warning"),
        ]
    }
    points = {
        "a_ok": [point("a_ok", 1, 0, "ok")],
        "b_warn": [point("b_warn", 1, 2)],
        "c_crit": [point("c_crit", 1, 1)],
        "d_error": [point("d_error", 1, None, "error")],
        "f_big": [point("f_big", 1, 40)],
    }
    points["removed_long_ago"] = [point("removed_long_ago", 1, 5)]
    points["invmon-self/runs_stuck"] = [point("invmon-self/runs_stuck", 1, 0, "ok")]
    rows = rows_of(infos, overview_of(points), NOW)
    assert [(r.name, r.status.word, r.status.icon) for r in rows] == [
        ("c_crit", "Violated", "✖"),
        ("f_big", "Violated", "✖"),
        ("b_warn", "Violated", "✖"),
        ("d_error", "Error", "⚠"),
        ("e_new", "Not run yet", "…"),
        ("a_ok", "Holds", "✔"),
        ("invmon-self/runs_stuck", "Holds", "✔"),
    ]


def test_filters_select_by_status_severity_owner_tag_target_and_search() -> None:
    infos = {
        "pay/refunds": info(
            "pay/refunds",
            severity="critical",
            owner="@pay",
            tags=("money",),
            target="payments",
            description="Refunds settle once",
        ),
        "jobs/leases": info("jobs/leases", owner="@platform", tags=("queue",), target="jobs"),
        "pay/ledger": info("pay/ledger", owner="@pay", tags=("money", "ledger"), target="payments"),
    }
    points = {
        "pay/refunds": [point("pay/refunds", 1, 2)],
        "jobs/leases": [point("jobs/leases", 1, 0, "ok")],
        "pay/ledger": [point("pay/ledger", 1, 0, "ok")],
    }
    overview = overview_of(points)

    def shown(query: str) -> set[str]:
        page = overview_page(infos, overview, parse_filters(query), NOW, 30)
        return {r.name for r in page.rows}

    assert shown("") == set(infos)
    assert shown("status=violated") == {"pay/refunds"}
    assert shown("severity=critical") == {"pay/refunds"}
    assert shown("owner=%40pay") == {"pay/refunds", "pay/ledger"}
    assert shown("tag=ledger") == {"pay/ledger"}
    assert shown("target=jobs") == {"jobs/leases"}
    assert shown("q=SETTLE+refunds") == {"pay/refunds"}
    assert shown("status=ok&owner=%40pay") == {"pay/ledger"}
    # A choice nobody has selects nothing rather than failing: old bookmarks still open.
    assert shown("status=exploded&severity=%3Cb%3E") == set(infos)
    page = overview_page(infos, overview, parse_filters("owner=%40pay"), NOW, 30)
    assert [(o.value, o.selected) for o in page.filters.owner] == [
        ("", False),
        ("@pay", True),
        ("@platform", False),
    ]
    # The counts above the table are of what is shown, each with its total beside it.
    counted = overview_page(infos, overview, parse_filters("target=jobs"), NOW, 30)
    assert [(s.word, n, of) for s, n, of in counted.counts] == [("Violated", 0, 1), ("Holds", 1, 2)]
    html = render("overview.html", page=counted, generated="now", refresh_seconds=30)
    assert '<span class="n">0</span> <span class="of">of 1</span>' in html
    assert '<span class="n">1</span> <span class="of">of 2</span>' in html
    everything = overview_page(infos, overview, parse_filters(""), NOW, 30)
    assert [(s.word, n, of) for s, n, of in everything.counts] == [
        ("Violated", 1, 1),
        ("Holds", 2, 2),
    ]
    assert 'class="of"' not in render(
        "overview.html", page=everything, generated="now", refresh_seconds=30
    )


def test_a_query_string_past_its_bounds_is_refused_and_values_are_cut() -> None:
    with pytest.raises(QueryTooLong):
        parse_filters("q=" + "a" * MAX_QUERY)
    with pytest.raises(QueryTooLong):
        parse_filters("&".join(f"f{i}=1" for i in range(30)))
    assert parse_filters("q=" + "b" * 500).q == "b" * 200
    assert parse_filters("owner=%00%1b%5B31m%40x").owner == "[31m@x"


def test_the_chart_breaks_at_runs_that_counted_nothing_and_says_so_in_words() -> None:
    chart = sparkline([3, 2, None, 4, 0])
    assert chart is not None
    # Peak 4 at the top (y=3), zero at the bottom (y=25).
    assert [line.d for line in chart.lines] == ["M3,8.5 L31.5,14", "M88.5,3 L117,25"]
    assert [(m.kind, m.x) for m in chart.marks] == [("unknown", 60.0), ("ok", 117.0)]
    assert chart.label == (
        "Offending rows over the last 5 runs: 3 at first, 0 now, at most 4; 1 run counted nothing."
    )
    assert sparkline([]) is None
    flat = sparkline([0, 0])
    assert flat is not None and [line.d for line in flat.lines] == ["M3,25 L117,25"]


class Texts(HTMLParser):
    """The visible text of each SVG <text> element, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []
        self._inside = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._inside = tag == "text"

    def handle_endtag(self, tag: str) -> None:
        self._inside = False

    def handle_data(self, data: str) -> None:
        if self._inside:
            self.texts.append(data)


def shown_texts(svg: str) -> list[str]:
    parser = Texts()
    parser.feed(svg)
    return parser.texts


def spark_svg(counts: list[int | None]) -> str:
    macro = environment().from_string('{% from "macros.html" import spark %}{{ spark(c) }}')
    return macro.render(c=sparkline(counts))


def test_the_sparkline_shows_its_scale_so_a_line_at_7_and_one_at_7000_differ() -> None:
    low, high = sparkline([7, 7, 7]), sparkline([7000, 7000, 7000])
    assert low is not None and high is not None
    assert low.lines == high.lines  # the same flat line at the top...
    # ...said apart by the visible scale beside it: its top value and its 0.
    assert shown_texts(spark_svg([7, 7, 7])) == ["7", "0"]
    assert shown_texts(spark_svg([7000, 7000, 7000])) == ["7,000", "0"]
    assert (low.width, high.width) == (129, 150)  # room for the wider number
    assert shown_texts(spark_svg([0, 0])) == ["0"]
    assert shown_texts(spark_svg([None, None])) == []  # nothing counted: no scale to say
    assert 'aria-label="Offending rows over the last 3 runs: 7,000 at first' in spark_svg(
        [7000, 7000, 7000]
    )


def test_a_sparkline_of_held_stretches_says_how_many_runs_its_points_stand_for() -> None:
    one_each = sparkline([0, 3, 0])
    stretched = sparkline([0, 3, 0], runs=122)
    assert one_each is not None and stretched is not None
    assert one_each.label == "Offending rows over the last 3 runs: 0 at first, 0 now, at most 3."
    assert stretched.label == (
        "Offending rows over the last 122 runs (3 points: runs that held one after another"
        " are one): 0 at first, 0 now, at most 3."
    )
    assert stretched.lines == one_each.lines  # the same drawing, a truer caption


def test_a_sparkline_is_drawn_once_for_the_same_counts() -> None:
    first = sparkline([4, None, 0, 4])
    assert sparkline((4, None, 0, 4)) is first  # kept, not drawn again
    assert sparkline([4, None, 0, 5]) != first
    assert sparkline([4, None, 0, 5]) == sparkline((4, None, 0, 5))


def test_a_holding_run_is_drawn_in_the_ok_colour_and_a_violated_stretch_in_red() -> None:
    chart = sparkline([0, 0, 3, 0, None, 0, 0])
    assert chart is not None
    # x every 19 px from 3; y 25 for 0, 3 for the peak. A segment touching the violated run
    # is violated; the stretches where every run held are ok; the error breaks the line.
    assert [(line.kind, line.d) for line in chart.lines] == [
        ("ok", "M3,25 L22,25"),
        ("violated", "M22,25 L41,3 L60,25"),
        ("ok", "M98,25 L117,25"),
    ]
    assert [(m.kind, m.x, m.y) for m in chart.marks] == [
        ("unknown", 79.0, 26.5),
        ("ok", 117.0, 25.0),
    ]
    holding = sparkline([0, 0, 0])
    assert holding is not None and [line.kind for line in holding.lines] == ["ok"]
    paths = [a["class"] for tag, a in elements(spark_svg([0, 0, 3, 0])) if tag == "path"]
    assert paths == ["line line-ok", "line line-violated"]
    lone = sparkline([None, 5, None, 0])  # a counted run between two that counted nothing
    assert lone is not None and lone.lines == ()
    assert [(m.kind, m.x) for m in lone.marks] == [
        ("unknown", 3.0),
        ("unknown", 79.0),
        ("violated", 41.0),
        ("ok", 117.0),
    ]


DAY = timedelta(days=1)
# Three days before NOW: 4 rows, then holding an hour later; an error two days before NOW;
# holding an hour before NOW.
HISTORY = [
    (NOW - timedelta(hours=1), 0),
    (NOW - 2 * DAY, None),
    (NOW - 3 * DAY + timedelta(hours=1), 0),
    (NOW - 3 * DAY, 4),
]


def test_the_detail_chart_places_runs_by_time_with_a_time_axis_and_a_count_scale() -> None:
    week = history_view(History(HISTORY, truncated=False), parse_window("window=7d"), NOW)
    chart = week.wide
    assert (chart.width, chart.left, chart.right, chart.runs) == (640, 17.0, 632.0, 4)
    # By time, not by index: 3 days back in a 7-day window is 4/7 along the 615-px plot
    # from x=17, 368.4: the middle of its 3-px slice, 369.5; an hour later is one slice on.
    # The error 2 days back (456.4) breaks the line and is marked under it; the last run,
    # an hour back (606.4), stands alone.
    assert [(line.kind, line.d) for line in chart.lines] == [("violated", "M369.5,8 L372.5,174")]
    assert [(m.kind, m.x, m.y) for m in chart.marks] == [
        ("unknown", 456.5, 180.0),
        ("ok", 627.5, 174.0),
    ]
    assert [(t.text, round(x, 1)) for t, x in zip(chart.ticks, chart.grid, strict=True)] == [
        ("Nov 24", 60.9),
        ("Nov 25", 148.8),
        ("Nov 26", 236.6),
        ("Nov 27", 324.5),
        ("Nov 28", 412.4),
        ("Nov 29", 500.2),
        ("Nov 30", 588.1),
    ]
    assert [(s.text, s.y) for s in chart.scale] == [("4", 12.0), ("0", 178.0)]
    assert chart.label == (
        "Offending rows over the last 7 days: 4 runs, 4 at first, 0 now, at most 4; "
        "1 run counted nothing."
    )
    assert [t.text for t in week.narrow.ticks] == ["Nov 25", "Nov 27", "Nov 29"]
    assert [(w.href, w.current) for w in week.windows] == [
        ("?window=24h", False),
        ("?window=7d", True),
        ("?window=30d", False),
    ]

    day = history_view(History(HISTORY, truncated=False), parse_window(""), NOW).wide
    assert day.runs == 1 and day.lines == ()  # the runs of 2 and 3 days ago are outside
    assert [(m.kind, m.x) for m in day.marks] == [("ok", 606.5)]
    assert [t.text for t in day.ticks] == [
        "12:00", "15:00", "18:00", "21:00", "Nov 30", "03:00", "06:00", "09:00", "12:00"
    ]  # fmt: skip
    assert [s.text for s in day.scale] == ["0"]
    assert (
        day.label == "Offending rows over the last 24 hours: 1 run, 0 at first, 0 now, at most 0."
    )


def test_downsampling_keeps_each_slices_peak_and_whether_a_run_counted_nothing() -> None:
    start = NOW - timedelta(hours=4)
    runs = [
        (start, 3),
        (start + timedelta(minutes=10), 9),
        (start + timedelta(minutes=20), None),
        (start + timedelta(hours=2, minutes=5), None),
        (NOW, 0),  # the window's end is in its last slice
        (NOW + timedelta(seconds=1), 99),  # outside the window
        (start - timedelta(seconds=1), 99),
    ]
    assert downsample(runs, start, NOW, 4) == [
        Bucket(3, 9, True),
        Bucket(0, None, False),
        Bucket(1, None, True),
        Bucket(1, 0, False),
    ]


def test_a_window_the_page_does_not_offer_falls_back_to_24_hours_and_says_so() -> None:
    assert parse_window("window=30d") == Window("30d")
    assert parse_window("window=1y") == Window("24h", unknown=True)
    assert parse_window("window=%3Cb%3E") == Window("24h", unknown=True)
    with pytest.raises(QueryTooLong):
        parse_window("window=" + "7" * MAX_QUERY)
    page = history_view(History(HISTORY, truncated=False), parse_window("window=1y"), NOW)
    assert (page.fallback, page.words, page.runs) == (True, "24 hours", 1)


def test_a_window_that_held_more_runs_than_were_read_says_so_and_shades_the_rest() -> None:
    # The newest 2 of the 7 days, one run a minute, as a read that stopped at its limit.
    newest: list[tuple[datetime, int | None]] = [
        (NOW - timedelta(minutes=m), 1) for m in range(60 * 24 * 2)
    ]
    week = history_view(History(newest, truncated=True), parse_window("window=7d"), NOW)
    assert week.truncated == (
        "This window holds more runs than the page reads: the chart shows the newest 2,880, "
        "from 2026-11-28 12:01:00 UTC; older runs of this window are not shown (the shaded "
        "part)."
    )
    # Shaded from the plot's left to where the oldest run read stands, a minute past 5/7.
    assert week.wide.hidden_to is not None and round(week.wide.hidden_to, 1) == 456.3
    assert week.wide.hidden_label is not None
    assert week.wide.hidden_label.text == "older runs not shown"
    assert week.wide.label.endswith("; older runs of this window are not shown.")
    detail = invariant_page(
        "a", info("a"), InvariantRecords([], None, [], {}), overview_of({}), NOW, 30,
        History(newest, truncated=True), parse_window("window=7d"),
    )  # fmt: skip
    assert detail is not None
    html = render("invariant.html", page=detail, generated="now", refresh_seconds=30)
    assert [a["class"] for tag, a in elements(html) if tag == "rect"] == [
        "chart-hidden",
        "chart-hidden",
    ]
    assert "older runs of this window are not shown (the shaded part)." in html


def test_sql_is_coloured_by_postgresqls_scanner_and_the_text_is_kept_exactly() -> None:
    sql = "-- ünïcode -- comment\nSELECT 'it''s -- not a comment', $1, 4.5 /* c */ FROM t"
    spans = highlight(sql)
    assert "".join(s.text for s in spans) == sql
    assert [(s.kind, s.text) for s in spans if s.kind] == [
        ("com", "-- ünïcode -- comment"),
        ("kw", "SELECT"),
        ("str", "'it''s -- not a comment'"),
        ("param", "$1"),
        ("num", "4.5"),
        ("com", "/* c */"),
        ("kw", "FROM"),
    ]
    broken = "SELECT 'unterminated"
    assert "".join(s.text for s in highlight(broken)) == broken


def test_the_token_is_taken_as_bearer_or_basic_password_and_nothing_else() -> None:
    token = "t0ken-of-sixteen-chars"
    basic = base64.b64encode(f"anyone:{token}".encode()).decode()
    assert presented(f"Bearer {token}", token)
    assert presented(f"Basic {basic}", token)
    assert not presented(f"Bearer {token}x", token)
    assert not presented(f"Basic {base64.b64encode(token.encode()).decode()}", token)
    assert not presented("Basic !!!notbase64", token)
    assert not presented(f"Token {token}", token)
    assert not presented("Bearer " + "x" * 5000, token)
    assert not presented(None, token)
    assert Access(local=True, token=None).verdict(None) == "allowed"
    assert Access(local=False, token=None).verdict(f"Bearer {token}") == "refused"
    assert Access(local=True, token=token).verdict(None) == "ask"
    assert Access(local=False, token=token).verdict(f"Bearer {token}") == "allowed"


def test_the_page_token_must_be_long_and_is_never_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"http": {"page_token": "short-secret"}}, "invmon.yaml")
    assert "at least 16 characters" in str(caught.value)
    assert "short-secret" not in str(caught.value)
    assert parse_config({"http": {"page_token": ""}}, "x").http.page_token is None
    assert HttpConfig(listen="127.0.0.1:9187").page_is_local
    assert HttpConfig(listen="[::1]:9187").page_is_local
    assert HttpConfig(listen="localhost:9187").page_is_local
    assert not HttpConfig(listen="0.0.0.0:9187").page_is_local
    assert not HttpConfig(listen="monitor.internal:9187").page_is_local


def test_slack_links_are_made_only_from_ids_slack_returned() -> None:
    def post(channel: str | None, ts: str | None, state: str = "SENT") -> SlackPost:
        return SlackPost("post_root", "opened", state, NOW, channel, ts)

    assert slack_link(post("C0123ABC", "1764500000.001200")) == (
        "https://slack.com/archives/C0123ABC/p1764500000001200"
    )
    assert slack_link(post("C0123ABC", "1764500000.001200", "UNKNOWN")) is None
    assert slack_link(post("javascript:alert(1)//", "1.2")) is None
    assert slack_link(post("C1", '1.2"><b>')) is None


def test_an_incident_shows_who_acknowledged_which_meaning_until_when_and_its_timeline() -> None:
    name = "refunds"
    acked = incident(
        name,
        acked_by="cli:ana",
        acked_by_name="ana",
        acked_at=NOW - timedelta(minutes=30),
        ack_mode="until_new_rows",
        snoozed_until=NOW + timedelta(hours=4),
    )
    events = [
        StoredEvent(
            1, 7, name, "opened", NOW - timedelta(hours=2), {"count": 2, "keys": ["[1]", "[2]"]}
        ),
        StoredEvent(
            2, 7, name, "keys_appeared", NOW - timedelta(hours=1), {"count": 3, "keys": ["[3]"]}
        ),
        StoredEvent(3, 7, name, "resolved", NOW, {"count": 0, "lasted_seconds": 7200}),
    ]
    actions = [
        ActionRecord(
            7, "ack", "cli:ana", "ana", "until_new_rows", "cli", NOW - timedelta(minutes=30)
        )
    ]
    posts = [
        SlackPost(
            "post_root", "opened", "SENT", NOW - timedelta(hours=2), "C1", "1764500000.000100"
        ),
        SlackPost("post_reply", "reminder", "SENT", NOW - timedelta(minutes=10), "C1", "1.2"),
    ]
    page = incident_page(IncidentRecords(acked, events, actions, [], 0, posts), NOW, 30)
    assert page.summary.ack is not None
    assert (page.summary.ack.by, page.summary.ack.meaning, page.summary.ack.snoozed_until) == (
        "ana (command line)",
        "until new rows appear",
        "2026-11-30 16:00 UTC",
    )
    assert [(line.icon, line.text) for line in page.timeline] == [
        ("⚑", "Opened (2 offending rows in total): [1], [2]"),
        ("+", "1 new offending row (3 offending rows in total): [3]"),
        ("☑", "Acknowledged by ana (command line), until new rows appear"),
        ("◷", "Reminder (sent)"),
        ("✔", "Resolved after 2h: the query returns no rows"),
    ]
    assert page.slack_links == [("Slack thread", "https://slack.com/archives/C1/p1764500000000100")]
    assert page.summary.age == "2h 5m"


def test_targets_run_as_a_privileged_role_are_listed_on_the_front_page() -> None:
    note = "target shop runs as a privileged role (superuser), allowed by allow_privileged_role"
    overview = Overview({}, {}, [])
    plain = render(
        "overview.html",
        page=overview_page({}, overview, Filters(), NOW, 30),
        generated="now",
        refresh_seconds=30,
    )
    assert "Database roles" not in plain
    shown = render(
        "overview.html",
        page=overview_page({}, overview, Filters(), NOW, 30, [note, HOSTILE]),
        generated="now",
        refresh_seconds=30,
    )
    assert '<h2 id="roles-h">Database roles</h2>' in shown
    assert f"<li>{note}</li>" in shown
    assert HOSTILE not in shown  # escaped like everything else


RUNBOOKS_WITH_QUOTES = [
    "https://wiki.example.com/ops/carrier's-stuck-shipments",
    'https://wiki.example.com/ops/"quoted"-page?x=1&y=2',
]


@pytest.mark.parametrize("runbook", RUNBOOKS_WITH_QUOTES)
def test_a_runbook_lint_accepts_is_a_link_on_the_page_and_in_slack(runbook: str) -> None:
    """One rule (monitor/links.py): a runbook the header accepts is never hidden later."""
    from alerts.messages import IncidentView, root_message
    from monitor.invariants.header import InvariantHeader

    header = InvariantHeader.model_validate({"description": "x", "runbook": runbook})
    assert header.runbook == runbook
    name = "ops/stuck"
    infos = {name: info(name, runbook=runbook)}
    points = {name: [point(name, 1, 2)]}
    records = InvariantRecords(points[name], None, [], {})
    detail = invariant_page(name, infos[name], records, overview_of(points), NOW, 30)
    assert detail is not None and detail.runbook_href == runbook
    page = render("invariant.html", page=detail, generated="now", refresh_seconds=30)
    links = [a for tag, a in elements(page) if tag == "a" and a.get("href") == runbook]
    assert len(links) == 1  # escaped in the attribute, read back by a parser as the URL
    view = IncidentView(
        incident_id=7,
        invariant=name,
        kind="violation",
        severity="critical",
        description="x",
        owner=None,
        runbook=runbook,
        opened_at=NOW,
        count=2,
        columns=["id"],
        rows=[{"id": 1}],
    )
    assert runbook in str(root_message(view, NOW).blocks)


@pytest.mark.parametrize(
    ("runbook", "why"),
    [
        ("https://wiki.example.com/a|b", "without spaces, control characters, '<', '>' or '|'"),
        ("https://wiki.example.com/a b", "without spaces"),
        ("javascript:alert(1)", "must be an http(s) URL"),
        ("https://wiki.example.com/a<b>", "'<', '>'"),
    ],
)
def test_a_runbook_slack_or_the_page_could_not_show_is_refused_by_lint_saying_why(
    runbook: str, why: str
) -> None:
    from pydantic import ValidationError

    from monitor.invariants.header import InvariantHeader
    from monitor.links import safe_link

    with pytest.raises(ValidationError) as refused:
        InvariantHeader.model_validate({"description": "x", "runbook": runbook})
    assert why in str(refused.value)
    assert safe_link(runbook) is None  # and a stored one is never made a link


def test_without_javascript_the_page_does_not_reload_itself_as_the_manual_says() -> None:
    """The manual says a reload is the reader's: no meta refresh, which axe-core would fail."""
    points = {"a": [point("a", 1, 0, "ok")]}
    front = render(
        "overview.html",
        page=overview_page({"a": info("a")}, overview_of(points), Filters(), NOW, 30),
        generated="now",
        refresh_seconds=30,
    )
    assert [a for tag, a in elements(front) if tag == "meta" and "http-equiv" in a] == []
    manual = (Path(__file__).resolve().parents[2] / "docs" / "status-page.md").read_text()
    assert "page does not reload itself" in manual


def test_keys_are_listed_as_the_database_sorts_them_numbers_as_numbers() -> None:
    name = "refunds"
    keys = ["[12]", "[260]", "[340]", "[3]"]
    events = [StoredEvent(1, 7, name, "opened", NOW, {"count": 4, "keys": keys})]
    stored: list[tuple[str, datetime, datetime, datetime | None]] = [
        (k, NOW, NOW, None) for k in keys
    ]
    stored.append(('["b", null]', NOW, NOW, None))
    stored.append(('["b", "a"]', NOW, NOW, None))
    stored.append(('["12.50"]', NOW, NOW, None))
    page = incident_page(IncidentRecords(incident(name), events, [], stored, 7, []), NOW, 30)
    assert [(line.icon, line.text) for line in page.timeline] == [
        ("⚑", "Opened (4 offending rows in total): [3], [12], [260], [340]")
    ]
    assert [line.key for line in page.keys] == [
        "[3]",
        "[12]",
        '["12.50"]',
        "[260]",
        "[340]",
        '["b", "a"]',
        '["b", null]',
    ]


@given(st.lists(st.integers(-(10**12), 10**12), min_size=1, max_size=30, unique=True))
def test_integer_keys_sort_as_integers(values: list[int]) -> None:
    from monitor.store.key_order import key_order

    keys = [json.dumps([v]) for v in values]
    assert sorted(keys, key=key_order) == [json.dumps([v]) for v in sorted(values)]


def test_invmon_s_own_checks_are_listed_as_critical_as_their_alerts_say() -> None:
    """Slack said "🔴 CRITICAL · invmon-self/runs_stuck" while the page listed every
    invmon-self row as a warning, so filtering the page on critical hid them."""
    at = datetime(2026, 3, 1, 12, tzinfo=UTC)
    held = RunPoint(1, "invmon-self/runs_stuck", at, at, "ok", 0, 1.0, None, None, "default")
    [row] = rows_of({}, Overview({"invmon-self/runs_stuck": held}, {}, []), at)
    assert (row.name, row.severity) == ("invmon-self/runs_stuck", "critical")
