"""The status page behind the real listener (waitress) on a real state store (SQLite and
PostgreSQL): what the store holds is what the page shows; access is enforced; hostile
paths and queries get a status, never a traceback; and /healthz stays fast while the page
is hammered."""

from __future__ import annotations

import base64
import re
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from email.message import Message
from pathlib import Path

import pytest
from helpers import invariant

from monitor.clock import stamp
from monitor.config import HttpConfig
from monitor.daemon.http import Listener, Probe, Routes
from monitor.execution.results import RunResult
from monitor.execution.rows import offending_key
from monitor.invariants.loader import Invariant
from monitor.store.acks import Action
from monitor.store.context import IncidentContext
from monitor.store.state import StateStore
from monitor.store.storage import Tx
from monitor.web import reads
from monitor.web.page import CACHE_SECONDS, StatusPage
from monitor.web.reads import read_history

START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
TOKEN = "a-page-token-for-tests"


class Ticks:
    """The page cache's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def expire(self) -> None:
        self.now += CACHE_SECONDS + 0.1


def get(
    url: str, headers: Mapping[str, str] | None = None, method: str = "GET"
) -> tuple[int, str, Message]:
    """(status, body, headers); the headers are looked up regardless of case."""
    request = urllib.request.Request(url, headers=dict(headers or {}), method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode(), response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), error.headers


def serve(
    store: StateStore,
    loaded: Mapping[str, Invariant],
    listen: str = "127.0.0.1:0",
    token: str | None = None,
    clock: Callable[[], datetime] = lambda: START + timedelta(hours=1),
    ticks: Callable[[], float] = time.monotonic,
) -> Listener:
    http = HttpConfig(listen=listen, page_token=token)
    page = StatusPage(store, lambda: loaded, http, clock, ticks)
    routes = Routes(
        healthz=Probe(lambda: None),
        readyz=Probe(lambda: None),
        metrics=lambda: b"",
        page=page,
    )
    listener = Listener(listen, routes)
    listener.start()
    return listener


def url_of(listener: Listener) -> str:
    host, port = listener.address.rsplit(":", 1)
    host = "127.0.0.1" if host == "0.0.0.0" else host
    return f"http://{host}:{port}"


def record(store: StateStore, name: str, ids: list[int], at: datetime) -> None:
    rows: list[dict[str, object]] = [{"id": i, "note": f"item {i}"} for i in ids]
    result = RunResult(
        name,
        "violated" if ids else "ok",
        len(ids),
        columns=["id", "note"],
        rows=rows,
        started_at=at,
        duration_ms=7.0,
        keys={offending_key(r, ["id"]): r for r in rows},
        replica_lag=0.0,
    )
    context = IncidentContext(severity="critical", description="No item is bad.", owner="@shop")
    store.record_run(name, result, at, context=context)


@pytest.fixture
def served(store: StateStore) -> Iterator[tuple[str, StateStore, Ticks]]:
    ticks = Ticks()
    loaded = {"bad_items": invariant("bad_items", "SELECT id, note FROM items WHERE bad")}
    listener = serve(store, loaded, ticks=ticks)
    yield url_of(listener), store, ticks
    listener.stop()


def test_the_page_shows_the_stores_runs_incidents_and_acknowledgements(
    served: tuple[str, StateStore, Ticks],
) -> None:
    url, store, ticks = served
    status, body, _ = get(f"{url}/")
    assert status == 200 and "Not run yet" in body

    record(store, "bad_items", [1, 2], START)
    record(store, "bad_items", [1, 2, 3], START + timedelta(minutes=15))
    [opened] = store.open_incidents()
    store.apply_action(
        opened.id, Action("ack", "cli:ana", "ana"), START + timedelta(minutes=20), "cli"
    )

    status, body, _ = get(f"{url}/")
    assert status == 200 and "Not run yet" in body  # the cached copy, until it expires
    ticks.expire()
    status, body, headers = get(f"{url}/")
    assert status == 200
    assert "Content-Security-Policy" in headers and headers["Cache-Control"] == "no-store"
    assert 'data-status="violated"' in body and '<td class="num count">3</td>' in body
    assert f'<a href="/incidents/{opened.id}">#{opened.id}</a>' in body
    assert 'Acknowledged by <span class="who">ana (command line)</span>, until resolved' in body
    assert 'aria-label="Offending rows over the last 2 runs: 2 at first, 3 now, at most 3."' in body

    status, detail, _ = get(f"{url}/invariants/bad_items")
    assert status == 200
    assert "All 3 offending rows." in detail
    assert detail.count("<td>item ") == 3
    assert '<span class="sql-kw">SELECT</span>' in detail

    status, timeline, _ = get(f"{url}/incidents/{opened.id}")
    assert status == 200
    assert "Opened (2 offending rows in total): [1], [2]" in timeline
    assert "1 new offending row (3 offending rows in total): [3]" in timeline
    assert "Acknowledged by ana (command line), until resolved" in timeline

    record(store, "bad_items", [], START + timedelta(minutes=30))
    ticks.expire()
    status, body, _ = get(f"{url}/")
    assert 'data-status="ok"' in body and "none open" in body
    status, timeline, _ = get(f"{url}/incidents/{opened.id}")
    assert "Resolved after 30m: the query returns no rows" in timeline


def chart_texts(body: str, variant: str) -> list[str]:
    """The visible labels of the page's chart drawn for `variant` ("wide" or "narrow")."""
    svg = re.search(rf'<svg class="chart chart-{variant}".*?</svg>', body, re.S)
    assert svg is not None, f"no {variant} chart"
    return re.findall(r'<text class="chart-text"[^>]*>([^<]*)</text>', svg.group(0))


