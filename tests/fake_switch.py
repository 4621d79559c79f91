"""A dead man's switch (healthchecks.io's protocol) as a real HTTP server on 127.0.0.1:
it records the paths it is pinged on."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Pings:
    """Records the paths it is pinged on."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        pings = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                pings.paths.append(self.path)
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"OK")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/ping/abc-123"


@pytest.fixture
def pings() -> Iterator[Pings]:
    found = Pings()
    yield found
    found.server.shutdown()
