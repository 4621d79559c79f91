"""Several monitored databases from one config: named targets, each invariant bound to one
(header over folder over default), each evaluated on its own database, a dead one changing
nothing for the others."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from builders import config_file
from helpers import CHECK, cli, sql

from monitor.authoring.pgtemp import scratch_database
from monitor.config import parse_config
from monitor.invariants.loader import Loading, load_directory

QUERY = "SELECT id FROM items WHERE bad\n"
# The dead target of these tests: nothing listens on its port.
NOBODY = {"dsn": "host=127.0.0.1 port=1 dbname=x", "connect_timeout": "1s"}


def header(extra: str = "") -> str:
    return f"-- description: No item is bad.\n-- key: [id]\n{extra}"


@pytest.fixture
def second(admin_dsn: str) -> Iterator[str]:
    with scratch_database(admin_dsn, prefix="invmon_test") as dsn:
        yield dsn


def items(dsn: str, bad: int) -> None:
    sql(dsn, "CREATE TABLE items (id int PRIMARY KEY, bad bool NOT NULL)")
    sql(dsn, f"INSERT INTO items SELECT g, g <= {bad} FROM generate_series(1, 10) g")


def folder_with_targets(tmp_path: Path) -> Path:
    root = tmp_path / "invariants"
    (root / "payments").mkdir(parents=True)
    (root / "billing").mkdir()
    (root / "payments" / "bad_payments.sql").write_text(header() + QUERY)
    (root / "billing" / "bad_invoices.sql").write_text(header() + QUERY)
    (root / "billing" / "actually_jobs.sql").write_text(header("-- target: jobs\n") + QUERY)
    (root / "loose.sql").write_text(header() + QUERY)
    return root


def test_a_target_comes_from_the_header_else_the_folder_else_default(tmp_path: Path) -> None:
    root = folder_with_targets(tmp_path)
    config = parse_config(
        {"dsn": "host=x", "targets": {"payments": {}, "billing": {}, "jobs": {}}}, "invmon.yaml"
    )
    loaded = load_directory(root, config.loading(with_database=False))
    assert loaded.problems == []
    assert {i.name: i.target for i in loaded.invariants} == {
        "payments/bad_payments": "payments",
        "billing/bad_invoices": "billing",
        "billing/actually_jobs": "jobs",
        "loose": "default",
    }


def test_an_unknown_or_missing_target_is_refused_at_its_line(tmp_path: Path) -> None:
    root = folder_with_targets(tmp_path)
    loading = Loading(targets={"payments": None, "billing": None})
    problems = [(p.path.name, p.line, p.message) for p in load_directory(root, loading).problems]
    assert sorted(problems) == [
        (
            "actually_jobs.sql",
            3,
            "target 'jobs' is not in the config; targets: billing, payments",
        ),
        (
            "loose.sql",
            1,
            "no target: write `target:` or put the file under a target's folder; targets: "
            "billing, payments",
        ),
    ]


def test_a_timeout_over_its_targets_ceiling_is_refused(tmp_path: Path) -> None:
    (tmp_path / "slow.sql").write_text(header("-- timeout: 10m\n") + QUERY)
    config = parse_config({"targets": {"default": {"statement_timeout": "5m"}}}, "x.yaml")
    [problem] = load_directory(tmp_path, config.loading(with_database=False)).problems
    assert (problem.line, problem.message) == (
        3,
        "timeout 10m is over target 'default''s statement_timeout ceiling (5m)",
    )


def test_each_invariant_runs_on_its_own_database_and_a_dead_one_stays_its_own(
    tmp_path: Path, database: str, second: str
) -> None:
    items(database, bad=2)  # payments: 2 bad
    items(second, bad=3)  # billing: 3 bad
    root = folder_with_targets(tmp_path)
    (root / "billing" / "actually_jobs.sql").unlink()
    (root / "loose.sql").unlink()
    (root / "jobs").mkdir()
    (root / "jobs" / "stuck.sql").write_text(header() + QUERY)
    targets = {"payments": {"dsn": database}, "billing": {"dsn": second}, "jobs": NOBODY}
    config_file(tmp_path, targets=targets)
    done = cli(*CHECK, "--format", "json", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    results = {r["invariant"]: r for r in json.loads(done.stdout)["results"]}
    assert {k: (r["target"], r["status"], r["count"]) for k, r in results.items()} == {
        "billing/bad_invoices": ("billing", "violated", 3),
        "jobs/stuck": ("jobs", "error", None),
        "payments/bad_payments": ("payments", "violated", 2),
    }
    only = cli(*CHECK, "--format", "json", "--target", "billing", cwd=tmp_path)
    assert [r["invariant"] for r in json.loads(only.stdout)["results"]] == ["billing/bad_invoices"]
    unknown = cli(*CHECK, "--target", "nope", cwd=tmp_path)
    assert unknown.stderr.strip() == (
        "invmon: no target named 'nope'; targets: billing, jobs, payments"
    )
    table = cli(*CHECK, cwd=tmp_path)
    assert "target" in table.stdout.splitlines()[0]
    markdown = cli(*CHECK, "--format", "markdown", cwd=tmp_path).stdout.splitlines()
    assert markdown[2] == "| invariant | target | status | offending rows | duration |"
    summary = [line for line in markdown if line.startswith("| `") and line.count(" | ") == 4]
    assert sorted(line.split(" | ")[:2] for line in summary) == [
        ["| `billing/bad_invoices`", "billing"],
        ["| `jobs/stuck`", "jobs"],
        ["| `payments/bad_payments`", "payments"],
    ]


def test_lint_and_test_use_each_targets_own_schema(tmp_path: Path, database: str) -> None:
    root = tmp_path / "invariants"
    (root / "payments").mkdir(parents=True)
    (root / "billing").mkdir()
    (root / "payments" / "neg.sql").write_text(
        header() + "SELECT id FROM payments WHERE amount < 0\n"
    )
    (root / "payments" / "neg.test.yaml").write_text(
        "cases:\n  - name: fires\n    rows: {payments: [{id: 1, amount: -1}]}\n"
        "    expect: {keys: [1]}\n"
    )
    (root / "billing" / "late.sql").write_text(header() + "SELECT id FROM invoices WHERE late\n")
    (root / "billing" / "late.test.yaml").write_text(
        "cases:\n  - name: fires\n    rows: {invoices: [{id: 2, late: true}]}\n"
        "    expect: {keys: [2]}\n"
    )
    (tmp_path / "payments.sql").write_text("CREATE TABLE payments (id int, amount numeric);\n")
    (tmp_path / "billing.sql").write_text("CREATE TABLE invoices (id int, late bool);\n")
    config_file(
        tmp_path,
        targets={"payments": {"schema": "payments.sql"}, "billing": {"schema": "billing.sql"}},
    )
    linted = cli("lint", cwd=tmp_path)
    assert linted.returncode == 0, linted.stdout
    tested = cli("test", "--strict", cwd=tmp_path, env={"INVMON_TEST_DSN": database})
    assert tested.returncode == 0, tested.stdout + tested.stderr
    (root / "billing" / "late.sql").write_text(header() + "SELECT id FROM payments WHERE late\n")
    wrong = cli("lint", cwd=tmp_path)
    assert "late.sql:3: unknown table 'payments': not in the schema file" in wrong.stdout


def test_the_daemon_keeps_targets_apart_and_a_dead_one_is_one_incident(
    tmp_path: Path, database: str, second: str
) -> None:
    from builders import build_daemon, daemon_config
    from helpers import FakeClock

    from monitor.store.state import StateStore

    items(database, bad=2)
    items(second, bad=3)
    root = tmp_path / "invariants"
    for target in ("payments", "billing", "jobs"):
        (root / target).mkdir(parents=True)
        for n in (1, 2):
            (root / target / f"bad_{n}.sql").write_text(header("-- schedule: every 1m\n") + QUERY)
    targets = {
        "payments": {"dsn": database},
        "billing": {"dsn": second, "channel": "#billing"},
        "jobs": NOBODY,
    }
    config = daemon_config(root, targets=targets)
    store = StateStore.open(path=tmp_path / "state.db")
    # Half a minute past: each pass below lands past its slot's start and jitter (at most a
    # tenth of the minute). A clock starting at the real time of day made a pass miss its
    # slots whenever the test began in the last seconds of a minute.
    clock = FakeClock(datetime.now(UTC).replace(second=30, microsecond=0))
    daemon = build_daemon(config, "", store, clock=clock)
    try:
        daemon.reload()
        passes = []
        for _ in range(4):  # four slots of every 1m, driven by the clock, no thread
            clock.advance(61)
            passes.append(
                {r.invariant: (r.target, r.status, r.count) for r in daemon.run_due(clock())}
            )
        routes = daemon.probes.routes()
        ready, note = routes.readyz.check(), routes.readyz.note()
    finally:
        daemon.databases.close()
    assert all(len(p) == 6 for p in passes), passes  # every invariant, every slot: nobody waited
    assert passes[-1] == {
        "payments/bad_1": ("payments", "violated", 2),
        "payments/bad_2": ("payments", "violated", 2),
        "billing/bad_1": ("billing", "violated", 3),
        "billing/bad_2": ("billing", "violated", 3),
        "jobs/bad_1": ("jobs", "error", None),
        "jobs/bad_2": ("jobs", "error", None),
    }
    incidents = sorted((i.invariant, i.kind) for i in store.open_incidents())
    assert incidents == [
        ("(target jobs)", "target_unreachable"),
        ("billing/bad_1", "violation"),
        ("billing/bad_2", "violation"),
        ("payments/bad_1", "violation"),
        ("payments/bad_2", "violation"),
    ]  # no per-invariant "cannot evaluate" for jobs after 4 failed passes
    billing = next(i for i in store.open_incidents() if i.invariant == "billing/bad_1")
    assert billing.context is not None
    assert (billing.context.channel, billing.context.target_channel) == (None, "#billing")
    assert ready is None and note is not None and note.startswith("not evaluating: jobs (")
    store.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_state_store_from_before_targets_moves_to_default(
    kind: str, tmp_path: Path, admin_dsn: str
) -> None:
    from datetime import UTC, datetime

    from monitor.execution.results import RunResult
    from monitor.store.state import StateStore
    from monitor.store.storage import PostgresStorage, SqliteStorage, migrate

    with contextlib.ExitStack() as stack:
        path: Path | None = None
        dsn: str | None = None
        old: SqliteStorage | PostgresStorage
        if kind == "sqlite":
            path = tmp_path / "old.db"
            old = SqliteStorage(path)
        else:
            dsn = stack.enter_context(scratch_database(admin_dsn, prefix="invmon_state"))
            old = PostgresStorage(dsn)
        migrate(old, old.migrations[:-1])  # the store as the release before targets left it
        with old.transaction() as tx:
            tx.run(
                "INSERT INTO runs (invariant, started_at, finished_at, status, count)"
                " VALUES ('refunds', '2026-11-01T00:00:00.000000Z',"
                " '2026-11-01T00:00:01.000000Z', 'violated', 2)"
            )
            tx.run(
                "INSERT INTO incidents (invariant, kind, opened_at, last_seen_at)"
                " VALUES ('refunds', 'violation', '2026-11-01T00:00:01.000000Z',"
                " '2026-11-01T00:00:01.000000Z')"
            )
        old.close()
        store = StateStore.open(path=path, dsn=dsn)
        try:
            [run] = store.runs("refunds", limit=10)
            [incident] = store.open_incidents()
            assert (run.target, incident.target) == ("default", "default")
            now = datetime.now(UTC)
            store.record_run("bills", RunResult.counted("bills", 0, [], [], target="billing"), now)
            assert [r.target for r in store.runs("bills", limit=10)] == ["billing"]
        finally:
            store.close()


@pytest.mark.timeout(60)
def test_a_refused_port_is_found_down_at_once_not_after_the_pool_timeout(
    tmp_path: Path, database: str
) -> None:
    """The connect timeout is two minutes; a refused port must not cost it, at load (the
    fence's vetting) or at the run (the replica gate): the test's deadline is half that."""
    from builders import build_daemon, daemon_config

    from monitor.store.state import StateStore

    items(database, bad=1)
    root = tmp_path / "invariants"
    for target in ("payments", "jobs"):
        (root / target).mkdir(parents=True)
        (root / target / "bad.sql").write_text(header() + QUERY)
    targets = {
        "payments": {"dsn": database},
        "jobs": {"dsn": "host=127.0.0.1 port=1 dbname=x", "connect_timeout": "120s"},
    }
    store = StateStore.open(path=tmp_path / "state.db")
    daemon = build_daemon(daemon_config(root, targets=targets), None, store)
    try:
        _, results = daemon.run_once()
    finally:
        daemon.close()
    assert {r.invariant: (r.status, r.count) for r in results} == {
        "payments/bad": ("violated", 1),
        "jobs/bad": ("error", None),
    }
    assert sorted((i.invariant, i.kind) for i in store.open_incidents()) == [
        ("(target jobs)", "target_unreachable"),
        ("payments/bad", "violation"),
    ]
    store.close()


def two_target_store(tmp_path: Path) -> Path:
    """A state store with runs and incidents on targets payments and billing, and the
    config that names them; returns the config's folder."""
    from datetime import UTC, datetime

    from monitor.execution.results import RunResult
    from monitor.store.state import StateStore

    (tmp_path / "invariants").mkdir()
    targets = {"payments": {"dsn": "host=p"}, "billing": {"dsn": "host=b"}}
    config_file(tmp_path, state={"path": "state.db"}, targets=targets)
    store = StateStore.open(path=tmp_path / "state.db")
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    store.record_run(
        "payments/bad", RunResult.counted("payments/bad", 2, [], [], target="payments"), now
    )
    store.record_run(
        "billing/bad", RunResult.counted("billing/bad", 3, [], [], target="billing"), now
    )
    store.record_run(
        "billing/fine", RunResult.counted("billing/fine", 0, [], [], target="billing"), now
    )
    store.close()
    return tmp_path


def test_status_and_history_say_and_filter_by_target(tmp_path: Path) -> None:
    root = two_target_store(tmp_path)
    everything = json.loads(cli("status", "--format", "json", cwd=root).stdout)
    assert sorted((r["invariant"], r["target"]) for r in everything["last_runs"]) == [
        ("billing/bad", "billing"),
        ("billing/fine", "billing"),
        ("payments/bad", "payments"),
    ]
    assert sorted((i["invariant"], i["target"]) for i in everything["open_incidents"]) == [
        ("billing/bad", "billing"),
        ("payments/bad", "payments"),
    ]
    billing = json.loads(cli("status", "--target", "billing", "--format", "json", cwd=root).stdout)
    assert [r["invariant"] for r in billing["last_runs"]] == ["billing/bad", "billing/fine"]
    assert [i["invariant"] for i in billing["open_incidents"]] == ["billing/bad"]
    table = cli("status", "--target", "payments", cwd=root).stdout
    assert "target" in table.splitlines()[1]  # the open incidents' header names the column
    assert [line.split()[:3] for line in table.splitlines() if line.startswith("#")] == [
        ["#1", "payments/bad", "payments"]
    ]
    history = json.loads(cli("history", "--target", "billing", "--format", "json", cwd=root).stdout)
    assert sorted((r["invariant"], r["target"]) for r in history["runs"]) == [
        ("billing/bad", "billing"),
        ("billing/fine", "billing"),
    ]
    assert [i["invariant"] for i in history["incidents"]] == ["billing/bad"]
    unknown = cli("status", "--target", "warehouse", cwd=root)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == (
        "invmon: no target named 'warehouse'; targets: billing, payments"
    )
    neither = cli("history", cwd=root)
    assert neither.returncode == 2
    assert "name an invariant, or a target with --target" in neither.stderr


def test_the_daemon_refuses_to_start_with_a_target_that_has_no_dsn(tmp_path: Path) -> None:
    (tmp_path / "invariants").mkdir()
    targets = {"payments": {"dsn": "host=p"}, "billing": {}, "jobs": {}}
    config_file(tmp_path, state={"path": "state.db"}, targets=targets)
    ran = cli("run", "--once", cwd=tmp_path)
    assert ran.returncode == 2
    assert ran.stderr.strip() == (
        "invmon: cannot start: target 'billing' has no DSN: set targets.billing.dsn in "
        "invmon.yaml; target 'jobs' has no DSN: set targets.jobs.dsn in invmon.yaml"
    )
    assert not (tmp_path / "state.db").exists()


def test_a_file_that_does_not_load_is_shown_on_its_target_as_its_header_says(
    tmp_path: Path, database: str
) -> None:
    """Bound by its folder as a valid file would be, with the severity and owner its header
    still says; 'invalid file', not 'not run yet', on the page."""
    from helpers import PRIVILEGED

    from monitor.store.state import StateStore
    from monitor.web.reads import Overview
    from monitor.web.views import rows_of

    items(database, 1)
    (tmp_path / "invariants" / "shop").mkdir(parents=True)
    (tmp_path / "invariants" / "shop" / "badrb.sql").write_text(
        "-- description: No item is bad.\n-- severity: info\n-- owner: '@shop'\n"
        "-- runbook: https://wiki.example.com/a|b\n" + QUERY
    )
    (tmp_path / "invariants" / "shop" / "fine.sql").write_text(header() + QUERY)
    config_file(
        tmp_path,
        targets={"shop": {"dsn": database}},
        state={"path": tmp_path / "state.db"},
        database=PRIVILEGED,
    )
    ran = cli("run", "--once", cwd=tmp_path)
    assert ran.returncode == 2, ran.stderr  # an invalid file is an error of the pass
    status = json.loads(cli("status", "--format", "json", cwd=tmp_path).stdout)
    assert sorted((i["invariant"], i["kind"], i["target"]) for i in status["open_incidents"]) == [
        ("shop/badrb", "invalid_file", "shop"),
        ("shop/fine", "violation", "shop"),
    ]
    store = StateStore.open(path=tmp_path / "state.db")
    try:
        incidents = store.open_incidents()
    finally:
        store.close()
    [invalid] = [i for i in incidents if i.kind == "invalid_file"]
    assert invalid.context is not None
    assert (invalid.context.severity, invalid.context.owner, invalid.context.target) == (
        "info",
        "@shop",
        "shop",
    )
    [row] = [
        r
        for r in rows_of({}, Overview({}, {}, incidents), datetime.now(UTC))
        if r.name == "shop/badrb"
    ]
    assert (row.target, row.severity, row.owner, row.status.word) == (
        "shop",
        "info",
        "@shop",
        "Invalid file: will not run until fixed",
    )
