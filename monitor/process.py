"""The process and its signals: SIGTERM and SIGINT stop the daemon, SIGHUP reloads it.

CPython runs a Python signal handler on the main thread only, and only once that thread
runs bytecode again; the kernel may hand a process signal to any thread (a scheduler
worker, the HTTP server). A main thread blocked in a system call would then sleep through
it. So the main loop waits on the pipe given to `signal.set_wakeup_fd`, to which the C-level
handler writes the signal's number on whichever thread it runs, reads the signals from that
pipe itself, and also wakes up every `poll` seconds: no signal depends on one mechanism.

Nothing here takes a lock in a signal handler (the SIGKILL soak once caught a handler that
deadlocked on an Event's lock the main thread held).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RELOAD_SIGNALS = (signal.SIGHUP,)
_NUDGE = b"\0"  # written by request_stop/request_reload: "look at the flags"


class SignalLoop:
    """Runs on the main thread until asked to stop; calls `on_reload` there on SIGHUP."""

    def __init__(self, on_reload: Callable[[], object], poll: float = 1.0) -> None:
        self._on_reload = on_reload
        self._poll = poll
        self._stop = False
        self._reload = False
        self._write_fd: int | None = None

    @property
    def stopping(self) -> bool:
        return self._stop

    def request_stop(self) -> None:
        """From any thread or a signal handler: sets a flag and writes one byte."""
        self._stop = True
        self._nudge()

    def request_reload(self) -> None:
        self._reload = True
        self._nudge()

    def _nudge(self) -> None:
        if self._write_fd is not None:
            with contextlib.suppress(OSError):  # full or closed: the loop is awake anyway
                os.write(self._write_fd, _NUDGE)

    def run(self, install_signals: bool = True) -> None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        self._write_fd = write_fd
        previous_fd = None
        previous_handlers = {}
        try:
            if install_signals:
                previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
                for sig in (*STOP_SIGNALS, *RELOAD_SIGNALS):
                    previous_handlers[sig] = signal.signal(sig, self._on_signal)
            while not self._stop:
                select.select([read_fd], [], [], self._poll)
                for number in self._drain(read_fd):
                    if number in STOP_SIGNALS:
                        self._stop = True
                    elif number in RELOAD_SIGNALS:
                        self._reload = True
                if self._reload and not self._stop:
                    self._reload = False
                    self._on_reload()
        finally:
            if install_signals:
                signal.set_wakeup_fd(-1 if previous_fd is None else previous_fd)
                for sig, handler in previous_handlers.items():
                    signal.signal(sig, handler)
            self._write_fd = None
            os.close(read_fd)
            os.close(write_fd)

    def _on_signal(self, number: int, _frame: object) -> None:
        # Only flags: the wakeup fd has already woken the loop, which reads the number too.
        if number in STOP_SIGNALS:
            self._stop = True
        else:
            self._reload = True

    @staticmethod
    def _drain(read_fd: int) -> list[int]:
        numbers: list[int] = []
        while True:
            try:
                chunk = os.read(read_fd, 512)
            except BlockingIOError:
                return numbers
            if not chunk:
                return numbers
            numbers += [b for b in chunk if b]
