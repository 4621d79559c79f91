"""The least-privilege role (deploy/readonly-role.sql) against a real server, and what no
layer of the fence may let through: every accepted query of the corpus run as that role
changes nothing; every hostile one forced past the parser still changes nothing; functions
that lie about their volatility are stopped by READ ONLY or by the role.

"Changes nothing" is observed, not assumed: no WAL record touching this database and no
logical message (pg_walinspect, where the server has it), no new large object, no notification
(a listener and a sentinel per channel), the victim backend alive, no advisory lock held, no
file written.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from helpers import invariant, wait_for
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from monitor.authoring.pgtemp import apply_sql, scratch_database
from monitor.execution.execute import LiveFence, Refused, execute, register_loaders
from monitor.fence.allowances import Allowances
from monitor.fence.sqltree import analyze
from monitor.invariants.loader import load_directory

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / "corpus"
ROLE_SCRIPT = (ROOT / "deploy" / "readonly-role.sql").read_text()
VERIFY_SCRIPT = (ROOT / "deploy" / "verify-readonly-role.sql").read_text()
HOSTILE: dict[str, dict[str, Any]] = yaml.safe_load((CORPUS / "hostile.yaml").read_text())
ACCEPTED: dict[str, str] = yaml.safe_load((CORPUS / "accepted.yaml").read_text())
CHANNELS = ("c", "invmon_channel", "invmon_verify")

# The watchers read the server's WAL, whose logical messages name no database: while they
# watch, no other test may run (tests/conftest.py, `_server_wide`).
pytestmark = pytest.mark.server_wide
OWNED_FILE = Path("/tmp/invmon-fence-owned")
# Statements only the parser stops: PostgreSQL runs them in a READ ONLY transaction and no
# privilege governs them (SECURITY.md). On a hot standby NOTIFY fails by nature.
FENCE_ONLY = {"notify"}
# Sent as is, COPY TO STDOUT would put the session in the COPY protocol; it only reads.
NOT_SENT = {"copy"}
# Work PostgreSQL cannot interrupt, which is why the fence refuses it (test_uninterruptible.py).
# Sent as is, it runs to its end whatever the statement_timeout: 32 and 39 s of a core for
# two of them here, while the test, server-wide, held every other test back. It only
# computes, so there is nothing for it to change; what ends such work in production is
# invmon's own cut (tests/execution/test_deadlines.py).
UNINTERRUPTIBLE = {
    name
    for name, case in HOSTILE.items()
    if "cannot interrupt" in case["says"] or "never checks for a cancel" in case["says"]
}


@dataclass(frozen=True)
class Role:
    admin_dsn: str  # a superuser, on the monitored database
    dsn: str  # the monitoring role, on the same database
    name: str
    group: str


def _as(dsn: str, user: str, **extra: str) -> str:
    params = conninfo_to_dict(dsn)
    params.pop("password", None)
    return make_conninfo(**{**params, "user": user, **extra})  # type: ignore[arg-type]


def _create_role(admin_dsn: str, name: str, group: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET invmon.role = {}").format(sql.Literal(name)))
        conn.execute(sql.SQL("SET invmon.effects_group = {}").format(sql.Literal(group)))
        # The marker of monitoring roles is the test's own too, dropped with its roles.
        marker = sql.Literal(monitors_of(group))
        conn.execute(sql.SQL("SET invmon.monitors_group = {}").format(marker))
        conn.execute(ROLE_SCRIPT.encode())


def monitors_of(group: str) -> str:
    return f"{group}_mon"


def _drop_roles(admin_dsn: str, server_dsn: str, *names: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def role(admin_dsn: str) -> Iterator[Role]:
    """A database with the corpora's tables and every extension the server offers that an
    attacker would want, and the least-privilege role made by the shipped script."""
    suffix = uuid.uuid4().hex[:8]
    name, group = f"invmon_ro_{suffix}", f"invmon_fx_{suffix}"
    with scratch_database(admin_dsn, prefix="invmon_role") as dsn:
        apply_sql(dsn, (ROOT / "deploy" / "demo" / "schema.sql").read_text())
        apply_sql(dsn, (CORPUS / "schema.sql").read_text())
        with psycopg.connect(dsn, autocommit=True) as conn:
            available = {
                row[0]
                for row in conn.execute(
                    "SELECT name FROM pg_available_extensions"
                    " WHERE name IN ('dblink', 'adminpack', 'pg_walinspect')"
                )
            }
            for extension in sorted(available):
                conn.execute(sql.SQL("CREATE EXTENSION {}").format(sql.Identifier(extension)))
            conn.execute("ANALYZE")
            for (table,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ):
                conn.execute(
                    sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = off)").format(
                        sql.Identifier(table)
                    )
                )
        _create_role(dsn, name, group)
        try:
            yield Role(dsn, _as(dsn, name), name, group)
        finally:
            _drop_roles(dsn, admin_dsn, name, group, monitors_of(group))


class Effects:
    """Watches everything a query could change, from outside the session that runs it."""

    def __init__(self, role: Role) -> None:
        self.admin = psycopg.connect(role.admin_dsn, autocommit=True)
        self.listener = psycopg.connect(role.admin_dsn, autocommit=True)
        for channel in CHANNELS:
            self.listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        # A backend of the same role: the one pg_terminate_backend could reach.
        self.victim = psycopg.connect(role.dsn, autocommit=True)
        self.victim_pid = self.victim.info.backend_pid
        self.walinspect = bool(
            self._one("SELECT count(*) FROM pg_extension WHERE extname = 'pg_walinspect'")
        )
        if self.walinspect:
            # Keep the WAL from here on until it is read: on a shared server another run can
            # write enough to recycle it first ("requested WAL segment has already been
            # removed"). A temporary slot goes away with this session. Made before the
            # VACUUM, whose commit flushes the record the slot writes.
            self.admin.execute(
                "SELECT pg_create_physical_replication_slot(%s, true, true)",
                (f"invmon_effects_{uuid.uuid4().hex[:12]}",),
            )
        # Nothing left for a read to prune or hint (catalogs included: the role script and
        # earlier tests rewrote rows of pg_proc): any WAL from now on is somebody's write.
        self.admin.execute("VACUUM (FREEZE)")
        self.large_objects = self._one("SELECT count(*) FROM pg_largeobject_metadata")
        self.database_oid = self._one(
            "SELECT oid FROM pg_database WHERE datname = current_database()"
        )
        self.lsn = self._flushed()

    def _flushed(self) -> Any:
        """The WAL position now, once everything before it is flushed (pg_walinspect reads
        only flushed WAL)."""
        end = self._one("SELECT pg_current_wal_insert_lsn()")

        def flushed() -> bool:
            return bool(self._one(f"SELECT pg_current_wal_flush_lsn() >= '{end}'::pg_lsn"))

        try:
            wait_for(flushed, 2, "the WAL written so far to be flushed")
        except AssertionError:
            # Records no commit follows (a hint bit's full page, another database's) can sit
            # in a part-written page the WAL writer leaves until a commit comes, which on a
            # quiet server may be never (a full run saw this wait out its 10 s). A segment
            # switch flushes them, and touches no page of this database.
            self.admin.execute("SELECT pg_switch_wal()")
            wait_for(flushed, 30, "the WAL written so far to be flushed, after a switch")
        return end

    def _one(self, query: str) -> Any:
        row = self.admin.execute(query.encode()).fetchone()
        assert row is not None
        return row[0]

    def observed(self) -> list[str]:
        seen = []
        if self.walinspect:
            end = self._flushed()
            records = []
            if end > self.lsn:
                # The server is shared (other databases, other test runs): what counts is a
                # record that touches a page of this database, or a logical message.
                records = self.admin.execute(
                    "SELECT resource_manager, record_type, block_ref, description"
                    " FROM pg_get_wal_records_info(%s, %s)"
                    " WHERE block_ref ~ ('rel \\d+/' || %s || '/')"
                    " OR resource_manager = 'LogicalMessage'",
                    (self.lsn, end, str(self.database_oid)),
                ).fetchall()
            seen += [f"WAL record {r}" for r in records]
        if self._one("SELECT count(*) FROM pg_largeobject_metadata") != self.large_objects:
            seen.append("a large object was created")
        for channel in CHANNELS:
            self.admin.execute(sql.SQL("NOTIFY {}, 'sentinel'").format(sql.Identifier(channel)))
        sentinels = 0
        notes = self.listener.notifies(timeout=10)
        try:
            for note in notes:
                if note.payload == "sentinel":
                    sentinels += 1
                    if sentinels == len(CHANNELS):
                        break
                else:
                    seen.append(f"notification on {note.channel}: {note.payload}")
        finally:
            notes.close()
        assert sentinels == len(CHANNELS), "the listener never heard the sentinels"
        try:
            self.victim.execute("SELECT 1")
        except psycopg.OperationalError:
            seen.append("the victim backend was terminated")
        # This database's advisory locks only: pg_locks is the whole server's, and another
        # test (a store migrating, on another worker) may hold one of its own meanwhile.
        advisory = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
        if self._one(advisory + str(int(self.database_oid))):
            seen.append("an advisory lock is held")
        if OWNED_FILE.exists():
            seen.append(f"{OWNED_FILE} was written")
        written = self._one("SELECT pg_stat_file('invmon_probe', true) IS NOT NULL")
        if written:
            seen.append("a file was written in the data directory")
        return seen

    def close(self) -> None:
        for conn in (self.admin, self.listener, self.victim):
            conn.close()


@pytest.fixture
def effects(role: Role) -> Iterator[Effects]:
    watcher = Effects(role)
    yield watcher
    watcher.close()


def _server_has_xml(conn: psycopg.Connection[Any]) -> bool:
    try:
        with conn.transaction():
            conn.execute("SELECT '<a/>'::xml")
    except psycopg.errors.FeatureNotSupported:
        return False
    return True


def test_the_role_script_makes_a_role_the_verify_script_accepts(role: Role) -> None:
    with psycopg.connect(role.dsn, autocommit=True) as conn:
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute(VERIFY_SCRIPT.encode())
    verdict = notices[-1]
    assert verdict.startswith(f"verified: role {role.name} cannot change anything here"), notices
    refused = [n for n in notices if n.startswith("refused: ")]
    assert len(refused) >= 21, refused


def test_a_role_with_only_select_and_read_only_fails_the_verify_script(
    database: str, admin_dsn: str
) -> None:
    """The old deploy script's role, in a database the new script never touched: the check
    must be able to fail."""
    name = f"invmon_old_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(
                sql.Identifier(name)
            )
        )
        conn.execute(
            sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(
                sql.Identifier(name)
            )
        )
    try:
        with (
            psycopg.connect(_as(database, name), autocommit=True) as conn,
            pytest.raises(psycopg.errors.RaiseException) as refused,
        ):
            conn.execute(VERIFY_SCRIPT.encode())
    finally:
        _drop_roles(database, admin_dsn, name)
    message = str(refused.value.diag.message_primary)
    # (A large object fails on READ ONLY alone from PostgreSQL 16: not listed here.)
    for effect in (
        "send a notification",
        "assign a transaction id",
        "take an advisory lock",
        "change a setting for the session",
    ):
        assert effect in message, message


def test_applications_keep_the_effects_the_monitor_loses(role: Role, admin_dsn: str) -> None:
    """An application role that existed when the script ran still takes its advisory locks."""
    name = f"invmon_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(role.admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    try:
        _create_role(role.admin_dsn, role.name, role.group)  # idempotent: run it again
        with psycopg.connect(_as(role.admin_dsn, name), autocommit=True) as conn:
            row = conn.execute(
                "SELECT pg_try_advisory_lock(42), set_config('work_mem', '8MB', false)"
            ).fetchone()
            conn.execute("SELECT pg_advisory_unlock_all()")
        with (
            psycopg.connect(role.dsn, autocommit=True) as monitor,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            monitor.execute("SELECT pg_try_advisory_lock(42)")
    finally:
        _drop_roles(role.admin_dsn, admin_dsn, name)
    assert row == (True, "8MB")


def test_every_accepted_query_runs_as_the_role_and_changes_nothing(
    role: Role, effects: Effects
) -> None:
    shipped = load_directory(ROOT / "invariants").invariants
    live_fence = LiveFence()
    ran = []
    with psycopg.connect(role.dsn, autocommit=True) as conn:
        register_loaders(conn)
        xml = _server_has_xml(conn)
        corpus = [
            invariant(f"case_{i}", analyze(q).text, sample=5, timeout=10)
            for i, q in enumerate(ACCEPTED.values())
        ]
        for inv in [*corpus, *shipped]:
            if not xml and "xml" in inv.sql:
                continue
            execute(conn, inv, sample=5, lock_timeout=timedelta(seconds=2), live_fence=live_fence)
            ran.append(inv.name)
    assert len(ran) >= len(ACCEPTED) - 3 + len(shipped)
    assert effects.observed() == []


def test_hostile_queries_forced_past_the_parser_are_stopped_by_the_role_and_read_only(
    role: Role, effects: Effects
) -> None:
    """Each hostile query sent as is (no fence), in READ ONLY as the role, committed when it
    does not fail: what the parser would have refused must still change nothing."""
    assert len(UNINTERRUPTIBLE) == 5  # XPath, XMLPARSE and three array operators
    outcomes = {}
    with psycopg.connect(role.dsn, autocommit=True) as conn:
        for name, case in HOSTILE.items():
            if name in FENCE_ONLY | NOT_SENT | UNINTERRUPTIBLE:
                continue
            try:
                with conn.transaction():
                    # Only the queries that fail at once (privileges, READ ONLY) are judged
                    # below; a sleeper is cut short, and what ran is checked by `effects`.
                    conn.execute("SET LOCAL statement_timeout = '1s'")
                    conn.execute(case["sql"].encode())
                outcomes[name] = "ran"
            except psycopg.Error as exc:
                outcomes[name] = exc.sqlstate or "error"
    assert effects.observed() == []
    # The effectful ones failed on privileges or READ ONLY, not by luck.
    for name in (
        "set_config at session level",
        "pg_nextoid allocates an OID",
        "pg_export_snapshot",
    ):
        assert outcomes[name] == "42501", (name, outcomes[name])
    assert outcomes["data-modifying CTE"] == "25006"


LIARS = {
    "writes through a VOLATILE helper": (
        "CREATE FUNCTION public.liar_write() RETURNS int LANGUAGE sql STABLE"
        " AS 'SELECT public.writer()'",
        "25006",
    ),
    "sends a notification": (
        "CREATE FUNCTION public.liar_notify() RETURNS int LANGUAGE sql STABLE"
        " AS $$SELECT 1 FROM pg_notify('c', 'lie')$$",
        "42501",
    ),
    "creates a large object": (
        "CREATE FUNCTION public.liar_lo() RETURNS oid LANGUAGE sql STABLE AS 'SELECT lo_create(0)'",
        "42501",
    ),
    "takes an advisory lock": (
        "CREATE FUNCTION public.liar_lock() RETURNS int LANGUAGE sql STABLE"
        " AS 'SELECT 1 FROM pg_advisory_lock(7)'",
        "42501",
    ),
    "terminates backends": (
        "CREATE FUNCTION public.liar_kill() RETURNS bigint LANGUAGE sql STABLE"
        " AS 'SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity'",
        "42501",
    ),
}


def _liar_name(create: str) -> str:
    return create.split("public.")[1].split("(")[0]


def _run_liars(dsn: str, live_fence: LiveFence) -> dict[str, str]:
    """How each liar ends when run through the executor on `dsn`."""
    outcomes = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_loaders(conn)
        for what, (create, _) in LIARS.items():
            function = _liar_name(create)
            inv = invariant(function, f"SELECT public.{function}() AS x", sample=5, timeout=10)
            try:
                execute(
                    conn, inv, sample=5, lock_timeout=timedelta(seconds=2), live_fence=live_fence
                )
                outcomes[what] = "ran"
            except Refused as exc:
                outcomes[what] = f"refused by the fence: {exc}"
            except psycopg.Error as exc:
                outcomes[what] = exc.sqlstate or "error"
    return outcomes


@pytest.fixture
def liars(role: Role) -> Iterator[None]:
    with psycopg.connect(role.admin_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION public.writer() RETURNS int LANGUAGE sql"
            " AS 'INSERT INTO t (id) VALUES (1000) RETURNING id'"
        )
        for create, _ in LIARS.values():
            conn.execute(create.encode())
    yield
    with psycopg.connect(role.admin_dsn, autocommit=True) as conn:
        for create, _ in LIARS.values():
            conn.execute(f"DROP FUNCTION public.{_liar_name(create)}()".encode())
        conn.execute("DROP FUNCTION public.writer()")


def test_functions_that_lie_about_their_volatility_are_refused_even_as_a_superuser(
    role: Role, liars: None
) -> None:
    """A superuser (a common misconfiguration) has every privilege the role lacks: a STABLE
    function that notifies or locks acted until the fence stopped taking user code's word."""
    effects = Effects(role)  # watching from here: the functions above are the setup
    try:
        outcomes = _run_liars(role.admin_dsn, LiveFence())
    finally:
        observed = effects.observed()
        effects.close()
    own_code = {w: "not PostgreSQL's own code" in o for w, o in outcomes.items()}
    assert own_code == {what: True for what in LIARS}, outcomes
    assert observed == []


