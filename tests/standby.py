"""A real streaming standby for tests: a primary and a hot standby fed by streaming replication.

Built from the PostgreSQL binaries in the `pgserver` wheel (or those of the folder named by
INVMON_STANDBY_PG_BIN, e.g. /usr/lib/postgresql/15/bin, to try another major version):
`initdb` + `pg_ctl` for the primary, `pg_basebackup -R -X stream` for the standby. Both
listen on unix sockets only (`listen_addresses = ''`), each in its own socket folder, in one
temporary folder that is removed at the end.

PostgreSQL refuses to run as root. As root, every server command runs as the system user
`pgserver` (created by pgserver's own helper, as `pgserver.get_server` does), and the
temporary folder is owned by that user; as any other user, commands run as that user.

Use it from a test module with `pytest_plugins = ["standby"]` (this folder is on sys.path
while pytest collects it), then ask for the `standby_pair` fixture. Import `StandbyPair`
for annotations only under TYPE_CHECKING: importing the module before pytest registers it
as a plugin stops pytest from rewriting its asserts (a PytestAssertRewriteWarning).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import wait_for
from psycopg import sql
from psycopg.conninfo import make_conninfo

with warnings.catch_warnings():
    # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless here.
    warnings.simplefilter("ignore")
    from pgserver import _commands as pg_commands
    from pgserver import utils as pg_utils

PGSERVER_BIN = Path(pg_commands.POSTGRES_BIN_PATH)
BIN = Path(os.environ.get("INVMON_STANDBY_PG_BIN") or PGSERVER_BIN)
ADMIN = "postgres"
DATABASE = "postgres"
ROOT_RUN_AS = "pgserver"  # the system user pgserver itself uses when started as root
PRIMARY_PORT = 5432  # unix sockets only: the port just names the socket file
STANDBY_PORT = 5433
START_TIMEOUT_S = 30.0

# Written into the primary's postgresql.conf; pg_basebackup copies it to the standby, which
# then appends its own port and socket folder (a later line wins).
COMMON_CONF = """
listen_addresses = ''
wal_level = replica
max_wal_senders = 4
hot_standby = on
max_connections = 20
shared_buffers = 16MB
# A throwaway cluster: durability buys nothing, and autovacuum would write WAL at random
# moments, which tests about "nothing written for a while" must not see.
fsync = off
autovacuum = off
"""

PG_HBA = """
local   all             all                     trust
local   replication     all                     trust
host    all             all     127.0.0.1/32    trust
host    replication     all     127.0.0.1/32    trust
"""


def _base_folder() -> Path:
    """A fresh temporary folder, short enough for unix socket paths (about 100 bytes) and,
    as root, in a place the unprivileged server user can reach."""
    candidates = [Path(tempfile.gettempdir()), Path("/tmp")]
    for parent in candidates:
        reachable = os.geteuid() != 0 or all(
            folder.stat().st_mode & stat.S_IXOTH for folder in [parent, *parent.parents]
        )
        if reachable and len(str(parent)) <= 40:
            return Path(tempfile.mkdtemp(prefix="invmon-sb-", dir=parent)).resolve()
    raise RuntimeError(f"no usable temporary folder among {candidates}")


class _Cluster:
    """Runs PostgreSQL commands in one base folder, as the right system user."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.run_as: str | None = None
        if os.geteuid() == 0:
            self.run_as = ROOT_RUN_AS
            entry = pg_utils.ensure_user_exists(ROOT_RUN_AS)
            assert entry is not None
            self._uid, self._gid = entry.pw_uid, entry.pw_gid
            if BIN == PGSERVER_BIN:
                # What pgserver.get_server does as root: let that user execute the binaries
                # (a system installation's are executable by everyone already).
                read = stat.S_IRGRP | stat.S_IROTH
                execute = stat.S_IXGRP | stat.S_IXOTH
                pg_utils.ensure_prefix_permissions(BIN)
                pg_utils.ensure_folder_permissions(BIN, read | execute)
                pg_utils.ensure_folder_permissions(BIN.parent / "lib", read)
            os.chown(base, self._uid, self._gid)

    def run(self, program: str, *args: str, timeout: float = START_TIMEOUT_S) -> str:
        """Run a PostgreSQL program; on failure raise with its output."""
        command = [str(BIN / program), *args]
        # Output goes to files, not pipes: `pg_ctl start` leaves the postmaster running, and
        # a pipe it inherited could keep us waiting (pgserver does the same).
        with tempfile.TemporaryFile("w+") as out:
            result = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=self.base,
                user=self.run_as,
                timeout=timeout,
                check=False,
            )
            out.seek(0)
            output = out.read()
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {result.returncode}:\n{output}")
        return output

    def mkdir(self, name: str) -> Path:
        path = self.base / name
        path.mkdir(mode=0o700)
        self.chown(path)
        return path

    def write(self, path: Path, text: str, append: bool = False) -> None:
        with path.open("a" if append else "w") as handle:
            handle.write(text)
        self.chown(path)

    def chown(self, path: Path) -> None:
        if self.run_as is not None:
            os.chown(path, self._uid, self._gid)