def test_the_detail_chart_shows_the_window_the_reader_chose_placed_by_time(
    served: tuple[str, StateStore, Ticks],
) -> None:
    url, store, _ = served
    now = START + timedelta(hours=1)  # the page's clock (serve)
    record(store, "bad_items", [1, 2], now - timedelta(days=3))
    record(store, "bad_items", [], now - timedelta(days=3) + timedelta(minutes=15))
    record(store, "bad_items", [5], now - timedelta(minutes=30))

    status, week, _ = get(f"{url}/invariants/bad_items?window=7d")
    assert status == 200
    assert (
        'aria-label="Offending rows over the last 7 days: 3 runs, 2 at first, 1 now, at most 2."'
        in week
    )
    # The count scale (2 and 0), then a date at each midnight of the week (UTC).
    assert chart_texts(week, "wide") == [
        "2", "0", "Nov 24", "Nov 25", "Nov 26", "Nov 27", "Nov 28", "Nov 29", "Nov 30"
    ]  # fmt: skip
    assert chart_texts(week, "narrow") == ["2", "0", "Nov 25", "Nov 27", "Nov 29"]
    # Placed by time: 3 days back is 4/7 along the 615-px plot from x=17 (369.5, the middle
    # of its 3-px slice), at the top (its slice's peak, 2: the run 15 minutes later held);
    # 30 minutes back is at the right end (630.5), halfway up (1 row). First the headline's
    # sparkline of the last runs, then the chart drawn wide and narrow.
    paths = re.findall(r'<path class="line line-violated" d="([^"]*)"/>', week)
    assert paths == ["M3,3 L60,25 L117,14", "M369.5,8 L630.5,91", "M198.5,8 L330.5,81"]
    assert 'aria-current="page">7 days</a>' in week

    status, day, _ = get(f"{url}/invariants/bad_items?window=24h")
    assert status == 200
    assert (
        'aria-label="Offending rows over the last 24 hours: 1 run, 1 at first, 1 now, at most 1."'
        in day
    )
    assert chart_texts(day, "wide")[:4] == ["1", "0", "12:00", "15:00"]
    assert "Nov 27" not in day  # nothing of 3 days ago

    status, bad, _ = get(f"{url}/invariants/bad_items?window=1y")
    assert status == 200
    assert (
        "The window asked for is not one this page offers (24 hours, 7 days, 30 days): "
        "the last 24 hours are shown."
    ) in bad
    assert "Offending rows over the last 24 hours: 1 run" in bad
    assert get(f"{url}/invariants/bad_items?window=" + "7" * 3000)[0] == 400


def fill_runs(store: StateStore, name: str, counts: list[int | None], end: datetime) -> None:
    """Runs of `name` one a minute up to `end`, oldest first, and a neighbour's between."""

    def fill(tx: Tx) -> None:
        for i, count in enumerate(counts):
            at = stamp(end - timedelta(minutes=len(counts) - 1 - i))
            for who in (name, "neighbour"):
                tx.run(
                    "INSERT INTO runs (invariant, started_at, finished_at, status, count,"
                    " duration_ms, replica_lag_seconds, target) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        who,
                        at,
                        at,
                        "error" if count is None else "violated" if count else "ok",
                        count,
                        5.0,
                        0.0,
                        "default",
                    ),
                )

    store.read(fill)


def test_the_chart_read_is_bounded_and_says_when_the_window_held_more(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reads, "HISTORY_PAGE", 40)  # several transactions per read
    end = START + timedelta(hours=5)
    counts: list[int | None] = [n % 4 if n % 50 else None for n in range(300)]
    fill_runs(store, "busy", counts, end)
    day = end - timedelta(hours=24)

    newest = read_history(store, "busy", day, limit=100)
    assert newest.truncated is True
    assert newest.runs == [
        (end - timedelta(minutes=m), counts[299 - m]) for m in range(100)
    ]  # newest first, and only this invariant's
    assert read_history(store, "busy", day, limit=299).truncated is True
    everything = read_history(store, "busy", day, limit=300)
    assert (len(everything.runs), everything.truncated) == (300, False)
    # A window with fewer runs than the limit stops at the first run older than it.
    recent = read_history(store, "busy", end - timedelta(minutes=30), limit=100)
    assert (len(recent.runs), recent.truncated) == (31, False)
    assert read_history(store, "nobody", day).runs == []