def test_lying_functions_trusted_by_name_are_stopped_by_read_only_or_the_role(
    role: Role, liars: None
) -> None:
    effects = Effects(role)
    trusted = Allowances(functions=frozenset(_liar_name(c) for c, _ in LIARS.values()))
    try:
        outcomes = _run_liars(role.dsn, LiveFence(trusted))
    finally:
        observed = effects.observed()
        effects.close()
    assert outcomes == {what: state for what, (_, state) in LIARS.items()}
    assert observed == []


def test_the_observers_see_each_effect_when_one_happens(role: Role) -> None:
    """The watcher itself must be able to fail: each effect, done on purpose by an
    administrator, is reported."""
    effects = Effects(role)
    try:
        with psycopg.connect(role.admin_dsn, autocommit=True) as admin:
            admin.execute("INSERT INTO t (id) VALUES (9999)")
            admin.execute("SELECT lo_create(0)")
            admin.execute("NOTIFY c, 'planted'")
            admin.execute("SELECT pg_advisory_lock(99)")
            admin.execute("SELECT pg_terminate_backend(%s)", (effects.victim_pid,))
            seen = effects.observed()
            admin.execute("SELECT pg_advisory_unlock_all()")
            admin.execute("DELETE FROM t WHERE id = 9999")
            admin.execute("SELECT lo_unlink(oid) FROM pg_largeobject_metadata")
    finally:
        effects.close()
    kinds = {line.split(" (")[0].split(":")[0] for line in seen}
    expected = {
        "a large object was created",
        "notification on c",
        "the victim backend was terminated",
        "an advisory lock is held",
    }
    if effects.walinspect:
        assert any(line.startswith("WAL record ('Heap', 'INSERT'") for line in seen), seen
    assert expected <= kinds, seen


def test_a_second_monitoring_role_leaves_the_first_one_out_of_the_effects_group(
    role: Role, admin_dsn: str
) -> None:
    """Run for a second target's role on the same server, the script made every other
    non-superuser role a member of the effects group, the first monitoring role included:
    the daemon then refused that target, its role able to execute 131 functions."""
    from monitor.fence.role_check import read_role, verdict

    second = f"invmon_ro2_{uuid.uuid4().hex[:8]}"
    try:
        _create_role(role.admin_dsn, second, role.group)
        _create_role(role.admin_dsn, role.name, role.group)  # and the first again, after
        abilities = {}
        for name in (role.name, second):
            with psycopg.connect(_as(role.admin_dsn, name)) as conn, conn.transaction():
                abilities[name] = verdict("t", read_role(conn), False, "").abilities
            with psycopg.connect(role.admin_dsn) as conn:
                member = conn.execute(
                    "SELECT pg_has_role(%s, %s, 'MEMBER')", (name, role.group)
                ).fetchone()
            assert member == (False,), name
    finally:
        _drop_roles(role.admin_dsn, admin_dsn, second)
    assert abilities == {role.name: (), second: ()}
