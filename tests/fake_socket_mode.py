"""A local stand-in for Slack's Socket Mode server: a real websocket server on 127.0.0.1
speaking the envelope protocol (hello, envelopes, acks by envelope_id, disconnect)."""

from __future__ import annotations

import json
import queue
import threading
import uuid
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve


class FakeSocketMode:
    def __init__(self) -> None:
        self.connections = 0
        self._open = 0  # sessions not ended yet
        self.acks: list[str] = []
        self._outbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._server = serve(self._session, "127.0.0.1", 0)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.socket.getsockname()[:2]
        return f"ws://{host}:{port}/link"

    def __enter__(self) -> FakeSocketMode:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._outbox.put(None)
        self._server.shutdown()

    def send_interactive(self, payload: dict[str, Any]) -> str:
        envelope_id = str(uuid.uuid4())
        self._outbox.put(
            {
                "envelope_id": envelope_id,
                "type": "interactive",
                "payload": payload,
                "accepts_response_payload": False,
            }
        )
        return envelope_id

    def disconnect(self) -> None:
        """Ask the client to reconnect, as Slack does every few hours."""
        self._outbox.put({"type": "disconnect", "reason": "refresh_requested"})

    def open_connections(self) -> int:
        with self._lock:
            return self._open

    def _session(self, websocket: ServerConnection) -> None:
        with self._lock:
            self.connections += 1
            self._open += 1
        try:
            self._serve(websocket)
        finally:
            with self._lock:
                self._open -= 1

    def _serve(self, websocket: ServerConnection) -> None:
        websocket.send(
            json.dumps(
                {"type": "hello", "num_connections": 1, "connection_info": {"app_id": "AFAKE"}}
            )
        )
        while True:
            try:
                message = self._outbox.get(timeout=0.05)
            except queue.Empty:
                message = {}
            if message is None:
                return
            try:
                if message:
                    websocket.send(json.dumps(message))
                    if message.get("type") == "disconnect":
                        websocket.close()
                        return
                while True:
                    answer = websocket.recv(timeout=0.01)
                    data = json.loads(answer)
                    if "envelope_id" in data:
                        with self._lock:
                            self.acks.append(data["envelope_id"])
            except TimeoutError:
                continue
            except ConnectionClosed:
                return
