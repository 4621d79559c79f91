"""/readyz names every target that cannot be evaluated and says why for each: unreachable,
or stale (a real streaming standby with replay paused, so every run of it is `stale`),
beside a target that works (issue 27, §3). One evaluable target keeps /readyz 200; none
makes it 503, a stale one counting as one that cannot be evaluated, as an unreachable one."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from builders import build_daemon, daemon_config
from helpers import wait_for

from monitor.daemon.daemon import Daemon
from monitor.execution.results import RunResult
from monitor.store.state import StateStore

if TYPE_CHECKING:
    from standby import StandbyPair

STALE = re.compile(r"replica lag \d+s exceeds max_replica_lag 3s")


def stale_run(daemon: Daemon, name: str) -> RunResult:
    return wait_for(
        lambda: r if (r := daemon.evaluate(name)) and r.status == "stale" else None,
        20,
        f"a stale run of {name}",
    )


def test_readyz_names_the_stale_target_and_the_unreachable_one_saying_which(
    standby_pair: StandbyPair, tmp_path: Path, database: str
) -> None:
    table = f"items_{uuid.uuid4().hex[:8]}"
    for dsn in (standby_pair.primary_dsn, database):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, bad bool NOT NULL)")
            conn.execute(f"INSERT INTO {table} VALUES (1, true)")
    standby_pair.wait_caught_up()
    folder = tmp_path / "invariants"
    for target in ("payments", "billing", "jobs"):
        (folder / target).mkdir(parents=True)
        (folder / target / "bad.sql").write_text(
            f"-- description: nothing is bad\n-- key: [id]\nSELECT id FROM {table} WHERE bad\n"
        )

    def daemon_for(targets: dict[str, object], state: str) -> Daemon:
        config = daemon_config(folder, targets=targets)
        daemon = build_daemon(config, None, StateStore.open(path=tmp_path / state))
        daemon.reload()
        return daemon

    payments = {"dsn": standby_pair.standby_dsn, "max_replica_lag": "3s"}
    daemon = daemon_for(
        {
            "payments": payments,
            "billing": {"dsn": database, "max_replica_lag": "3s"},
            "jobs": {"dsn": "host=127.0.0.1 port=1 dbname=x", "connect_timeout": "1s"},
        },
        "three.db",
    )
    alone: Daemon | None = None
    try:
        routes = daemon.probes.routes()
        down = daemon.databases["jobs"].runner.probe()
        assert down is not None
        assert routes.readyz.check() is None
        before = str(routes.readyz.note()).splitlines()
        assert before[0] == f"not evaluating: jobs (unreachable: {down})"  # payments is fresh

        standby_pair.pause_replay()
        with standby_pair.primary() as conn:
            conn.execute(f"UPDATE {table} SET bad = false")
        stale_run(daemon, "payments/bad")
        billing = daemon.evaluate("billing/bad")
        assert billing is not None and (billing.status, billing.count) == ("violated", 1)

        ready, note = routes.readyz.check(), str(routes.readyz.note())
        stale = daemon.databases["payments"].gate.stale()
        assert stale is not None and STALE.fullmatch(stale), stale
        assert ready is None  # billing is evaluated
        lines = note.splitlines()
        assert lines[0] == f"not evaluating: jobs (unreachable: {down}); payments (stale: {stale})"
        allowed = "runs as role postgres, which is a superuser (allowed: allow_privileged_role)"
        assert lines[1:] == before[1:] == [f"target {t} {allowed}" for t in ("payments", "billing")]

        # The stale target alone: nothing can be evaluated, so /readyz is not ready.
        alone = daemon_for({"payments": payments}, "alone.db")
        stale_run(alone, "payments/bad")
        lone = alone.probes.routes().readyz
        problem = lone.check()
        assert problem is not None and problem.startswith("no target can be evaluated: payments (")
        [why] = re.findall(r"payments \(stale: (.*)\)$", problem)
        assert STALE.fullmatch(why), problem
        assert problem == f"no target can be evaluated: payments (stale: {why})"
    finally:
        standby_pair.resume_replay()
        for opened in (daemon, alone):
            if opened is not None:
                opened.databases.close()
                opened.store.close()


@contextlib.contextmanager
def silent_listener() -> Iterator[tuple[int, Callable[[], int]]]:
    """A port that accepts connections and never answers (libpq waits for the server's
    reply), and how many it holds; on leaving, it hangs up on every one."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    lock = threading.Lock()  # guards `held`: the accepting thread adds, the test reads
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with lock:
                held.append(conn)

    def holding() -> int:
        with lock:
            return len(held)

    acceptor = threading.Thread(target=accept, name="test-stalled-server", daemon=True)
    acceptor.start()
    try:
        yield server.getsockname()[1], holding
    finally:
        stop.set()
        with lock:
            for conn in held:
                conn.close()  # every probe waiting on one ends now
        acceptor.join(10)
        server.close()


