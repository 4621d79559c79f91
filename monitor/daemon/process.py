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
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RELOAD_SIGNALS = (signal.SIGHUP,)
_NUDGE = b"\0"  # written by request_stop/request_reload: "look at the flags"
T = TypeVar("T")


class Stopped(Exception):
    """A stop signal arrived while the process was still starting."""

    def __init__(self, doing: str) -> None:
        super().__init__(f"stopped by a signal while {doing}")
        self.doing = doing


class SignalLoop:
    """Installed first (`installed`), before anything slow, so that a signal during
    start-up is a request like any other; then runs on the main thread until asked to stop
    (`run`), calling `on_reload` there on SIGHUP. Start-up work that may take long runs
    through `wait_for`, which a stop signal interrupts."""

    def __init__(self, poll: float = 1.0) -> None:
        self._poll = poll
        self._stop = False
        self._reload = False
        self._read_fd: int | None = None
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

    @contextlib.contextmanager
    def installed(self, handle_signals: bool = True) -> Iterator[SignalLoop]:
        """The wakeup pipe, and with `handle_signals` (on the main thread) the handlers;
        put back as they were on leaving. Entered again while installed, it does nothing."""
        if self._read_fd is not None:
            yield self
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        self._read_fd, self._write_fd = read_fd, write_fd
        previous_fd = None
        previous_handlers = {}
        try:
            if handle_signals:
                previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
                for sig in (*STOP_SIGNALS, *RELOAD_SIGNALS):
                    previous_handlers[sig] = signal.signal(sig, self._on_signal)
            yield self
        finally:
            if handle_signals:
                signal.set_wakeup_fd(-1 if previous_fd is None else previous_fd)
                for sig, handler in previous_handlers.items():
                    signal.signal(sig, handler)
            self._read_fd = self._write_fd = None
            os.close(read_fd)
            os.close(write_fd)

    def run(self, on_reload: Callable[[], object], handle_signals: bool = True) -> None:
        """Until a stop: each SIGHUP (or `request_reload`) calls `on_reload` here."""
        with self.installed(handle_signals):
            while not self._stop:
                self._wait(self._poll)
                if self._reload and not self._stop:
                    self._reload = False
                    on_reload()

    def wait_for(self, work: Callable[[], T], doing: str) -> T:
        """`work()` on a thread of its own, this thread waiting for it or for a stop
        signal, whichever comes first (Stopped). `work` must bound itself in time; a
        reload asked for meanwhile waits for `run`."""
        done = threading.Event()
        outcome: list[T] = []
        failure: list[BaseException] = []

        def body() -> None:
            try:
                outcome.append(work())
            except BaseException as exc:  # handed to the waiting thread, raised there
                failure.append(exc)
            finally:
                done.set()
                self._nudge()

        threading.Thread(target=body, name=f"invmon-start ({doing})", daemon=True).start()
        with self.installed(handle_signals=False):
            while not done.is_set():
                if self._stop:
                    raise Stopped(doing)
                self._wait(self._poll)
        if failure:
            raise failure[0]
        return outcome[0]

    def _wait(self, seconds: float) -> None:
        assert self._read_fd is not None
        select.select([self._read_fd], [], [], seconds)
        for number in self._drain(self._read_fd):
            if number in STOP_SIGNALS:
                self._stop = True
            elif number in RELOAD_SIGNALS:
                self._reload = True

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
