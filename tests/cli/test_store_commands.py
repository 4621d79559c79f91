"""`invmon store status|migrate|backup` on real stores, SQLite and PostgreSQL: a store left
at an older schema version is shown as it is, checked, migrated (with its log line) and
then up to date; a store newer than this release is refused; a SQLite store is copied
while another connection writes to it; a PostgreSQL one is not, and the refusal says how
to use pg_dump without ever repeating the DSN's password."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from builders import config_file
from helpers import PRIVILEGED, cli, invmon, wait_for
from psycopg.conninfo import make_conninfo

from monitor.authoring.pgtemp import scratch_database
from monitor.clock import stamp, utc_now
from monitor.store.inspection import invmon_tables
from monitor.store.migrations import schema_version
from monitor.store.state import StateStore
from monitor.store.storage import (
    PostgresStorage,
    SqliteStorage,
    hold_single_daemon,
    migrate,
    server_address,
)

OLD = 8  # the store as the release with slot claims (0008) left it
PASSWORD = "pw-St0reSecret"
# The tables schema files 0001..0008 create: fixed for good, the files being append-only.
TABLES_AT_8 = [
    "alert_roots",
    "daemons",
    "deliveries",
    "events",
    "incident_actions",
    "incident_keys",
    "incidents",
    "invariant_state",
    "invmon_schema",
    "meta",
    "runs",
    "slack_requests",
    "slot_claims",
]
RUNS = [
    ("refunds", "2026-11-01T00:00:00.000000Z", "2026-11-01T00:00:01.000000Z", "violated", 2),
    ("refunds", "2026-11-02T00:00:00.000000Z", "2026-11-02T00:00:01.000000Z", "ok", 0),
    ("payouts", "2026-11-01T12:00:00.000000Z", "2026-11-01T12:00:02.000000Z", "ok", 0),
]


@dataclass(frozen=True)
class Place:
    """A state store and the folder whose invmon.yaml names it."""

    kind: str
    home: Path
    path: Path | None  # SQLite
    dsn: str | None  # PostgreSQL, with a password libpq sends and the test server ignores

    @property
    def where(self) -> str:
        return f"state.dsn, {server_address(self.dsn)}" if self.dsn else "state.path 'state.db'"

    def open(self) -> SqliteStorage | PostgresStorage:
        if self.path is not None:
            return SqliteStorage(self.path)
        return PostgresStorage(self.dsn or "")

    def versions(self) -> list[int]:
        storage = self.open()
        try:
            with storage.transaction() as tx:
                return [int(v) for (v,) in tx.rows("SELECT version FROM invmon_schema ORDER BY 1")]
        finally:
            storage.close()

    def size(self) -> int:
        """The size as measured here, not by the code under test: the SQLite file and its
        -wal; every table of the (invmon-only) PostgreSQL database, indexes and TOAST."""
        if self.path is not None:
            wal = self.path.with_name(self.path.name + "-wal")
            return self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        with psycopg.connect(self.dsn or "") as conn:
            row = conn.execute(
                "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'public' AND c.relkind = 'r'"
            ).fetchone()
        assert row is not None
        return int(row[0])


@pytest.fixture(params=["sqlite", "postgres"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    with ExitStack() as stack:
        if request.param == "sqlite":
            config_file(tmp_path, state={"path": "state.db"}, database=PRIVILEGED)
            yield Place("sqlite", tmp_path, tmp_path / "state.db", None)
            return
        admin = request.getfixturevalue("admin_dsn")
        dsn = make_conninfo(stack.enter_context(scratch_database(admin)), password=PASSWORD)
        config_file(tmp_path, state={"dsn": dsn}, database=PRIVILEGED)
        yield Place("postgresql", tmp_path, None, dsn)


def at_version(place: Place, version: int) -> None:
    """The store as the release whose newest schema file was `version` left it: only the
    first `version` files applied, and three runs of that time."""
    storage = place.open()
    try:
        migrate(storage, storage.migrations[:version])
        with storage.transaction() as tx:
            for run in RUNS:
                tx.run(
                    "INSERT INTO runs (invariant, started_at, finished_at, status, count)"
                    " VALUES (?, ?, ?, ?, ?)",
                    run,
                )
    finally:
        storage.close()


def file_digest(place: Place) -> str | None:
    return hashlib.sha256(place.path.read_bytes()).hexdigest() if place.path else None


def human(size: int) -> str:
    assert 1024 <= size < 1024 * 1024, size
    return f"{size:,} bytes ({size / 1024:.1f} KiB)"


def rows_table(rows: dict[str, int]) -> str:
    width = max(len(name) for name in rows)
    lines = [f"{'table'.ljust(width)}  rows", f"{'─' * width}  ────"]
    lines += [f"{name.ljust(width)}  {count}" for name, count in sorted(rows.items())]
    return "\n".join(lines)


def migrated_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "invmon.store"]


def test_an_older_store_is_shown_checked_migrated_and_then_up_to_date(
    place: Place, caplog: pytest.LogCaptureFixture
) -> None:
    known = schema_version()
    at_version(place, OLD)
    digest = file_digest(place)
    rows_at_8 = {name: 0 for name in TABLES_AT_8} | {"invmon_schema": OLD, "runs": 3}

    shown = cli("store", "status", "--format", "json", cwd=place.home)
    assert (shown.returncode, shown.stderr) == (0, "")
    server = {"server": server_address(place.dsn)} if place.dsn else {"path": "state.db"}
    assert json.loads(shown.stdout) == {
        "kind": place.kind,
        **server,
        "schema_version": OLD,
        "known_schema_version": known,
        "pending_migrations": known - OLD,
        "newer_than_known": False,
        "size_bytes": place.size(),
        "rows": rows_at_8,
        "oldest_run": "2026-11-01T00:00:01.000000Z",
        "newest_run": "2026-11-02T00:00:01.000000Z",
    }
    text = cli("store", "status", cwd=place.home)
    kind = "PostgreSQL" if place.dsn else "SQLite"
    what = "invmon's tables with their indexes" if place.dsn else "the file and its -wal"
    assert (text.returncode, text.stderr) == (0, "")
    assert text.stdout == (
        f"store   {kind}, {place.where}\n"
        f"schema  version {OLD}, this invmon knows {known}: {known - OLD} migrations pending "
        "(`invmon store migrate`)\n"
        f"size    {human(place.size())}: {what}\n"
        "runs    oldest finished 2026-11-01T00:00:01.000000Z, newest 2026-11-02T00:00:01.000000Z\n"
        "\n" + rows_table(rows_at_8) + "\n"
    )

    caplog.set_level(logging.INFO, logger="invmon.store")
    caplog.clear()  # building the old store logged its own migration
    check = cli("store", "migrate", "--check", cwd=place.home)
    assert (check.returncode, check.stderr) == (1, "")
    assert check.stdout == (
        f"state store at schema version {OLD}, this invmon knows {known}: "
        f"{known - OLD} migrations pending ({place.where}); apply with `invmon store migrate`\n"
    )
    # Neither look changed anything: the versions, and for SQLite the very bytes.
    assert place.versions() == list(range(1, OLD + 1))
    assert file_digest(place) == digest
    assert migrated_lines(caplog) == []

    done = cli("store", "migrate", cwd=place.home)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"state store migrated {OLD}→{known} ({place.where})\n"
    assert migrated_lines(caplog) == [f"state store migrated {OLD}→{known}"]
    assert place.versions() == list(range(1, known + 1))

    again = cli("store", "migrate", "--check", cwd=place.home)
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout == f"state store up to date at schema version {known} ({place.where})\n"
    twice = cli("store", "migrate", cwd=place.home)
    assert (twice.returncode, twice.stdout) == (0, again.stdout)
    assert migrated_lines(caplog) == [f"state store migrated {OLD}→{known}"]  # no second line

    after = json.loads(cli("store", "status", "--format", "json", cwd=place.home).stdout)
    assert (after["schema_version"], after["pending_migrations"]) == (known, 0)
    assert after["rows"] == {name: 0 for name in invmon_tables()} | {
        "invmon_schema": known,
        "runs": 3,
        "delivery_counts": 1,  # the ledger's SENT deliveries, counted when migrated: none
    }
    newest = cli("store", "status", cwd=place.home).stdout.splitlines()[1]
    assert newest == f"schema  version {known}, the newest this invmon knows"


def test_an_empty_store_is_checked_and_migrated_before_any_daemon_starts(place: Place) -> None:
    """A first deploy migrates the database made for the store before starting its daemons:
    `store migrate` refused it ("holds nothing yet … or `invmon store migrate`")."""
    if place.path is not None:
        place.path.touch()  # an empty file, as `touch` or a volume's first mount leaves it
    known = schema_version()
    checked = cli("store", "migrate", "--check", cwd=place.home)
    assert (checked.returncode, checked.stdout, checked.stderr) == (
        1,
        f"state store holds nothing yet, this invmon knows {known}: {known} migrations pending "
        f"({place.where}); apply with `invmon store migrate`\n",
        "",
    )
    if place.path is not None:
        assert place.path.stat().st_size == 0  # only told: nothing written
    else:
        with psycopg.connect(place.dsn or "") as conn:
            assert conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall() == [(0,)]
    done = cli("store", "migrate", cwd=place.home)
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"state store migrated 0→{known} ({place.where})\n",
        "",
    )
    assert place.versions() == list(range(1, known + 1))
    again = cli("store", "migrate", "--check", cwd=place.home)
    assert (again.returncode, again.stdout) == (
        0,
        f"state store up to date at schema version {known} ({place.where})\n",
    )


def test_a_store_newer_than_this_release_is_shown_and_never_migrated(place: Place) -> None:
    known = schema_version()
    at_version(place, known)
    storage = place.open()
    with storage.transaction() as tx:
        tx.run(
            "INSERT INTO invmon_schema (version, applied_at) VALUES (?, '2027-01-01')", (known + 1,)
        )
    storage.close()

    shown = cli("store", "status", cwd=place.home)
    assert shown.returncode == 0
    assert shown.stdout.splitlines()[1] == (
        f"schema  version {known + 1}, newer than this invmon knows ({known}): a newer release "
        "migrated it, and this one refuses to run on it"
    )
    refusal = (
        f"invmon: cannot migrate the state store ({place.where}): the state store is at schema "
        f"version {known + 1}, newer than this invmon knows ({known}): a newer release migrated "
        "it; run that release (or newer) here\n"
    )
    for flags in ((), ("--check",)):
        done = cli("store", "migrate", *flags, cwd=place.home)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", refusal)
    assert place.versions() == [*range(1, known + 1), known + 1]


def test_the_daemon_logs_one_line_when_it_migrates_and_none_when_up_to_date(
    place: Place, database: str
) -> None:
    known = schema_version()
    at_version(place, OLD)
    (place.home / "invariants").mkdir()
    ran = invmon("run", "--once", "--dsn", database, cwd=place.home)
    assert ran.returncode == 0, ran.stderr
    # Each line is `<stamp> LEVEL   message`; the stamp is 20 characters and a space.
    said = [line[21:] for line in ran.stderr.splitlines() if "state store" in line]
    assert said == [f"INFO    state store migrated {OLD}→{known}"]
    assert place.versions() == list(range(1, known + 1))
    rerun = invmon("run", "--once", "--dsn", database, cwd=place.home)
    assert rerun.returncode == 0, rerun.stderr
    assert [line for line in rerun.stderr.splitlines() if "state store" in line] == []
    assert PASSWORD not in ran.stderr + rerun.stderr


def test_a_one_shot_command_that_migrates_says_so_on_stderr(place: Place) -> None:
    """`unmute` opens the store to write, so it migrates it; it has no logging set up, and
    the line goes to stderr before its own answer. Up to date, it says nothing of it."""
    known = schema_version()
    at_version(place, OLD)
    unmuted = invmon("unmute", "999", cwd=place.home)
    assert unmuted.returncode == 2
    assert unmuted.stderr.splitlines()[0] == f"invmon: state store migrated {OLD}→{known}"
    assert place.versions() == list(range(1, known + 1))
    again = invmon("unmute", "999", cwd=place.home)
    assert again.returncode == 2
    assert "state store" not in again.stderr
    assert PASSWORD not in unmuted.stderr + again.stderr


def test_a_backup_taken_while_another_connection_writes_is_one_consistent_copy(
    tmp_path: Path,
) -> None:
    StateStore.open(path=tmp_path / "state.db").close()
    config_file(tmp_path, state={"path": "state.db"})
    writer = Writer(tmp_path / "state.db")
    thread = threading.Thread(target=writer.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: writer.committed >= 20, 30, "20 writes before the backup")
        writer.hold.set()  # the next write stays open, uncommitted, during the backup
        wait_for(writer.holding.is_set, 30, "a write transaction held open")
        committed = writer.committed
        done = cli("store", "backup", "copy.db", cwd=tmp_path)
        writer.release.set()
        wait_for(lambda: writer.committed >= committed + 20, 30, "20 writes after the backup")
    finally:
        writer.stop.set()
        thread.join(timeout=30)
    assert writer.error is None
    assert (done.returncode, done.stderr) == (0, ""), done.stderr

    copy = sqlite3.connect(f"file:{tmp_path / 'copy.db'}?mode=ro", uri=True)
    store = sqlite3.connect(f"file:{tmp_path / 'state.db'}?mode=ro", uri=True)
    tables = [n for (n,) in copy.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert sorted(t for t in tables if t != "sqlite_sequence") == list(invmon_tables())
    assert copy.execute("SELECT max(version) FROM invmon_schema").fetchone() == (schema_version(),)
    assert copy.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    # Exactly what was committed when it was taken, the held write not in it, each write
    # whole (its run and its counter together), and the same rows as the store has.
    runs = copy.execute("SELECT * FROM runs ORDER BY id").fetchall()
    assert len(runs) == committed
    assert copy.execute("SELECT value FROM meta WHERE name = 'writes'").fetchone() == (
        str(committed),
    )
    assert (
        runs == store.execute(f"SELECT * FROM runs WHERE id <= {committed} ORDER BY id").fetchall()
    )
    counts = {t: copy.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in invmon_tables()}
    assert counts == {t: 0 for t in invmon_tables()} | {
        "invmon_schema": schema_version(),
        "runs": committed,
        "meta": 1,
        "delivery_counts": 1,  # the ledger's SENT deliveries: none
    }
    size = (tmp_path / "copy.db").stat().st_size
    assert done.stdout == (
        f"wrote 'copy.db': {human(size)}, schema version {schema_version()}, "
        f"{sum(counts.values()):,} rows in {len(counts)} tables (from state.path 'state.db')\n"
    )
    assert sorted(p.name for p in tmp_path.glob("copy.db*")) == ["copy.db"]  # one file
    copy.close()
    store.close()


class Writer:
    """Another connection writing to the store, as a daemon does: each write a run and the
    count of writes, in one transaction; on `hold`, one write left open until `release`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.committed = 0
        self.hold, self.holding, self.release, self.stop = (threading.Event() for _ in range(4))
        self.error: BaseException | None = None

    def run(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        try:
            while not self.stop.is_set():
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(
                    "INSERT INTO runs (invariant, started_at, finished_at, status, count)"
                    " VALUES ('w', '2026-11-01T00:00:00Z', '2026-11-01T00:00:01Z', 'ok', ?)",
                    (self.committed + 1,),
                )
                conn.execute(
                    "INSERT INTO meta (name, value) VALUES ('writes', ?)"
                    " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    (str(self.committed + 1),),
                )
                if self.hold.is_set() and not self.holding.is_set():
                    self.holding.set()
                    self.release.wait(30)
                conn.execute("COMMIT")
                self.committed += 1
        except BaseException as exc:
            self.error = exc
        finally:
            conn.close()


def test_a_backup_never_overwrites_a_file(tmp_path: Path) -> None:
    StateStore.open(path=tmp_path / "state.db").close()
    config_file(tmp_path, state={"path": "state.db"})
    (tmp_path / "copy.db").write_text("yesterday's copy")
    done = cli("store", "backup", "copy.db", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "invmon: 'copy.db' exists already: a backup never overwrites; name a new file\n"
    )
    assert (tmp_path / "copy.db").read_text() == "yesterday's copy"


def test_a_backup_without_a_store_says_so_and_writes_nothing(tmp_path: Path) -> None:
    config_file(tmp_path, state={"path": "state.db"})
    done = cli("store", "backup", "copy.db", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        f"invmon: no state store at 'state.db' (looked for '{tmp_path / 'state.db'}', "
        "relative paths of 'invmon.yaml' are read from its folder): "
        "pass the --config that `invmon run` uses, or start it first\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["invmon.yaml"]


# A daemon killed after its last checkpoint: its writes are only in the store's -wal.
KILLED_WRITER = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA wal_autocheckpoint=0")
conn.execute("BEGIN")
for i in range(50):
    conn.execute(
        "INSERT INTO runs (invariant, started_at, finished_at, status, count)"
        " VALUES ('after_the_backup', '2026-12-01', '2026-12-01', 'ok', 0)"
    )
conn.execute("COMMIT")
os._exit(0)
"""


def test_a_restore_replaces_what_a_killed_daemon_left_and_waits_for_a_live_one(
    tmp_path: Path,
) -> None:
    """Copying a backup over the store was undone by the -wal a killed daemon left: SQLite
    replayed it over the copy, and nothing said the restore had not taken. A live daemon is
    the one holding the store's lock; a killed one's fresh row in `daemons` is no obstacle,
    and the restored store keeps no daemon of the backup's time."""
    place = Place("sqlite", tmp_path, tmp_path / "state.db", None)
    config_file(tmp_path, state={"path": "state.db"})
    at_version(place, schema_version())

    def daemon_seen(ago: timedelta) -> None:
        storage = place.open()
        try:
            with storage.transaction() as tx:
                tx.run("DELETE FROM daemons")
                seen = stamp(utc_now() - ago)
                tx.run(
                    "INSERT INTO daemons (id, host, pid, started_at, seen_at)"
                    " VALUES ('d1', 'box', 4242, ?, ?)",
                    (seen, seen),
                )
        finally:
            storage.close()

    def count(table: str) -> int:
        storage = place.open()
        try:
            with storage.transaction() as tx:
                [(n,)] = tx.rows(f"SELECT count(*) FROM {table}")
            return int(n)
        finally:
            storage.close()

    daemon_seen(timedelta(seconds=2))  # alive when the backup is taken
    assert cli("store", "backup", "copy.db", cwd=tmp_path).returncode == 0
    subprocess.run([sys.executable, "-c", KILLED_WRITER, str(place.path)], check=True)
    assert (tmp_path / "state.db-wal").stat().st_size > 0
    daemon_seen(timedelta(seconds=2))  # killed a moment ago: its row is fresh, its lock gone

    running = hold_single_daemon(tmp_path / "state.db")  # a daemon, alive or paused, on it
    try:
        refused = cli("store", "restore", "copy.db", cwd=tmp_path)
    finally:
        running.close()
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        "invmon: nothing restored to the state store (state.path 'state.db'): a daemon is "
        f"running on it (pid {os.getpid()} on {socket.gethostname()}): stop it first\n"
    )
    assert count("runs") == len(RUNS) + 50

    def rows_in(path: Path) -> int:
        """Every row of invmon's tables in the file, read by the sqlite3 module itself."""
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return sum(
                conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in invmon_tables()
            )
        finally:
            conn.close()

    in_copy, in_store = rows_in(tmp_path / "copy.db"), rows_in(tmp_path / "state.db")
    assert in_store == in_copy + 50  # the killed daemon's runs
    done = cli("store", "restore", "copy.db", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert rows_in(tmp_path / "state.db") == in_copy - 1  # the backup's daemons row gone
    assert done.stdout == (
        "restored 'copy.db' to the state store (state.path 'state.db'): schema version "
        f"{schema_version()}, {in_copy - 1} rows in {len(invmon_tables())} tables (it held "
        f"schema version {schema_version()}, {in_store} rows)\n"
    )
    assert (count("runs"), count("daemons")) == (len(RUNS), 0)
    shown = cli("store", "status", "--format", "json", cwd=tmp_path)
    assert json.loads(shown.stdout)["rows"]["runs"] == len(RUNS)


def test_a_restore_refuses_a_file_that_is_not_an_intact_store_of_this_release_or_older(
    tmp_path: Path,
) -> None:
    config_file(tmp_path, state={"path": "state.db"})
    StateStore.open(path=tmp_path / "state.db").close()
    before = (tmp_path / "state.db").read_bytes()
    (tmp_path / "notes.txt").write_text("not a database")
    newer = tmp_path / "newer.db"
    StateStore.open(path=newer).close()
    with sqlite3.connect(newer) as conn:
        conn.execute(
            "INSERT INTO invmon_schema (version, applied_at) VALUES (?, '2027-01-01')",
            (schema_version() + 1,),
        )
    conn.close()
    prefix = "invmon: nothing restored to the state store (state.path 'state.db'): "
    expected = {
        "missing.db": f"{prefix}'missing.db' is not a file\n",
        "state.db": f"{prefix}'state.db' is the store itself\n",
        "notes.txt": f"{prefix}'notes.txt' cannot be read as a SQLite store: file is not a "
        "database\n",
        "newer.db": f"{prefix}'newer.db' is at schema version {schema_version() + 1}, newer "
        f"than this invmon knows ({schema_version()}): restore it with that release (or "
        "newer)\n",
    }
    for name, refusal in expected.items():
        done = cli("store", "restore", name, cwd=tmp_path)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", refusal)
    assert (tmp_path / "state.db").read_bytes() == before
    # A backup older than the daemons table (schema step 8) is restored, then migrated.
    at_version(Place("sqlite", tmp_path, tmp_path / "old.db", None), 7)
    old = cli("store", "restore", "old.db", cwd=tmp_path)
    assert (old.returncode, old.stderr) == (0, "")
    assert old.stdout.startswith(
        "restored 'old.db' to the state store (state.path 'state.db'): schema version 7, "
    )
    assert cli("store", "migrate", cwd=tmp_path).stdout == (
        f"state store migrated 7→{schema_version()} (state.path 'state.db')\n"
    )


@contextmanager
def read_only_folder(folder: Path) -> Iterator[None]:
    """`folder` made immutable (chattr +i): no file can be made in it, as on a read-only
    mount, even by root, which the suite often runs as."""
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not supported here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_status_history_and_backup_read_a_store_on_a_read_only_mount(tmp_path: Path) -> None:
    """In WAL mode SQLite must make the store's -shm beside it to open it read-only: on a
    read-only mount `status`, `history` and `store backup` failed ("unable to open database
    file") and sent the operator to the manual's section promising they work there."""
    home, mount = tmp_path / "home", tmp_path / "mount"
    home.mkdir()
    mount.mkdir()
    place = Place("sqlite", mount, mount / "state.db", None)
    config_file(home, state={"path": str(place.path)})
    at_version(place, schema_version())
    assert sorted(p.name for p in mount.iterdir()) == ["state.db"]
    with read_only_folder(mount):
        shown = cli("store", "status", "--format", "json", cwd=home)
        history = cli("history", "refunds", "--format", "json", cwd=home)
        copied = cli("store", "backup", str(home / "copy.db"), cwd=home)
    assert (shown.returncode, shown.stderr) == (0, "")
    assert json.loads(shown.stdout)["rows"]["runs"] == len(RUNS)
    assert (history.returncode, history.stderr) == (0, "")
    assert len(json.loads(history.stdout)["runs"]) == 2
    assert (copied.returncode, copied.stderr) == (0, ""), copied.stderr
    assert sorted(p.name for p in mount.iterdir()) == ["state.db"]  # nothing made there

    # A -wal copied beside it without its -shm: read as the file stands, and said.
    subprocess.run([sys.executable, "-c", KILLED_WRITER, str(place.path)], check=True)
    (mount / "state.db-shm").unlink()
    wal = (mount / "state.db-wal").stat().st_size
    with read_only_folder(mount):
        shown = cli("store", "status", "--format", "json", cwd=home)
    assert shown.returncode == 0
    assert json.loads(shown.stdout)["rows"]["runs"] == len(RUNS)
    assert shown.stderr == (
        f"invmon: warning: the state store (state.path '{place.path}') is on a read-only "
        f"mount, where SQLite cannot read the {wal:,} bytes of its -wal file: what the last "
        "writes hold is not shown\n"
    )


def test_a_postgresql_store_is_not_copied_the_refusal_gives_pg_dump_and_no_password(
    admin_dsn: str, tmp_path: Path
) -> None:
    with scratch_database(admin_dsn, prefix="invmon_state") as plain:
        dsn = make_conninfo(plain, password=PASSWORD)
        StateStore.open(dsn=dsn).close()
        config_file(tmp_path, state={"dsn": dsn})
        done = cli("store", "backup", "state copy.dump", cwd=tmp_path)
        shown = cli("store", "status", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "invmon: `invmon store backup` copies a SQLite store; this one is PostgreSQL "
        f"(state.dsn, {server_address(dsn)}): back it up with pg_dump, e.g. pg_dump "
        "--format=custom --file 'state copy.dump' \"$INVMON_STATE_DSN\" (the DSN of state.dsn); "
        "restore it, with every daemon stopped, into an empty database: pg_restore --dbname "
        "\"$EMPTY_DATABASE_DSN\" 'state copy.dump', then point state.dsn at that database\n"
    )
    assert not (tmp_path / "state copy.dump").exists()
    assert shown.returncode == 0
    assert shown.stdout.splitlines()[0] == f"store   PostgreSQL, state.dsn, {server_address(dsn)}"
    assert PASSWORD not in done.stdout + done.stderr + shown.stdout + shown.stderr
