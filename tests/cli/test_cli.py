"""The real `invmon` command in a subprocess: JSON output, table output and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from helpers import CHECK, PRIVILEGED_YAML, cli, invmon, sql

ROOT = Path(__file__).resolve().parents[2]


def write(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def shop(database: str, tmp_path: Path) -> tuple[str, Path]:
    """A database and invariants folder the project has never seen."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE orders (order_id int PRIMARY KEY, total numeric(10,2), paid bool);"
            "INSERT INTO orders SELECT g, g * 1.5, g % 3 <> 0 FROM generate_series(1, 30) g"
        )
    folder = tmp_path / "checks"
    write(
        folder,
        "unpaid_orders.sql",
        "-- description: Every order is paid.\n-- key: [order_id]\n-- sample: 3\n"
        "SELECT order_id, total FROM orders WHERE NOT paid\n",
    )
    write(
        folder,
        "negative_totals.sql",
        "-- description: No order has a negative total.\nSELECT * FROM orders WHERE total < 0\n",
    )
    return database, folder


def test_check_json_reports_exact_counts_and_ordered_samples(shop: tuple[str, Path]) -> None:
    dsn, folder = shop
    done = invmon(*CHECK, "--dsn", dsn, "--invariants", str(folder), "--format", "json")
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    by_name = {r["invariant"]: r for r in document["results"]}
    assert set(by_name) == {"unpaid_orders", "negative_totals"}
    unpaid = by_name["unpaid_orders"]
    assert (unpaid["status"], unpaid["count"], unpaid["truncated"]) == ("violated", 10, True)
    assert unpaid["rows"] == [
        {"order_id": 3, "total": "4.50"},
        {"order_id": 6, "total": "9.00"},
        {"order_id": 9, "total": "13.50"},
    ]
    assert (unpaid["severity"], unpaid["description"]) == ("warning", "Every order is paid.")
    assert unpaid["error"] is None
    held = by_name["negative_totals"]
    assert (held["status"], held["count"], held["rows"], held["truncated"]) == ("ok", 0, [], False)
    assert document["problems"] == []


def test_a_broken_invariant_is_an_error_while_the_others_still_report(
    shop: tuple[str, Path],
) -> None:
    dsn, folder = shop
    write(folder, "typo.sql", "-- description: x\nSELECT order_idd FROM orders\n")
    write(folder, "writes.sql", "-- description: y\nDELETE FROM orders\n")
    done = cli(*CHECK, "--dsn", dsn, "--invariants", str(folder), "--format", "json")
    assert done.returncode == 2
    by_name = {r["invariant"]: r for r in json.loads(done.stdout)["results"]}
    assert {n: (r["status"], r["count"]) for n, r in by_name.items()} == {
        "unpaid_orders": ("violated", 10),
        "negative_totals": ("ok", 0),
        "typo": ("error", None),
        "writes": ("error", None),
    }
    assert by_name["typo"]["error"].startswith('column "order_idd" does not exist')
    assert by_name["writes"]["error"] == (
        "invalid invariant file: line 2: DELETE statement is not allowed; an invariant must be "
        "one read-only query (SELECT, WITH ... SELECT, VALUES)"
    )


def test_exit_code_is_zero_when_every_invariant_holds(shop: tuple[str, Path]) -> None:
    dsn, folder = shop
    done = cli(
        *CHECK, "--invariants", str(folder), "--only", "negative_totals", env={"INVMON_DSN": dsn}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "negative_totals" in done.stdout
    assert "unpaid_orders" not in done.stdout
    assert "1 held, 0 violated, 0 could not be evaluated" in done.stdout


def test_the_table_shows_status_count_and_first_sample_rows(shop: tuple[str, Path]) -> None:
    dsn, folder = shop
    done = cli(*CHECK, "--dsn", dsn, "--invariants", str(folder))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert any(
        line.startswith("unpaid_orders") and "violated" in line and " 10 " in line for line in lines
    )
    assert "unpaid_orders: 10 offending rows" in done.stdout
    assert "… and 7 more" in done.stdout


def test_an_unknown_selection_is_refused_with_the_available_names(shop: tuple[str, Path]) -> None:
    dsn, folder = shop
    done = cli(*CHECK, "--dsn", dsn, "--invariants", str(folder), "--select", "nope")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "invmon: --select 'nope' matches no invariant; names: negative_totals, unpaid_orders; "
        "tags: none"
    )


