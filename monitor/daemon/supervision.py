"""What ends a wedged `invmon run`, from inside and from outside.

From outside: systemd's service watchdog (`Type=notify`, `WatchdogSec=`). The daemon says
READY=1 once it runs, STOPPING=1 when it stops, and WATCHDOG=1 every half of the interval
systemd gives it (`WATCHDOG_USEC`), but only while every part of it moves (liveness.py).
When a thread wedges the pings stop and systemd kills and restarts the process. The
protocol is one datagram on the socket named by NOTIFY_SOCKET (sd_notify(3)); it is
written here in a few lines rather than taken from a library, since the protocol is stable
and documented and the small libraries for it are no longer kept.

From inside, for supervisors that only restart a process that exits (a shell loop,
compose's `restart:`, a plain `invmon run`): a part stalled for twice its bound and at
least `EXIT_AFTER` more is a wedge that will not clear. The process then writes every
thread's stack to stderr, logs which part stalled, and exits 70, so it is restarted
instead of looking alive. The same guard bounds a stop: a stop still unfinished at its
deadline exits the same way, naming what it was waiting for.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping

from monitor.daemon.liveness import Liveness

log = logging.getLogger("invmon.daemon")

EXIT_WEDGED = 70  # EX_SOFTWARE: the process stopped doing its job
EXIT_AFTER = 60.0  # seconds past twice a part's bound before the process ends itself
TURN = 1.0  # seconds between two looks
# Seconds between two looks past which the process itself did not run (SIGSTOP, a paused
# VM, a suspended host): no part could move meanwhile, so none is judged for it.
PAUSED_AFTER = 10.0
REPORT_WITHIN = 10.0  # seconds the wedge report may take before the process exits without it


class Notifier:
    """sd_notify(3) without libsystemd: a no-op when NOTIFY_SOCKET is not set."""

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        address = environ.get("NOTIFY_SOCKET", "")
        # An abstract socket is written with a leading '@' and means a leading NUL.
        self._address = "\0" + address[1:] if address.startswith("@") else address
        watchdog_usec = environ.get("WATCHDOG_USEC", "")
        pid = environ.get("WATCHDOG_PID", "")
        for_us = not pid or pid == str(os.getpid())
        self.watchdog: float | None = (
            int(watchdog_usec) / 1_000_000 if watchdog_usec.isdigit() and for_us else None
        )

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def notify(self, *lines: str) -> bool:
        if not self._address:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.settimeout(1.0)
                s.sendto("\n".join(lines).encode(), self._address)
            return True
        except OSError as exc:  # systemd gone or the socket wrong: said, never fatal
            log.warning("could not notify the service manager: %s", exc.strerror or exc)
            return False


class Supervisor:
    """One daemon thread: pings the service manager while every part moves, and ends the
    process when a part is wedged or a stop overran its deadline."""

    def __init__(
        self,
        liveness: Liveness,
        notifier: Notifier,
        exit_process: Callable[[int], object] = os._exit,
        monotonic: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
        exit_after: float = EXIT_AFTER,
        report_within: float = REPORT_WITHIN,
    ) -> None:
        self.liveness = liveness
        self.exit_after = exit_after
        self.report_within = report_within
        self.notifier = notifier
        self._exit = exit_process
        self._monotonic = monotonic
        self._cpu = cpu  # the process's CPU time: it does not move while the process is stopped
        # Set once by `stop_by`, read by the thread: a float is assigned atomically.
        self._stop_deadline: float | None = None
        self._waiting_for: Callable[[], str] = lambda: "the stop"
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_ping = float("-inf")
        # The thread's own; no other reads them: the last look's clock and CPU time.
        self._last_turn: float | None = None
        self._last_cpu = 0.0

    def start(self) -> None:
        self.notifier.notify("READY=1", "STATUS=running")
        self._thread = threading.Thread(target=self._loop, name="invmon-supervisor", daemon=True)
        self._thread.start()

    def stop_by(self, seconds: float, waiting_for: Callable[[], str]) -> None:
        """The stop has begun and must be over within `seconds`; `waiting_for` says what
        it is waiting for at any moment, for the line logged if it is not."""
        self._waiting_for = waiting_for
        self._stop_deadline = self._monotonic() + seconds
        self.notifier.notify("STOPPING=1", f"STATUS=stopping (at most {seconds:.0f}s)")
        self._wake.set()

    def turn(self) -> None:
        """One look: ping when healthy; end the process when wedged or overdue. Whoever
        waits for a look (Liveness.resumed) is told once it is over."""
        try:
            self._look()
        finally:
            self.liveness.looked()

    def _look(self) -> None:
        now, cpu = self._monotonic(), self._cpu()
        gap = 0.0 if self._last_turn is None else now - self._last_turn
        spent = cpu - self._last_cpu
        self._last_turn, self._last_cpu = now, cpu
        if gap > PAUSED_AFTER and spent < gap / 2:
            # The process did not run (it used almost no CPU in the gap): every part's clock
            # ran on while none could move, so each gets its bound afresh. A gap the process
            # spent busy is no pause: a thread holding the interpreter (a regex, a C call)
            # starved this look, and the stall is judged as ever. This turn judges and pings
            # nothing.
            self.liveness.shift(gap)
            if self._stop_deadline is not None:
                self._stop_deadline += gap
            log.warning(
                "the process did not run for %.0fs (stopped, or its host suspended): every "
                "part's bound starts again now",
                gap,
            )
            return
        if self._stop_deadline is not None:
            # Stopping: its own deadline is the bound now, and the pings go on until then.
            if now > self._stop_deadline:
                self._end(f"the stop did not finish in time: still {self._waiting_for()}")
                return
        else:
            stalls = self.liveness.stalls()
            for stall in stalls:
                if stall.seconds > 2 * stall.bound + self.exit_after:
                    self._end(f"a part of the daemon is wedged: {stall}")
                    return
            if stalls:
                return  # no ping: the service manager's watchdog restarts a stalled process
        interval = self.notifier.watchdog
        due = interval is not None and now - self._last_ping >= interval / 2
        if due and self.notifier.notify("WATCHDOG=1"):
            self._last_ping = now

    def _end(self, why: str) -> None:
        # The report is written to stderr and the log, and either can block: a stalled log
        # pipe leaves a writer holding its handler's lock, and the report would wait on it
        # forever, so the process would never exit. A timer exits anyway after
        # `report_within`; os._exit takes no lock.
        backstop = threading.Timer(self.report_within, self._exit, (EXIT_WEDGED,))
        backstop.name, backstop.daemon = "invmon-exit-backstop", True
        backstop.start()
        self._report(why)
        backstop.cancel()
        self._exit(EXIT_WEDGED)

    def _report(self, why: str) -> None:
        log.critical("%s; exiting %d so that the supervisor restarts invmon", why, EXIT_WEDGED)
        sys.stderr.write("invmon: the stack of every thread, for the report:\n")
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        for handler in logging.getLogger().handlers:
            handler.flush()

    def _loop(self) -> None:
        while True:
            self._wake.wait(TURN)
            self._wake.clear()
            try:
                self.turn()
            except Exception as exc:  # the guard must outlive whatever it guards
                log.error("the supervisor's turn failed: %s: %s", type(exc).__name__, exc)