@dataclass
class StandbyPair:
    """A running primary and its streaming hot standby."""

    primary_dsn: str
    standby_dsn: str
    _cluster: _Cluster = field(repr=False)
    _primary_data: Path = field(repr=False)
    _primary_log: Path = field(repr=False)

    def primary(self, **kwargs: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(self.primary_dsn, autocommit=True, **kwargs)

    def standby(self, **kwargs: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(self.standby_dsn, autocommit=True, **kwargs)

    def pause_replay(self, deadline_s: float = 10.0) -> None:
        """`pg_wal_replay_pause()` on the standby, then wait until replay has actually
        paused (since PostgreSQL 14 the call only requests it)."""
        with self.standby() as conn:
            conn.execute("SELECT pg_wal_replay_pause()")

            def paused() -> bool:
                row = conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()
                return row is not None and row[0] == "paused"

            wait_for(paused, deadline_s, "WAL replay to pause")

    def resume_replay(self) -> None:
        """`pg_wal_replay_resume()` on the standby."""
        with self.standby() as conn:
            conn.execute("SELECT pg_wal_replay_resume()")

    def wait_caught_up(self, deadline_s: float = 10.0) -> None:
        """Wait until the standby has replayed up to the primary's current WAL position
        (taken once, now); TimeoutError after `deadline_s` seconds."""
        with self.primary() as primary:
            row = primary.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        target = str(row[0])
        with self.standby() as standby:

            def caught_up() -> bool:
                reached = standby.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)
                ).fetchone()
                return reached is not None and reached[0] is True

            wait_for(caught_up, deadline_s, f"the standby to replay up to {target}")

    def configure(self, server: str, name: str, value: str) -> None:
        """`ALTER SYSTEM SET name = value` on "primary" or "standby", reload, and wait until a
        new session shows it (a reload is only a signal). `value` in the form SHOW prints
        ('3s', '10min'), since that is what is waited for."""
        connect = self.primary if server == "primary" else self.standby
        with connect() as conn:
            conn.execute(
                sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
            )
            conn.execute("SELECT pg_reload_conf()")

        def applied() -> bool:
            with connect() as conn:
                row = conn.execute("SELECT current_setting(%s) = %s", (name, value)).fetchone()
            return row is not None and row[0] is True

        wait_for(applied, 10, f"{name} = {value} to be loaded on the {server}")

    def stop_primary(self) -> None:
        """Stop the primary (fast shutdown: its walsender closes the link at once)."""
        self._cluster.run("pg_ctl", "-D", str(self._primary_data), "-m", "fast", "-w", "stop")

    def start_primary(self) -> None:
        _start(self._cluster, self._primary_data, self._primary_log)

    def wait_streaming(self, deadline_s: float = 30.0) -> None:
        """Wait until the standby's WAL receiver streams from the primary again."""

        def streaming() -> bool:
            with self.standby() as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'"
                ).fetchone()
            return row is not None and row[0] == 1

        wait_for(streaming, deadline_s, "the standby to stream from the primary")

    @contextlib.contextmanager
    def primary_frozen(self) -> Iterator[None]:
        """SIGSTOP the primary's postmaster and every process it started, then SIGCONT them:
        the link stays open but nothing comes through it, as when the primary hangs or the
        network drops packets without closing the connection."""
        postmaster = int((self._primary_data / "postmaster.pid").read_text().split()[0])
        # Listed after the postmaster stops, so it starts no child that the list would miss.
        os.kill(postmaster, signal.SIGSTOP)
        stopped = [postmaster]
        try:
            for pid in _child_pids(postmaster):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            yield
        finally:
            for pid in reversed(stopped):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)


