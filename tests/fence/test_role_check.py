"""A role that can change the database is refused (role_check.py): what the catalog says the
role can do, the verdict and its one message (pure), against a real least-privilege role
made by deploy/readonly-role.sql, a superuser and a role with some of each kind of right;
then the daemon, `invmon check` and `invmon test` with it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from builders import build_daemon, config_file, daemon_config
from helpers import FakeClock, cli, invariant, items_table, wait_for
from psycopg import sql as pgsql
from test_readonly_role import _as, _create_role, _drop_roles, monitors_of

from monitor.authoring.pgtemp import scratch_database
from monitor.config import DatabaseConfig, StateConfig
from monitor.daemon.daemon import Daemon
from monitor.execution.runner import Runner
from monitor.fence.role_check import Found, RoleFacts, abilities, read_role, verdict
from monitor.store.state import StateStore

FIX = "set database.allow_privileged_role: true"
SUPERUSER_REFUSAL = (
    "refused to run target default as role postgres, which is a superuser: connected as a "
    "role that can change the database, only the fence's parser, catalog and READ ONLY "
    "transaction stand between an invariant and a write. Connect as a role made with "
    "deploy/readonly-role.sql (check it with deploy/verify-readonly-role.sql), or "
    f"{FIX} to run as this one anyway"
)

# --- pure: from the facts to the verdict ---------------------------------------------------


def test_a_role_with_none_of_the_rights_runs_and_says_nothing() -> None:
    decided = verdict("default", RoleFacts("invmon", False, {}), False, FIX)
    assert (decided.privileged, decided.refusal(), decided.allowance()) == (False, None, None)


def test_a_superuser_is_said_once_whatever_else_the_catalog_found() -> None:
    facts = RoleFacts("postgres", True, {"createrole": Found(1, ("postgres",))})
    assert abilities(facts) == ["is a superuser"]
    assert verdict("default", facts, False, FIX).refusal() == SUPERUSER_REFUSAL


def test_each_kind_of_right_is_named_with_what_it_reaches() -> None:
    facts = RoleFacts(
        "app",
        False,
        {
            "superuser": Found(1, ("admin",)),
            "createrole": Found(2, ("app", "ops")),
            "replication": Found(1, ("app",)),
            "predefined": Found(1, ("pg_signal_backend",)),
            "database": Found(1, ("shop",)),
            "schema": Found(1, ("billing",)),
            "relation": Found(7, ("billing.a", "billing.b", "billing.c", "billing.d", "x.e")),
            "function": Found(1, ("billing.f(integer)",)),
            "writable": Found(1, ("public.audit",)),
            "effect": Found(2, ("pg_notify(text,text)", "set_config(text,text,boolean)")),
        },
    )
    assert abilities(facts) == [
        "is a member of superuser role admin",
        "can create roles and grant their membership (CREATEROLE), as a member of ops",
        "can create replication slots, which hold WAL on the primary (REPLICATION)",
        "is a member of pg_signal_backend (it cancels and terminates other sessions)",
        "owns database shop",
        "owns a schema (billing)",
        "owns 7 tables, views or sequences (billing.a, billing.b, billing.c, billing.d, x.e "
        "and 2 more)",
        "owns a function (billing.f(integer))",
        "may write 1 table it does not own, by INSERT, UPDATE, DELETE or TRUNCATE (public.audit)",
        "may execute 2 functions with effects that deploy/readonly-role.sql revokes "
        "(pg_notify(text,text), set_config(text,text,boolean))",
    ]


def test_an_allowed_privileged_role_runs_and_says_so() -> None:
    decided = verdict("payments", RoleFacts("postgres", True, {}), True, FIX)
    assert (decided.refused, decided.refusal()) == (False, None)
    assert decided.allowance() == (
        "target payments runs as role postgres, which is a superuser "
        "(allowed: allow_privileged_role)"
    )


# --- the catalog's facts, against real roles -----------------------------------------------


def _read(dsn: str) -> RoleFacts:
    with psycopg.connect(dsn) as conn:
        conn.read_only = True
        return read_role(conn)


@pytest.fixture(scope="module")
def least_privilege(admin_dsn: str) -> Iterator[tuple[str, str, str]]:
    """(admin DSN of a scratch database, the role's DSN, the role's name): the role made by
    the shipped script, with a table to read."""
    suffix = uuid.uuid4().hex[:8]
    name, group = f"invmon_rc_{suffix}", f"invmon_rcfx_{suffix}"
    with scratch_database(admin_dsn, prefix="invmon_role_check") as dsn:
        items_table(dsn, rows=3, bad=(2,))
        _create_role(dsn, name, group)
        try:
            yield dsn, _as(dsn, name), name
        finally:
            _drop_roles(dsn, admin_dsn, name, group, monitors_of(group))


def test_the_role_the_shipped_script_makes_can_do_nothing_a_monitor_must_not(
    least_privilege: tuple[str, str, str],
) -> None:
    _, dsn, name = least_privilege
    assert _read(dsn) == RoleFacts(name, False, {})


def test_the_roles_temp_file_limit_is_its_own_and_invmon_cannot_raise_it(
    least_privilege: tuple[str, str, str],
) -> None:
    """The role script sets it; the runner sets one only for a superuser (a role may not)."""
    _, dsn, _ = least_privilege
    show = "SELECT current_setting('temp_file_limit') AS limit"
    with Runner(dsn, database=DatabaseConfig(temp_file_limit="1TB")) as runner:
        result = runner.run_one(invariant("limit", show))
    assert (result.status, result.rows) == ("violated", [{"limit": "1GB"}])


def test_the_test_servers_superuser_is_one(database: str) -> None:
    facts = _read(database)
    if not facts.superuser:
        pytest.skip("the test server's DSN is not a superuser's")
    assert abilities(facts) == ["is a superuser"]


def test_ownership_write_rights_effects_and_memberships_are_found(
    database: str, admin_dsn: str
) -> None:
    """A plain role in a database the script never ran in: PUBLIC's EXECUTE on effectful
    functions, a write grant, a member of a role that owns a table; then of
    pg_write_all_data, which says every write grant at once."""
    admin = database
    suffix = uuid.uuid4().hex[:8]
    plain, owner = f"invmon_plain_{suffix}", f"invmon_owner_{suffix}"

    def run(*statements: str) -> None:
        with psycopg.connect(admin, autocommit=True) as conn:
            for statement in statements:
                names = (pgsql.Identifier(plain), pgsql.Identifier(owner))
                conn.execute(pgsql.SQL(statement).format(*names))

    run(
        "CREATE ROLE {0} LOGIN",
        "CREATE ROLE {1} NOLOGIN",
        "GRANT {1} TO {0}",
        "CREATE TABLE mine (a int)",
        "CREATE TABLE theirs (a int)",
        "ALTER TABLE mine OWNER TO {1}",
        "GRANT UPDATE ON theirs TO {0}",
    )
    try:
        granted = abilities(_read(_as(admin, plain)))
        run("GRANT pg_write_all_data TO {0}")
        writes_all = abilities(_read(_as(admin, plain)))
    finally:
        run("DROP TABLE mine, theirs")
        _drop_roles(admin, admin_dsn, plain, owner)
    assert granted[:2] == [
        "owns a table, view or sequence (public.mine)",
        "may write 1 table it does not own, by INSERT, UPDATE, DELETE or TRUNCATE (public.theirs)",
    ]
    # PUBLIC may execute them all here; the telling ones are named first.
    assert len(granted) == 3 and granted[2].startswith("may execute ")
    assert "(lo_create(oid), lo_from_bytea(oid,bytea), pg_advisory_lock(bigint)," in granted[2]
    assert writes_all == [
        "is a member of pg_write_all_data (it writes every table)",
        "owns a table, view or sequence (public.mine)",
        granted[2],
    ]


# --- the daemon ------------------------------------------------------------------------------

BAD = "-- description: No row is bad.\n-- key: [id]\n-- schedule: every 1s\n"
BAD += "SELECT id FROM items WHERE bad\n"


def _daemon(dsn: str, tmp_path: Path, database: DatabaseConfig) -> tuple[Daemon, StateStore]:
    folder = tmp_path / "invariants"
    folder.mkdir(exist_ok=True)
    (folder / "bad.sql").write_text(BAD)
    config = daemon_config(folder, state=StateConfig(path=tmp_path / "state.db"), database=database)
    store = StateStore.open(path=config.state.path)
    return build_daemon(config, dsn, store, clock=FakeClock()), store


def test_a_daemon_connected_as_a_superuser_refuses_its_target(
    database: str, tmp_path: Path
) -> None:
    if not _read(database).superuser:
        pytest.skip("the test server's DSN is not a superuser's")
    items_table(database, rows=3, bad=(2,))
    daemon, store = _daemon(database, tmp_path, DatabaseConfig())
    try:
        _, results = daemon.run_once()
        ready = daemon.probes.readiness()
        # Not read at start (the database did not answer then): read before the next run.
        daemon.databases["default"].role = None
        later = daemon.databases["default"].refusal()
    finally:
        daemon.close()
        store.close()
    assert [(r.invariant, r.status, r.error) for r in results] == [
        ("bad", "error", SUPERUSER_REFUSAL)
    ]
    assert ready == (
        "no target can be evaluated: default (refused to run as role postgres, which is a "
        f"superuser (see deploy/readonly-role.sql, or {FIX}))"
    )
    assert later == SUPERUSER_REFUSAL


def test_allowed_it_runs_and_readyz_says_with_what(database: str, tmp_path: Path) -> None:
    items_table(database, rows=3, bad=(2,))
    daemon, store = _daemon(database, tmp_path, DatabaseConfig(allow_privileged_role=True))
    try:
        _, results = daemon.run_once()
        ready, note = daemon.probes.readiness(), daemon.probes.readiness_note()
        notes = daemon.databases.role_notes()
    finally:
        daemon.close()
        store.close()
    assert [(r.invariant, r.status, r.count) for r in results] == [("bad", "violated", 1)]
    allowed = (
        "target default runs as role postgres, which is a superuser "
        "(allowed: allow_privileged_role)"
    )
    assert (ready, note, notes) == (None, allowed, [allowed])


def test_a_daemon_as_the_least_privilege_role_runs_and_notes_nothing(
    least_privilege: tuple[str, str, str], tmp_path: Path
) -> None:
    _, dsn, _ = least_privilege
    daemon, store = _daemon(dsn, tmp_path, DatabaseConfig())
    try:
        _, results = daemon.run_once()
        note, notes = daemon.probes.readiness_note(), daemon.databases.role_notes()
    finally:
        daemon.close()
        store.close()
    assert [(r.invariant, r.status, r.count) for r in results] == [("bad", "violated", 1)]
    assert (note, notes) == (None, [])


# --- invmon check and invmon test ----------------------------------------------------------


def bad_files(tmp_path: Path, *names: str) -> Path:
    """An invariants folder holding BAD under each of `names`."""
    folder = tmp_path / "invariants"
    folder.mkdir()
    for name in names:
        (folder / f"{name}.sql").write_text(BAD)
    return folder


def test_check_refuses_a_superuser_unless_told_and_runs_the_role_untold(
    least_privilege: tuple[str, str, str], tmp_path: Path
) -> None:
    admin, role_dsn, _ = least_privilege
    folder = bad_files(tmp_path, "bad", "also_bad")
    refused = cli("check", "--dsn", admin, "--invariants", str(folder))
    told = cli("check", "--dsn", admin, "--invariants", str(folder), "--allow-privileged-role")
    as_role = cli("check", "--dsn", role_dsn, "--invariants", str(folder))
    preview = cli("check", "--dsn", admin, "--invariants", str(folder), "--counts-only")
    assert (refused.returncode, told.returncode, as_role.returncode) == (2, 1, 1)
    how = "pass --allow-privileged-role (or set database.allow_privileged_role: true)"
    message = SUPERUSER_REFUSAL.replace(FIX, how)
    assert refused.stdout.count(message) == 1, refused.stdout
    assert "not evaluated: also_bad, bad" in refused.stdout
    assert preview.stdout.count(message) == 1  # the catalog's names only: shown in a preview
    assert "0 held, 2 violated, 0 could not be evaluated" in told.stdout


def test_explain_analyze_refuses_a_superuser_unless_told_and_a_plan_alone_is_not_refused(
    least_privilege: tuple[str, str, str], tmp_path: Path
) -> None:
    """ANALYZE runs the query, so it is refused as `check` is; a plan runs none of it."""
    admin, role_dsn, _ = least_privilege
    folder = bad_files(tmp_path, "bad")
    analyze = ("explain", "--analyze", "--invariants", str(folder))
    refused = cli(*analyze, "--dsn", admin)
    told = cli(*analyze, "--dsn", admin, "--allow-privileged-role")
    as_role = cli(*analyze, "--dsn", role_dsn)
    plan = cli("explain", "--invariants", str(folder), "--dsn", admin)
    assert (refused.returncode, told.returncode, as_role.returncode, plan.returncode) == (
        2,
        0,
        0,
        0,
    )
    how = "pass --allow-privileged-role (or set database.allow_privileged_role: true)"
    message = SUPERUSER_REFUSAL.replace(FIX, how)
    assert refused.stdout == f"⚠️  bad: cannot explain: {message}\n"
    for ran in (told, as_role, plan):
        assert ran.stdout.startswith("✅ bad: cost "), ran.stdout


def test_a_targets_config_allowance_is_honoured_by_check(database: str, tmp_path: Path) -> None:
    items_table(database, rows=3, bad=(2,))
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "bad.sql").write_text(BAD)
    config_file(tmp_path, targets={"shop": {"dsn": database, "allow_privileged_role": True}})
    (folder / "shop").mkdir()
    (folder / "bad.sql").rename(folder / "shop" / "bad.sql")
    done = cli("check", "--invariants", str(folder), cwd=tmp_path)
    assert done.returncode == 1, done.stdout


def test_invmon_test_runs_as_the_admin_of_its_scratch_database(
    admin_dsn: str, tmp_path: Path
) -> None:
    """`test` makes its own database on the server it is given, so it needs a role that may
    create one: it is never refused for its role."""
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "none.sql").write_text(
        "-- description: No negative number.\nSELECT g FROM generate_series(1, 3) g WHERE g < 0\n"
    )
    (folder / "none.test.yaml").write_text("cases:\n  - name: holds\n    expect:\n      count: 0\n")
    done = cli("test", "--invariants", str(folder), "--dsn", admin_dsn)
    assert done.returncode == 0, done.stdout + done.stderr


def _sessions(admin: psycopg.Connection[Any], dbname: str) -> int:
    """Client sessions the server has ended on `dbname` (pg_stat_database, PostgreSQL 14+),
    once none of invmon's is left: a backend flushes its session count before it leaves
    pg_stat_activity."""

    def one(query: str) -> int:
        row = admin.execute(query, (dbname,)).fetchone()
        assert row is not None
        return int(row[0])

    wait_for(
        lambda: (
            one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
                " AND application_name LIKE 'invmon%%'"
            )
            == 0
        ),
        30,
        "invmon's sessions to end",
    )
    return one("SELECT sessions FROM pg_stat_database WHERE datname = %s")


@pytest.mark.parametrize("concurrency", [1, 2])
def test_check_reads_the_role_and_the_catalog_on_the_connection_that_proves_it_can_connect(
    least_privilege: tuple[str, str, str], tmp_path: Path, concurrency: int
) -> None:
    """One connection of its own, which then runs invariants too, and the pool's for the
    rest: three invariants at concurrency 2 are two sessions, at concurrency 1 one, never
    one more for a probe or for the role's reading."""
    admin, role_dsn, _ = least_privilege
    folder = bad_files(tmp_path, "bad", "also_bad", "third_bad")
    (tmp_path / "invmon.yaml").write_text(f"concurrency: {concurrency}\n")
    dbname = psycopg.conninfo.conninfo_to_dict(admin)["dbname"]
    with psycopg.connect(admin, autocommit=True) as watcher:
        before = _sessions(watcher, str(dbname))
        done = cli("check", "--dsn", role_dsn, "--invariants", str(folder), cwd=tmp_path)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "0 held, 3 violated, 0 could not be evaluated" in done.stdout
        assert _sessions(watcher, str(dbname)) - before == concurrency
