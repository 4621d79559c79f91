"""The daemon's HTTP listener: /healthz, /readyz and /metrics.

Stdlib http.server in a thread: three read-only endpoints do not justify a web framework.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger("invmon.http")

PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Probe:
    """A check behind an endpoint: None when healthy, else the reason it is not."""

    check: Callable[[], str | None]


@dataclass(frozen=True)
class Routes:
    healthz: Probe
    readyz: Probe
    metrics: Callable[[], bytes]
    # POST /slack/actions: (body, headers) -> (status, text); None when not configured.
    slack_actions: Callable[[bytes, Mapping[str, str]], tuple[int, str]] | None = None


MAX_BODY = 1 << 20


def _handler(routes: Routes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "invmon"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, routes.metrics(), PROMETHEUS_TYPE)
            elif path in ("/healthz", "/readyz"):
                probe = routes.healthz if path == "/healthz" else routes.readyz
                try:
                    problem = probe.check()
                except Exception as exc:  # a probe must answer, whatever broke
                    problem = f"probe failed: {exc}"
                body = (problem or "ok") + "\n"
                self._send(503 if problem else 200, body.encode(), "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found\n", "text/plain; charset=utf-8")

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("Content-Length") or 0)
            if path != "/slack/actions" or routes.slack_actions is None:
                self._send(404, b"not found\n", "text/plain; charset=utf-8")
                return
            if length > MAX_BODY:
                self._send(413, b"too large\n", "text/plain; charset=utf-8")
                return
            body = self.rfile.read(length)
            status, text = routes.slack_actions(body, dict(self.headers.items()))
            self._send(status, text.encode(), "text/plain; charset=utf-8")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("http " + format, *args)

    return Handler


class Listener:
    def __init__(self, listen: str, routes: Routes) -> None:
        host, _, port = listen.rpartition(":")
        self._server = ThreadingHTTPServer((host.strip("[]"), int(port)), _handler(routes))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="invmon-http", daemon=True
        )

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