def _child_pids(parent: int) -> list[int]:
    """The pids whose parent is `parent`, from /proc (Linux)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_line = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        # The command name (field 2) is in parentheses and may hold spaces: split after it.
        if int(stat_line.rsplit(")", 1)[1].split()[1]) == parent:
            children.append(int(entry.name))
    return children


def _start(cluster: _Cluster, data: Path, log: Path) -> None:
    try:
        cluster.run("pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "30", "start")
    except RuntimeError as exc:
        server_log = log.read_text() if log.exists() else "(no log)"
        raise RuntimeError(f"{exc}\nserver log {log}:\n{server_log}") from exc


def _stop(cluster: _Cluster, data: Path) -> None:
    # Immediate: the data is thrown away, so there is nothing to flush or checkpoint.
    if (data / "postmaster.pid").exists():
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            cluster.run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")


@contextlib.contextmanager
def running_standby_pair() -> Iterator[StandbyPair]:
    """Start a primary and a streaming standby; yield their DSNs; stop and remove both."""
    base = _base_folder()
    cluster = _Cluster(base)
    primary_data, standby_data = base / "primary", base / "standby"
    started: list[Path] = []
    try:
        primary_sockets = cluster.mkdir("primary-sock")
        standby_sockets = cluster.mkdir("standby-sock")

        cluster.run(
            "initdb",
            "-D",
            str(primary_data),
            "-U",
            ADMIN,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
            "--no-instructions",
        )
        cluster.write(
            primary_data / "postgresql.conf",
            COMMON_CONF + f"port = {PRIMARY_PORT}\nunix_socket_directories = '{primary_sockets}'\n",
            append=True,
        )
        cluster.write(primary_data / "pg_hba.conf", PG_HBA)
        started.append(primary_data)
        _start(cluster, primary_data, base / "primary.log")

        # -R: write standby.signal and primary_conninfo (this same socket); -X stream: the
        # WAL written during the backup comes along; -c fast: do not wait for a spread
        # checkpoint.
        cluster.run(
            "pg_basebackup",
            "-D",
            str(standby_data),
            "-h",
            str(primary_sockets),
            "-p",
            str(PRIMARY_PORT),
            "-U",
            ADMIN,
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
        )
        cluster.write(
            standby_data / "postgresql.conf",
            f"port = {STANDBY_PORT}\nunix_socket_directories = '{standby_sockets}'\n",
            append=True,
        )
        started.append(standby_data)
        _start(cluster, standby_data, base / "standby.log")

        pair = StandbyPair(
            primary_dsn=make_conninfo(
                host=str(primary_sockets), port=PRIMARY_PORT, user=ADMIN, dbname=DATABASE
            ),
            standby_dsn=make_conninfo(
                host=str(standby_sockets), port=STANDBY_PORT, user=ADMIN, dbname=DATABASE
            ),
            _cluster=cluster,
            _primary_data=primary_data,
            _primary_log=base / "primary.log",
        )

        def in_recovery() -> bool:
            try:
                with pair.standby(connect_timeout=2) as conn:
                    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
            except psycopg.OperationalError:
                return False  # not accepting connections yet
            return row is not None and row[0] is True

        wait_for(in_recovery, START_TIMEOUT_S, "the standby to accept connections in recovery")
        yield pair
    finally:
        for data in reversed(started):  # standby first: the primary then stops at once
            _stop(cluster, data)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def standby_pair() -> Iterator[StandbyPair]:
    """A primary and a streaming hot standby, shared by the tests of one module."""
    with running_standby_pair() as pair:
        yield pair