def test_a_wide_listener_refuses_the_page_without_a_token_and_asks_for_it_with_one(
    tmp_path: Path,
) -> None:
    store = StateStore.open(path=tmp_path / "state.db")
    wide = serve(store, {}, listen="0.0.0.0:0")
    try:
        url = url_of(wide)
        status, body, _ = get(f"{url}/")
        assert status == 403 and "http.page_token" in body
        assert get(f"{url}/healthz")[0] == 200
        assert get(f"{url}/invariants/x")[0] == 403
    finally:
        wide.stop()
    guarded = serve(store, {}, listen="0.0.0.0:0", token=TOKEN)
    try:
        url = url_of(guarded)
        status, _, headers = get(f"{url}/")
        assert status == 401
        assert headers.get_all("WWW-Authenticate") == [
            'Basic realm="invmon status", charset="UTF-8"',
            'Bearer realm="invmon status"',
        ]
        assert get(f"{url}/", {"Authorization": "Bearer wrong-token-of-enough-length"})[0] == 401
        assert get(f"{url}/", {"Authorization": f"Bearer {TOKEN}"})[0] == 200
        basic = base64.b64encode(f"me:{TOKEN}".encode()).decode()
        assert get(f"{url}/", {"Authorization": f"Basic {basic}"})[0] == 200
        assert get(f"{url}/static/page.css")[0] == 200  # style and script hold no data
    finally:
        guarded.stop()
        store.close()


def test_hostile_paths_and_queries_get_a_status_and_never_a_traceback(
    served: tuple[str, StateStore, Ticks],
) -> None:
    url, _, _ = served
    cases = {
        "/invariants/": 404,
        "/invariants/%3Cscript%3Ealert(1)%3C%2Fscript%3E": 404,
        "/invariants/%FF%FE%00": 404,
        "/invariants/" + "a" * 600: 404,
        "/incidents/abc": 404,
        "/incidents/-1": 404,
        "/incidents/" + "9" * 30: 404,
        "/incidents/%D9%A3": 404,  # an Arabic-Indic digit is a digit to str.isdigit
        "/incidents/424242": 404,
        "/static/../state.db": 404,
        "/?q=" + "x" * 3000: 400,
        "/?" + "&".join(f"f{i}=1" for i in range(40)): 400,
    }
    answered = {path: get(url + path) for path in cases}
    assert {path: a[0] for path, a in answered.items()} == cases
    for _, body, _ in answered.values():
        assert "Traceback" not in body and "<script>alert" not in body
    assert get(f"{url}/", method="POST")[0] == 405
    assert get(f"{url}/?status=%3Cb%3E&q=%3Cscript%3E")[0] == 200


def test_healthz_stays_fast_while_the_page_is_hammered(tmp_path: Path) -> None:
    store = StateStore.open(path=tmp_path / "state.db")
    names = [f"team{i % 7}/check_{i:03d}" for i in range(150)]

    def fill(tx: object) -> None:
        for n, name in enumerate(names):
            for k in range(30):
                at = stamp(START + timedelta(minutes=k))
                tx.run(  # type: ignore[attr-defined]
                    "INSERT INTO runs (invariant, started_at, finished_at, status, count,"
                    " duration_ms, replica_lag_seconds, target) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        name,
                        at,
                        at,
                        "violated" if (n + k) % 3 else "ok",
                        (n + k) % 3,
                        5.0,
                        0.0,
                        "default",
                    ),
                )
            tx.run(  # type: ignore[attr-defined]
                "INSERT INTO invariant_state (invariant, last_run_id, updated_at)"
                " VALUES (?, (SELECT max(id) FROM runs WHERE invariant = ?), ?)",
                (name, name, stamp(START)),
            )

    store.read(fill)
    loaded = {name: invariant(name, "SELECT 1 WHERE false") for name in names}
    listener = serve(store, loaded)
    url = url_of(listener)
    stop = threading.Event()
    served: list[int] = []
    queries = ["", "?status=violated", "?owner=x", "?q=team3", "?severity=warning", "?q=check_1"]

    def hammer(n: int) -> None:
        while not stop.is_set():
            status, _, _ = get(url + "/" + queries[(n + len(served)) % len(queries)])
            served.append(status)

    try:
        quiet = [timed(lambda: get(f"{url}/healthz")) for _ in range(20)]
        threads = [threading.Thread(target=hammer, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        loaded_latency = [timed(lambda: get(f"{url}/healthz")) for _ in range(200)]
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        listener.stop()
        store.close()
    figures = (
        f"/healthz quiet: median {statistics.median(quiet) * 1000:.1f} ms; while 8 clients "
        f"fetched / ({len(served)} pages, {served.count(200)} ok, {served.count(503)} busy): "
        f"median {statistics.median(loaded_latency) * 1000:.1f} ms, first "
        f"{loaded_latency[0] * 1000:.1f} ms (every page cold), "
        f"p95 {sorted(loaded_latency)[189] * 1000:.1f} ms, max {max(loaded_latency) * 1000:.1f} ms"
    )
    print(figures)
    assert set(served) <= {200, 503} and served.count(200) > 0
    assert max(loaded_latency) < 1.0, figures


def timed(call: Callable[[], tuple[int, str, Message]]) -> float:
    started = time.monotonic()
    status, _, _ = call()
    assert status == 200
    return time.monotonic() - started