def test_readyz_asks_every_target_at_once_not_one_after_another(tmp_path: Path) -> None:
    """Each probe is bounded; one after another, a few stalled targets added theirs up,
    past what a readiness probe waits. Three targets point at a listener that accepts and
    never answers: all three must be waiting at once."""
    with silent_listener() as (port, holding):
        folder = tmp_path / "invariants"
        targets: dict[str, object] = {}
        for name in ("a", "b", "c"):
            (folder / name).mkdir(parents=True)
            (folder / name / "x.sql").write_text(
                "-- description: x holds\nSELECT 1 AS id WHERE false\n"
            )
            targets[name] = {
                "dsn": f"host=127.0.0.1 port={port} dbname=x",
                "connect_timeout": "60s",
            }
        daemon = build_daemon(
            daemon_config(folder, targets=targets), None, StateStore.open(path=tmp_path / "s.db")
        )
        answers: list[str | None] = []
        asking = threading.Thread(
            target=lambda: answers.append(daemon.databases.readiness()), name="test-readyz"
        )
        try:
            asking.start()
            wait_for(lambda: holding() >= 3, 30, "all three probes waiting at once")
            asking.join(30)  # each waits READY_WAIT (3 s), their connect timeout is 60 s
            assert not asking.is_alive()
        finally:
            daemon.databases.close()
    [answer] = answers
    assert answer is not None and answer.startswith("no target can be evaluated: ")
    assert answer.count("unreachable: no answer within 3s") == 3, answer


def test_a_silent_target_beside_a_working_one_leaves_readyz_ready_and_says_which(
    tmp_path: Path, database: str
) -> None:
    """A target that accepts and never answers held /readyz for its connect timeout (10 s
    by default), past the shipped readinessProbe's 5 s: the probe failed without its
    reason, and the daemon, which could evaluate the other target, was taken out of
    service. Now /readyz answers within READY_WAIT, ready, naming the silent one."""
    with silent_listener() as (port, _):
        folder = tmp_path / "invariants"
        for name in ("works", "silent"):
            (folder / name).mkdir(parents=True)
            (folder / name / "x.sql").write_text(
                "-- description: x holds\nSELECT 1 AS id WHERE false\n"
            )
        targets = {
            "works": {"dsn": database, "allow_privileged_role": True},
            "silent": {"dsn": f"host=127.0.0.1 port={port} dbname=x", "connect_timeout": "60s"},
        }
        daemon = build_daemon(
            daemon_config(folder, targets=targets), None, StateStore.open(path=tmp_path / "s.db")
        )
        readyz = daemon.probes.routes().readyz
        answers: list[tuple[str | None, str | None]] = []
        asking = threading.Thread(
            target=lambda: answers.append((readyz.check(), readyz.note())), name="test-readyz"
        )
        try:
            asking.start()
            asking.join(30)
            assert not asking.is_alive()
        finally:
            daemon.databases.close()
    [(ready, note)] = answers
    assert ready is None
    assert note == (
        "not evaluating: silent (unreachable: no answer within 3s (connecting may take up to "
        "database.connect_timeout, 1m))"
    )
