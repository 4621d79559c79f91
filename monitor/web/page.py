"""The status page's routes on the daemon's listener: the thin shell around views.py.

    /                     every invariant, worst first, with filters and search
    /invariants/<name>    one invariant: what it checks, its runs over ?window=24h|7d|30d,
                          its incidents and rows
    /incidents/<id>       one incident's timeline
    /static/page.css|js   the page's own style and script (no CDN: the host may be offline)

Read-only: GET and HEAD only, no form that changes anything. Access is decided by
access.py. /healthz has a listener thread of its own (daemon/http.Lanes); the page shares
the other four with /readyz, /metrics and Slack actions, and must never take them all: a
rendered page is kept for CACHE_SECONDS and served to everyone who asks meanwhile; the
store is read once per CACHE_SECONDS for all pages; at most RENDERERS threads build pages
at once, and a request that finds them busy gets the last copy, or with none, one request
waits (WAIT_SECONDS at most) and the others get a 503 at once: page visitors never hold
more than three of the four threads, so the other routes always find one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources

from monitor.clock import Clock
from monitor.config import HttpConfig
from monitor.invariants.loader import Invariant
from monitor.logs import redact
from monitor.singleflight import SingleFlight
from monitor.store.state import StateStore
from monitor.store.store_health import STORE_ERRORS
from monitor.web.access import REFUSED, Access
from monitor.web.detail_views import incident_page, invariant_page
from monitor.web.filters import Filters, QueryTooLong, Window, parse_filters, parse_window
from monitor.web.formats import InvariantInfo, info_of
from monitor.web.reads import (
    Overview,
    read_history,
    read_incident,
    read_invariant,
    read_overview,
)
from monitor.web.render import environment, render
from monitor.web.views import overview_page

log = logging.getLogger("invmon.page")

HTML = "text/html; charset=utf-8"
CACHE_SECONDS = 2.0
RENDERERS = 2
WAIT_SECONDS = 2.0
MAX_WAITING = 1  # with RENDERERS, fewer than the listener's four threads
MAX_CACHED = 128  # distinct URLs kept (filters make many)
MAX_NAME = 512
# The page loads only its own style and script; nothing may frame it or be sent elsewhere.
SECURITY_HEADERS = (
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
)
TEMPLATES = ("overview.html", "invariant.html", "incident.html", "error.html")
STATIC = {"/static/page.css": "text/css; charset=utf-8", "/static/page.js": "text/javascript"}
TITLES = {
    400: "Bad request",
    401: "Sign in",
    403: "Not served here",
    404: "Not found",
    405: "Read-only",
    503: "Busy",
}


@dataclass(frozen=True)
class Reply:
    """An answer with headers of its own, for the daemon's listener to send as it is."""

    status: int
    body: bytes
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()


# A page is kept by its path and what its query chose (filters on /, the chart's window).
Key = tuple[str, Filters, Window]


class Busy(Exception):
    """The store's read for the page took longer than a visitor waits for it."""


@dataclass(frozen=True)
class Snapshot:
    infos: dict[str, InvariantInfo]
    overview: Overview


def _static(name: str) -> bytes:
    return resources.files("monitor.web").joinpath("static", name).read_bytes()


