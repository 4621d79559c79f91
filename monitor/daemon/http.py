"""The daemon's HTTP listener: /healthz, /readyz, /metrics, POST /slack/actions, and the
status page (monitor/web/page.py) when the daemon mounts it.

Served by waitress, a small, well-kept WSGI server that bounds what a client can cost: the
request line and headers (16 KiB), the body (1 MiB; a missing, negative or non-numeric
Content-Length is a 400, a larger body a 413, before the application sees it), the open
connections (512), the time an idle client may hold one (10 s) and the time one request may
take to arrive (10 s: BoundedChannel), and the worker threads (4, and one more that serves
only /healthz: Lanes). Every answer has a body, and every failure a line in the structured
log. A flood of connections from many addresses is for the proxy in front to bound.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from waitress import create_server
from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer
from waitress.task import ThreadedTaskDispatcher

from monitor.config import parse_listen
from monitor.text import printable
from monitor.web.page import Reply

log = logging.getLogger("invmon.http")

PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TEXT = "text/plain; charset=utf-8"
MAX_BODY = 1 << 20
MAX_HEADERS = 16 * 1024
MAX_CONNECTIONS = 512  # idle connections cost a socket, not a thread
IDLE_SECONDS = 10
REQUEST_SECONDS = 10  # from a request's first byte to its last
THREADS = 4
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


@dataclass(frozen=True)
class Probe:
    """A check behind an endpoint: None when healthy, else the reason it is not."""

    check: Callable[[], str | None]
    # Said under "ok" when healthy but not entirely (one target of several down).
    note: Callable[[], str | None] = lambda: None


# (method, path, query string, headers) -> a Reply, or None for a path it does not serve.
Page = Callable[[str, str, str, Mapping[str, str]], Reply | None]


@dataclass(frozen=True)
class Routes:
    healthz: Probe
    readyz: Probe
    metrics: Callable[[], bytes]
    # POST /slack/actions: (body, headers) -> (status, text); None when not configured.
    slack_actions: Callable[[bytes, Mapping[str, str]], tuple[int, str]] | None = None
    page: Page | None = None  # the status page; never consulted for the paths above


def _headers(environ: Mapping[str, Any]) -> dict[str, str]:
    """The request's headers by their usual names (X-Slack-Signature...)."""
    found = {
        key[5:].replace("_", "-").title(): str(value)
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    if environ.get("CONTENT_TYPE"):
        found["Content-Type"] = str(environ["CONTENT_TYPE"])
    return found


class Application:
    """The WSGI application: routes to answers; never an unanswered request."""

    def __init__(self, routes: Routes) -> None:
        self.routes = routes

    def __call__(self, environ: Mapping[str, Any], start: StartResponse) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD", ""))
        path = str(environ.get("PATH_INFO", ""))
        extra: tuple[tuple[str, str], ...] = ()
        try:
            reply = self.page(method, path, environ)
            if reply is not None:
                status, body, kind, extra = (
                    reply.status,
                    reply.body,
                    reply.content_type,
                    reply.headers,
                )
            else:
                status, body, kind = self.answer(method, path, environ)
        except Exception:  # a bug behind a route: answer, log, and keep serving
            log.exception("HTTP %s %s failed", method, printable(path[:200]))
            status, body, kind, extra = 500, b"internal error\n", TEXT, ()
        start(
            f"{status} {REASONS.get(status, 'Error')}",
            [("Content-Type", kind), ("Content-Length", str(len(body))), *extra],
        )
        return [body]

    def page(self, method: str, path: str, environ: Mapping[str, Any]) -> Reply | None:
        if self.routes.page is None or path in ("/healthz", "/readyz", "/metrics"):
            return None
        query = str(environ.get("QUERY_STRING", ""))
        return self.routes.page(method, path, query, _headers(environ))

    def answer(self, method: str, path: str, environ: Mapping[str, Any]) -> tuple[int, bytes, str]:
        if path in ("/healthz", "/readyz", "/metrics") and method not in ("GET", "HEAD"):
            return 405, b"use GET\n", TEXT
        if path == "/metrics":
            return 200, self.routes.metrics(), PROMETHEUS_TYPE
        if path in ("/healthz", "/readyz"):
            probe = self.routes.healthz if path == "/healthz" else self.routes.readyz
            try:
                problem = probe.check()
                note = None if problem else probe.note()
            except Exception as exc:  # a probe must answer, whatever broke
                problem, note = f"probe failed: {exc}", None
            body = problem or ("ok" + (f"\n{note}" if note else ""))
            return (503 if problem else 200), (body + "\n").encode(), TEXT
        if path == "/slack/actions" and self.routes.slack_actions is not None:
            if method != "POST":
                return 405, b"use POST\n", TEXT
            # waitress has already refused a body over MAX_BODY or a bad Content-Length;
            # this read is bounded anyway.
            body = environ["wsgi.input"].read(MAX_BODY + 1)
            if len(body) > MAX_BODY:
                return 413, b"too large\n", TEXT
            status, text = self.routes.slack_actions(body, _headers(environ))
            return status, (text + "\n").encode(), TEXT
        return 404, b"not found\n", TEXT


class QueueDepth:
    """Stands in for waitress's queue logger, which says "Task queue depth is N" at every
    request that waits for a worker thread: 55,000 lines in two 15-second page loads. The
    deepest queue is said at most once a minute instead."""

    EVERY = 60.0  # seconds between two lines

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()  # guards _deepest and _said_at (worker threads call)
        self._deepest = 0
        self._said_at: float | None = None

    def warning(self, message: str, depth: int, *args: object) -> None:
        now = self._clock()
        with self._lock:
            self._deepest = max(self._deepest, int(depth))
            due = self._said_at is None or now - self._said_at >= self.EVERY
            if not due:
                return
            deepest, self._deepest, self._said_at = self._deepest, 0, now
        log.warning(
            "requests waited for a listener thread: up to %d in the queue (said at most once a "
            "minute)",
            deepest,
        )


class Lanes:
    """waitress's queue of requests for its worker threads, as two: /healthz has a thread
    of its own, and everything else shares THREADS.

    With one queue, /healthz waited in line behind whatever was before it: page builds and
    the requests the page turns away, /readyz connecting to each target, Slack actions.
    While 8 clients fetched pages (as bench/page.py does), /healthz's p99 was 87 ms, and
    the wait in that queue alone had a p99 of 37 ms; a supervisor that times the probe out
    restarts a daemon that is only busy. The lane answers from the same check, so a stalled
    daemon still says so.

    Given to waitress in place of its own dispatcher (create_server's `_dispatcher`; waitress
    is pinned below 4). waitress calls add_task from its loop, with the channel's
    requests_lock held, once the channel's next request is complete: that request is the
    one the task serves."""

    def __init__(self, threads: int) -> None:
        self.health = ThreadedTaskDispatcher()
        self.health.set_thread_count(1)  # the check is in memory: it never blocks
        self.rest = ThreadedTaskDispatcher()
        self.rest.set_thread_count(threads)
        self.queue_depth = QueueDepth()
        for dispatcher in (self.health, self.rest):
            dispatcher.queue_logger = self.queue_depth  # waitress reads it from the instance

    def add_task(self, task: Any) -> None:
        requests = getattr(task, "requests", None)
        path = getattr(requests[0], "path", None) if requests else None
        (self.health if path == "/healthz" else self.rest).add_task(task)

    def set_thread_count(self, count: int) -> None:
        self.rest.set_thread_count(count)

    def shutdown(self, cancel_pending: bool = True, timeout: float = 5) -> bool:
        cancelled = bool(self.rest.shutdown(cancel_pending, timeout))
        return bool(self.health.shutdown(cancel_pending, timeout)) or cancelled


class BoundedChannel(HTTPChannel):  # type: ignore[misc]
    """waitress's connection, with a bound on how long one request may take to arrive.

    waitress closes a connection only after IDLE_SECONDS without a byte, and every byte
    counts: a client sending one byte every few seconds kept its connection as long as it
    liked (16 KiB of headers, one byte each 8 s, is 40 hours), and 520 such clients held
    every one of MAX_CONNECTIONS, so /healthz went unanswered. A request still arriving
    REQUEST_SECONDS after its first byte closes the connection. Runs on waitress's loop
    thread (received), as the rest of the channel's reading does."""

    _timed: object = None  # the partial request being timed (waitress's parser object)
    _since = 0.0  # when its first byte came (monotonic)

    def received(self, data: bytes) -> bool:
        now = time.monotonic()
        timed = self.request is not None and self.request is self._timed
        if timed and now - self._since > REQUEST_SECONDS:
            self.will_close = True  # waitress's loop closes it on its next turn
            return False
        done = bool(super().received(data))
        if self.request is None:
            self._timed = None
        elif self.request is not self._timed:
            self._timed, self._since = self.request, now
        return done


class CannotListen(Exception):
    """http.listen could not be bound (a port in use, an address not on this host)."""


class Listener:
    def __init__(self, listen: str, routes: Routes) -> None:
        host, port = parse_listen(listen)
        sockets: dict[int, Any] = {}  # waitress's map of its sockets: its servers, then channels
        try:
            self._server = self._create(routes, sockets, host, port)
        except OSError as exc:
            raise CannotListen(
                f"cannot listen on http.listen {listen}: {exc.strerror or exc}"
            ) from exc
        # One server per listening socket (a name can resolve to several); none has accepted
        # a connection yet (that happens in run), and each makes its connections from
        # `channel_class`, which create_server does not take.
        for server in sockets.values():
            if isinstance(server, BaseWSGIServer):
                server.channel_class = BoundedChannel
        self._thread = threading.Thread(target=self._server.run, name="invmon-http", daemon=True)

    @staticmethod
    def _create(routes: Routes, sockets: dict[int, Any], host: str, port: int) -> Any:
        return create_server(
            Application(routes),
            map=sockets,
            _dispatcher=Lanes(THREADS),
            host=host,
            port=port,
            threads=THREADS,
            connection_limit=MAX_CONNECTIONS,
            channel_timeout=IDLE_SECONDS,
            cleanup_interval=2,
            max_request_header_size=MAX_HEADERS,
            max_request_body_size=MAX_BODY,
            ident="invmon",
            expose_tracebacks=False,
            asyncore_use_poll=True,
        )

    @property
    def address(self) -> str:
        host, port = self._server.effective_host, self._server.effective_port
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.close()
        self._thread.join(5)
