"""A TCP proxy in front of the test server that a test can freeze: nothing more passes
either way, and a new connection is accepted but never answered. A paused VM, or a network
that drops packets without closing anything, looks the same from the client."""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class FreezingProxy:
    """Forwards 127.0.0.1:`port` to `host`:`upstream` (a socket directory when `host` is a
    path); use as a context manager."""

    def __init__(self, host: str, upstream: int) -> None:
        self._upstream = (host, upstream)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._thawed = threading.Event()  # set while bytes may pass
        self._thawed.set()
        self._lock = threading.Lock()  # guards _sockets
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def freeze(self) -> None:
        self._thawed.clear()

    def thaw(self) -> None:
        self._thawed.set()

    def __enter__(self) -> FreezingProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._thawed.set()  # the pumps see their sockets closed and end

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                server = self._connect()
            except OSError:
                return  # closed
            with self._lock:
                self._sockets += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _connect(self) -> socket.socket:
        host, port = self._upstream
        if host.startswith("/"):  # libpq's socket directory (the throwaway server's)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(f"{host}/.s.PGSQL.{port}")
            return server
        server = socket.create_connection(self._upstream, timeout=10)
        server.settimeout(None)
        return server

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self._thawed.wait()  # frozen: held here, neither sent nor refused
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