class StatusPage:
    """`page(method, path, query, headers)`: a Reply for the page's paths, None for others."""

    def __init__(
        self,
        store: StateStore,
        loaded: Callable[[], Mapping[str, Invariant]],
        http: HttpConfig,
        clock: Clock,
        monotonic: Callable[[], float] = time.monotonic,
        roles: Callable[[], list[str]] = list,
    ) -> None:
        self.store = store
        self.roles = roles  # the targets' role notes (databases.role_notes)
        self.loaded = loaded
        self.settle(http)
        self.clock = clock
        self.monotonic = monotonic
        self._static = {path: _static(path.rsplit("/", 1)[1]) for path in STATIC}
        for template in TEMPLATES:  # compiled now, not by the first visitors
            environment().get_template(template)
        # `_lock` guards the two caches and `_waiting`, and is never held across a call;
        # `_reading` makes the store read one at a time, the others waiting for its answer.
        self._lock = threading.Lock()
        self._reading: SingleFlight[Snapshot] = SingleFlight()
        self._budget = threading.BoundedSemaphore(RENDERERS)
        self._pages: OrderedDict[Key, tuple[float, Reply]] = OrderedDict()
        self._snapshot: tuple[float, Snapshot] | None = None
        self._waiting = 0  # requests waiting for a renderer

    def settle(self, http: HttpConfig) -> None:
        """Who may read the page and how often it refreshes: at start, and again when a
        SIGHUP brings a new `http.page_token` or `http.page_refresh` (each one assignment,
        read once per request)."""
        self.access = Access(http.page_is_local, http.page_token)
        self.refresh = int(http.page_refresh.total_seconds())

    @staticmethod
    def handles(path: str) -> bool:
        return path == "/" or path.startswith(("/invariants/", "/incidents/", "/static/"))

    def __call__(
        self, method: str, path: str, query: str, headers: Mapping[str, str]
    ) -> Reply | None:
        if not self.handles(path):
            return None
        if method not in ("GET", "HEAD"):
            return self._error(405, "This page is read-only: use GET.", (("Allow", "GET, HEAD"),))
        if path.startswith("/static/"):
            if path not in STATIC:
                return self._error(404, "No such file.")
            cache = (("Cache-Control", "max-age=300"), ("X-Content-Type-Options", "nosniff"))
            return Reply(200, self._static[path], STATIC[path], cache)
        verdict = self.access.verdict(headers.get("Authorization"))
        if verdict == "refused":
            return self._error(403, REFUSED)
        if verdict == "ask":
            challenge = (
                ("WWW-Authenticate", 'Basic realm="invmon status", charset="UTF-8"'),
                ("WWW-Authenticate", 'Bearer realm="invmon status"'),
            )
            return self._error(401, "This page needs the status page token.", challenge)
        filters, window = Filters(), Window()
        try:
            # Bounded before it becomes a cache key; equivalent queries share one entry.
            if path == "/":
                filters = parse_filters(query)
            elif path.startswith("/invariants/"):
                window = parse_window(query)
        except QueryTooLong as exc:
            return self._error(400, str(exc).capitalize() + ".")
        key = (path, filters, window)
        return self._cached(key, lambda: self._build(key))

    # --- caching ------------------------------------------------------------------------------

    def _cached(self, key: Key, build: Callable[[], Reply]) -> Reply:
        now = self.monotonic()
        with self._lock:
            hit = self._pages.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        if hit is not None:
            # A stale copy exists: rebuild only if a renderer is free right now.
            if not self._budget.acquire(blocking=False):
                return hit[1]
        elif not self._wait_for_budget():
            return self._error(
                503,
                "The page is being built for others; try again in a moment.",
                (("Retry-After", "2"),),
            )
        try:
            with self._lock:
                again = self._pages.get(key)
            if again is not None and again[0] > self.monotonic():
                return again[1]  # built by another thread while this one waited
            reply = build()
            with self._lock:
                self._pages[key] = (self.monotonic() + CACHE_SECONDS, reply)
                self._pages.move_to_end(key)
                while len(self._pages) > MAX_CACHED:
                    self._pages.popitem(last=False)
            return reply
        finally:
            self._budget.release()

    def _wait_for_budget(self) -> bool:
        """A renderer for a page nobody has a copy of: at most MAX_WAITING requests wait for
        one (WAIT_SECONDS at most); the others are answered at once, so page requests never
        hold all of the listener's threads and the other routes always find one free."""
        if self._budget.acquire(blocking=False):
            return True
        with self._lock:
            if self._waiting >= MAX_WAITING:
                return False
            self._waiting += 1
        try:
            return self._budget.acquire(timeout=WAIT_SECONDS)
        finally:
            with self._lock:
                self._waiting -= 1

    def snapshot(self) -> Snapshot:
        """What the daemon runs and the store's overview, read at most once per CACHE_SECONDS."""
        with self._lock:
            held = self._snapshot
        if held is not None and held[0] > self.monotonic():
            return held[1]
        fresh = self._reading.run(self._read_snapshot, WAIT_SECONDS)
        if fresh is None:
            raise Busy
        return fresh

    def _read_snapshot(self) -> Snapshot:
        infos = {name: info_of(inv) for name, inv in self.loaded().items()}
        fresh = Snapshot(infos, read_overview(self.store, infos, self.clock()))
        with self._lock:
            self._snapshot = (self.monotonic() + CACHE_SECONDS, fresh)
        return fresh

    # --- building -------------------------------------------------------------------------

    def _build(self, key: Key) -> Reply:
        path = key[0]
        try:
            return self._page(*key)
        except Busy:
            # The store's read (shared by every page) did not finish in time: a slow or hung
            # store, which "being built for others" hid.
            return self._error(
                503,
                f"The state store did not answer within {WAIT_SECONDS:g} s; try again in a moment.",
                (("Retry-After", "2"),),
            )
        except STORE_ERRORS as exc:  # said once a minute by StoreHealth: one line here
            log.warning(
                "the status page could not be built for %s: the state store cannot be read (%s)",
                path[:200],
                redact(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)),
            )
            return self._error(
                503, "The state store cannot be read now; the daemon's log says why."
            )
        except Exception:  # a bug: its traceback in the log, never shown
            log.exception("the status page could not be built for %s", path[:200])
            return self._error(
                503, "The state store cannot be read now; the daemon's log says why."
            )

    def _page(self, path: str, filters: Filters, window: Window) -> Reply:
        now = self.clock()
        if path == "/":
            snap = self.snapshot()
            view = overview_page(
                snap.infos, snap.overview, filters, now, self.refresh, self.roles()
            )
            return self._html(200, render("overview.html", page=view, **self._chrome(view)))
        if path.startswith("/invariants/"):
            # PATH_INFO carries the raw bytes as latin-1 (PEP 3333): names may be UTF-8.
            raw = path[len("/invariants/") :]
            name = raw.encode("latin-1", errors="replace").decode("utf-8", errors="replace")
            if not name or len(name) > MAX_NAME or not name.isprintable():
                return self._error(404, "No such invariant.")
            snap = self.snapshot()
            records = read_invariant(self.store, name)
            history = read_history(self.store, name, now - window.span)
            found = invariant_page(
                name,
                snap.infos.get(name),
                records,
                snap.overview,
                now,
                self.refresh,
                history,
                window,
            )
            if found is None:
                return self._error(404, f"No invariant named {name!r} has run here.")
            return self._html(200, render("invariant.html", page=found, **self._chrome(found)))
        number = path[len("/incidents/") :]
        if not number.isascii() or not number.isdigit() or len(number) > 18:
            return self._error(404, "No such incident.")
        incident = read_incident(self.store, int(number))
        if incident is None:
            return self._error(404, f"There is no incident #{int(number)}.")
        timeline = incident_page(incident, now, self.refresh)
        return self._html(200, render("incident.html", page=timeline, **self._chrome(timeline)))

    @staticmethod
    def _chrome(view: object) -> dict[str, object]:
        return {
            "generated": getattr(view, "generated", ""),
            "refresh_seconds": getattr(view, "refresh_seconds", 0),
        }

    def _html(self, status: int, text: str, extra: tuple[tuple[str, str], ...] = ()) -> Reply:
        return Reply(status, text.encode(), HTML, SECURITY_HEADERS + extra)

    def _error(self, status: int, message: str, extra: tuple[tuple[str, str], ...] = ()) -> Reply:
        text = render(
            "error.html",
            status=status,
            title=TITLES.get(status, "Error"),
            message=message,
            generated="",
            refresh_seconds=0,
        )
        return self._html(status, text, extra)