def test_check_without_a_database_says_how_to_give_one(tmp_path: Path) -> None:
    done = cli(*CHECK, "--invariants", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2
    assert "no database to check: pass --dsn, set INVMON_DSN" in done.stderr


def test_a_refused_connection_exits_2_with_every_invariant_in_error(
    shop: tuple[str, Path],
) -> None:
    _, folder = shop
    dsn = "postgresql://postgres:hunter2@127.0.0.1:9/postgres"
    done = cli(*CHECK, "--dsn", dsn, "--invariants", str(folder), "--format", "json")
    assert done.returncode == 2
    results = json.loads(done.stdout)["results"]
    assert [(r["status"], r["count"]) for r in results] == [("error", None), ("error", None)]
    assert "hunter2" not in done.stdout + done.stderr


def test_a_bad_config_gets_one_clear_message(tmp_path: Path) -> None:
    (tmp_path / "invmon.yaml").write_text("concurrency: many\n")
    done = cli(*CHECK, "--dsn", "dbname=x", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("invmon: invmon.yaml: field 'concurrency': ")
    assert "Traceback" not in done.stderr


def test_lint_reports_every_problem_in_every_file_then_fails(tmp_path: Path) -> None:
    write(tmp_path, "a.sql", "-- description: a\nSELECT 1 WHERE false\n")
    write(tmp_path, "b.sql", "-- description: b\nSELECT * FROM t FOR UPDATE\n")
    write(
        tmp_path, "c.sql", "-- description: c\n-- owner: x\n-- colour: red\nSELECT nextval('s')\n"
    )
    done = invmon("lint", str(tmp_path))
    assert done.returncode == 2
    assert done.stdout.splitlines() == [
        f"{tmp_path}/b.sql:2: FOR UPDATE takes row locks on the replica; not allowed",
        f"{tmp_path}/c.sql:3: unknown header key 'colour'; known keys are channel, description, "
        "for, key, max_cost, owner, redact, runbook, sample, schedule, severity, show, source, "
        "tags, target, timeout",
        f"{tmp_path}/c.sql:4: function nextval() is VOLATILE: PostgreSQL's catalog says it may "
        "change the database or act outside the query; not allowed",
    ]
    assert "1 invariant valid, 2 with errors" in done.stderr


def test_lint_passes_the_shipped_invariants() -> None:
    root = Path(__file__).resolve().parents[2]
    done = cli("lint", str(root / "invariants"))
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr.strip() == (
        "4 invariants valid, 0 with errors; tables and columns not checked (no schema: pass "
        "--schema, or set `schema:` or `targets.NAME.schema` in the config)"
    )


def test_a_malformed_dsn_is_refused_without_repeating_its_password(tmp_path: Path) -> None:
    done = cli(
        *CHECK,
        "--invariants",
        str(tmp_path),
        env={"INVMON_DSN": "postgresql://invmon:S3cr%t-Pa55@127.0.0.1/app"},
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "invmon: --dsn / INVMON_DSN: cannot be read as a PostgreSQL connection string "
        "(the value is not shown); check its quoting and percent-encoding"
    )
    (tmp_path / "invmon.yaml").write_text("state: ${STATE_DSN}\n")
    done = cli(
        *CHECK,
        "--dsn",
        "dbname=x",
        cwd=tmp_path,
        env={"STATE_DSN": "postgresql://invmon:TopSecret99@db/state"},
    )
    assert done.returncode == 2
    assert "TopSecret99" not in done.stderr
    assert done.stderr.startswith("invmon: invmon.yaml: field 'state': ")


SCHEMA = Path(__file__).resolve().parents[2] / "deploy" / "demo" / "schema.sql"


def test_lint_with_a_schema_finds_a_misspelt_column_without_any_database(tmp_path: Path) -> None:
    write(
        tmp_path,
        "typo.sql",
        "-- description: x\n-- key: [refund_id]\nSELECT refund_id\nFROM refunds\n"
        "WHERE statuss = 'settled'\n",
    )
    write(tmp_path, "table.sql", "-- description: y\nSELECT id\nFROM refundz\n")
    done = cli(
        "lint", str(tmp_path), "--schema", str(SCHEMA), env={"INVMON_DSN": "host=nowhere.invalid"}
    )
    assert done.returncode == 2
    assert done.stdout.splitlines() == [
        f"{tmp_path}/table.sql:3: unknown table 'refundz': not in the schema file; did you "
        "mean 'refunds'?",
        f"{tmp_path}/typo.sql:5: unknown column 'statuss': not in table refunds; did you mean "
        "'status'?",
    ]


def test_lint_rejects_an_always_one_row_aggregate_and_warns_on_now_without_grace(
    tmp_path: Path,
) -> None:
    write(tmp_path, "count.sql", "-- description: x\nSELECT count(*) FROM jobs WHERE stuck\n")
    write(
        tmp_path, "lag.sql", "-- description: y\nSELECT id FROM jobs\nWHERE lease_until < now()\n"
    )
    done = cli("lint", str(tmp_path))
    assert done.returncode == 2
    assert done.stdout.splitlines() == [
        f"{tmp_path}/count.sql:2: this aggregate without GROUP BY always returns exactly one "
        "row, so the invariant could never hold (zero rows means it holds); return the "
        "offending rows, or add HAVING, e.g. HAVING count(*) > 0",
        f"{tmp_path}/lag.sql:3: warning: compares with now() without a grace interval; on a "
        "lagging replica that can report a violation that is not there; write e.g. "
        "now() - interval '2 minutes'",
    ]
    assert "1 invariant valid, 1 with errors" in done.stderr


def test_check_markdown_is_ready_for_a_pull_request_comment(shop: tuple[str, Path]) -> None:
    dsn, folder = shop
    done = cli(*CHECK, "--dsn", dsn, "--invariants", str(folder), "--format", "markdown")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == "### invmon: 1 held, 1 violated, 0 could not be evaluated"
    assert "| `unpaid_orders` | ❌ violated | 10 |" in done.stdout
    assert "<details><summary><code>unpaid_orders</code>: first 3 of 10 offending rows" in (
        done.stdout
    )
    assert "| `3` | `4.50` |" in lines  # values in code spans: shown as they are


def test_markdown_shows_hostile_values_as_they_are_and_says_what_was_cut() -> None:
    """A truth review: markdown of the data (an <img> a PR comment would fetch, *bold*, a
    | splitting the cell) was rendered, a result with no columns made a broken table, and
    the notes on cut or withheld values were left out."""
    from monitor.cli.render import results_markdown
    from monitor.execution.results import RunResult

    hostile = RunResult.counted(
        "hostile",
        2,
        ["v"],
        [{"v": "<img src=//x.io/t.png>"}, {"v": "*bold* a|b `x`"}],
        rows_withheld=1,
    )
    empty = RunResult.counted("columnless", 1, [], [{}])
    lines = results_markdown([hostile, empty], []).splitlines()
    assert "| `<img src=//x.io/t.png>` |" in lines
    assert "| `` *bold* a\\|b `x` `` |" in lines
    assert "_1 row of the sample left out to keep the run within limits.sample_bytes_" in lines
    assert "The query returns no columns: each row is empty." in lines
    assert "| |" not in lines


def test_explain_reports_cost_and_the_cost_gate_trips_on_an_expensive_query(
    database: str, tmp_path: Path
) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE events (id bigint, kind text)")
        conn.execute("INSERT INTO events SELECT g, 'k' FROM generate_series(1, 200000) g")
        conn.execute("ANALYZE events")
    write(
        tmp_path, "cheap.sql", "-- description: x\n-- max_cost: 1000\nSELECT 1 AS one WHERE false\n"
    )
    write(
        tmp_path,
        "scan.sql",
        "-- description: y\n-- max_cost: 100\nSELECT id FROM events WHERE kind = 'z'\n",
    )
    done = cli("explain", "--dsn", database, "--invariants", str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("✅ cheap: cost ")
    assert lines[1].startswith("❌ scan: cost ") and lines[1].endswith("(max_cost 100), ~1 rows")
    assert lines[2] == "     Seq Scan on events (~200,000 rows in the table)"
    assert "Over budget: scan." in done.stdout
    within = cli("explain", "--dsn", database, "--invariants", str(tmp_path), "cheap")
    assert within.returncode == 0


def test_lint_with_a_schema_accepts_valid_postgres_it_cannot_fully_resolve(tmp_path: Path) -> None:
    from monitor.authoring.schema_check import check_against_schema, load_schema

    tables = load_schema(
        SCHEMA.read_text()
        + '\nCREATE TABLE "Orders" ("OrderId" int, "Status" text);\n'
        + "CREATE TABLE tagged (id int, tags int[]);\n"
    )
    valid = [
        "WITH Bad AS (SELECT refund_id FROM refunds) SELECT refund_id FROM bad",
        'SELECT "OrderId" FROM "Orders" WHERE "Status" IS NULL',
        "SELECT i.id FROM tagged i, unnest(i.tags) AS t WHERE t < 0",
        "SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction'",
    ]
    for sql_text in valid:
        assert [p.level for p in check_against_schema(sql_text, tables)] in ([], ["warning"]), (
            sql_text
        )


def test_a_counts_only_preview_shows_no_value_from_the_database(
    database: str, tmp_path: Path
) -> None:
    """The PR preview: a row value, or a value quoted by an error message, never reaches it."""
    sql(database, "CREATE TABLE users (id int, password text)")
    sql(database, "INSERT INTO users VALUES (1, 'hunter2')")
    write(tmp_path, "leaky.sql", "-- description: rows\nSELECT id, password FROM users\n")
    write(
        tmp_path,
        "by_error.sql",
        "-- description: an error that quotes data\n"
        "SELECT (SELECT password FROM users)::int AS n\n",
    )
    write(tmp_path, "refused.sql", "-- description: refused\nSELECT pg_sleep(1) AS x\n")
    done = invmon(
        *CHECK,
        "--dsn",
        database,
        "--invariants",
        str(tmp_path),
        "--format",
        "markdown",
        "--counts-only",
    )
    assert done.returncode == 2, done.stderr
    assert "hunter2" not in done.stdout + done.stderr
    assert "| `leaky` | ❌ violated | 1 |" in done.stdout
    assert (
        "`by_error`** could not be evaluated: `could not be evaluated (the database's message"
        in (done.stdout)
    )
    unredacted = invmon(
        *CHECK, "--dsn", database, "--invariants", str(tmp_path), "--format", "markdown"
    )
    assert "hunter2" in unredacted.stdout  # the same run without the flag does show it


def test_an_unreachable_database_is_said_once_with_what_it_stopped(
    shop: tuple[str, Path],
) -> None:
    dsn, folder = shop
    wrong = dsn.replace("postgresql://postgres@", "postgresql://no_such_role@")
    if wrong == dsn:  # a DSN in key=value form
        wrong = f"{dsn} user=no_such_role"
    done = cli(*CHECK, "--dsn", wrong, "--invariants", str(folder))
    assert done.returncode == 2
    assert done.stdout.count('role "no_such_role" does not exist') == 1, done.stdout
    names = sorted(p.stem for p in folder.glob("*.sql"))
    assert f"    not evaluated: {', '.join(names)}\n" in done.stdout
    assert "cannot connect, so" in done.stdout and "check the DSN" in done.stdout
    as_json = cli(*CHECK, "--dsn", wrong, "--invariants", str(folder), "--format", "json")
    results = json.loads(as_json.stdout)["results"]
    assert sorted(r["invariant"] for r in results) == names  # one result per invariant
    assert {r["status"] for r in results} == {"error"}


def test_every_reading_command_has_a_json_document_with_its_documented_keys(
    database: str, admin_dsn: str, tmp_path: Path
) -> None:
    """The shapes the manual's "Output for scripts" (docs/cli.md) documents; a script can
    rely on them."""
    schema = ROOT / "deploy" / "demo" / "schema.sql"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(schema.read_text())
    for path in (ROOT / "invariants").iterdir():
        (tmp_path / "invariants").mkdir(exist_ok=True)
        (tmp_path / "invariants" / path.name).write_bytes(path.read_bytes())
    (tmp_path / "invmon.yaml").write_text(PRIVILEGED_YAML)
    assert cli("run", "--once", "--dsn", database, cwd=tmp_path).returncode == 0
    commands = {
        ("status",): {"open_incidents", "closed_incidents", "last_runs", "mutes"},
        ("mutes",): {"mutes"},
        ("history", "expired_lease_jobs"): {"invariant", "targets", "runs", "incidents"},
        ("lint",): {"problems", "valid", "with_errors", "failed", "tables_unchecked"},
        ("test", "--schema", str(schema), "--dsn", admin_dsn): {"invariants", "exit_code"},
        ("explain", "--dsn", database): {"results", "exit_code"},
        (*CHECK, "--dsn", database): {"results", "problems"},
    }
    for command, keys in commands.items():
        done = cli(*command, "--format", "json", cwd=tmp_path)
        assert set(json.loads(done.stdout)) == keys, (command, done.stdout[:300], done.stderr)


def test_a_target_named_default_is_the_database_every_command_uses(
    database: str, tmp_path: Path
) -> None:
    """The manual says `dsn:` is the target named default; written as `targets.default`,
    check, explain and run --once all said there was no database to check (from the
    newcomer's review)."""
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "one.sql").write_text("-- description: one row\nSELECT 1 AS id\n")
    config = tmp_path / "invmon.yaml"
    config.write_text(
        f"invariants: invariants\nstate:\n  path: state.db\n"
        f"targets:\n  default:\n    dsn: {database}\n    allow_privileged_role: true\n"
    )
    checked = cli("check", "--config", str(config), "--format", "json")
    assert checked.returncode == 1, checked.stderr
    [result] = json.loads(checked.stdout)["results"]
    assert (result["invariant"], result["status"], result["count"]) == ("one", "violated", 1)
    explained = cli("explain", "--config", str(config))
    assert explained.returncode == 0, explained.stderr
    once = cli("run", "--once", "--config", str(config))
    assert once.returncode == 1, once.stderr
