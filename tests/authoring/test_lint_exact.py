"""lint is exact: each column checked against the table its alias stands for, in every
clause; lines as in the file; the summary counts what lint found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import cli

from monitor.authoring.schema_check import check_against_schema, load_schema

SCHEMA = """
CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL, quantity int);
CREATE TABLE payments (id bigint PRIMARY KEY, order_id bigint REFERENCES orders, state text,
                       amount numeric);
"""
TABLES = load_schema(SCHEMA)


@pytest.mark.parametrize(
    ("sql", "found"),
    [
        (
            "SELECT o.id FROM orders AS o WHERE o.state = 'paid'",
            "1: unknown column o.state: table orders has no column 'state'; did you mean 'status'?",
        ),
        (
            "SELECT o.id FROM orders AS o GROUP BY o.id\nHAVING sum(quantty) < 0",
            "2: unknown column 'quantty': not in table orders; did you mean 'quantity'?",
        ),
        (
            "SELECT o.id FROM orders AS o GROUP BY o.id\n"
            "HAVING count(*) FILTER (WHERE o.stat = 'x') > 1",
            "2: unknown column o.stat: table orders has no column 'stat'; did you mean 'status'?",
        ),
        (
            "SELECT p.id FROM payments p\nJOIN orders o ON o.id = p.order_id\nWHERE p.status = 'x'",
            "3: unknown column p.status: table payments has no column 'status'; "
            "did you mean 'state'?",
        ),
    ],
)
def test_a_column_must_exist_on_the_table_its_alias_stands_for(sql: str, found: str) -> None:
    assert [f"{p.line}: {p.message}" for p in check_against_schema(sql, TABLES)] == [found]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT o.id, o.status AS st FROM orders o ORDER BY st",
        "SELECT o.id FROM orders o WHERE EXISTS (SELECT 1 FROM payments p WHERE p.order_id = o.id)",
        "SELECT id FROM orders WHERE quantity < 0",
        "SELECT x.n FROM (SELECT count(*) AS n FROM orders) AS x WHERE x.n > 1",
        "WITH paid AS (SELECT order_id FROM payments) SELECT order_id FROM paid",
        "SELECT o.id FROM orders o, generate_series(1, 3) AS g WHERE g > 1",
    ],
)
def test_valid_queries_stay_valid(sql: str) -> None:
    assert check_against_schema(sql, TABLES) == []


def test_lines_and_the_summary_are_what_lint_found(tmp_path: Path) -> None:
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "schema.sql").write_text(SCHEMA)
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "a.sql").write_text(
        "-- description: x\n\n-- An ordinary comment after a blank line.\n"
        "SELECT o.id FROM orders AS o\nWHERE o.state = 'paid'\n"
    )
    (folder / "b.sql").write_text("-- description: two\nSELECT 1 AS a;\nSELECT 2 AS b\n")
    (folder / "c.sql").write_text("-- description: fine\nSELECT id FROM orders WHERE false\n")
    done = cli("lint", str(folder), "--schema", str(tmp_path / "db" / "schema.sql"))
    assert done.returncode == 2
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{folder}/a.sql:5: unknown column o.state"), lines
    assert lines[1].startswith(f"{folder}/b.sql:3: "), lines
    assert "1 invariant valid, 2 with errors" in done.stderr


def test_fixture_mistakes_are_said_at_their_line_with_a_hint(tmp_path: Path, database: str) -> None:
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "late.sql").write_text(
        "-- description: x\n-- key: [id]\nSELECT id FROM orders WHERE quantity < 0\n"
    )
    (folder / "late.test.yaml").write_text(
        "cases:\n  - name: at\n    rows:\n"
        "      orders: [{id: 1, status: x, placed: !sql make_date(2026, 1, 1)}]\n"
        "    expect: {keys: [1]}\n"
    )
    linted = cli("lint", "--invariants", str(folder))
    assert linted.returncode == 2
    assert "late.test.yaml:4:" in linted.stdout
    assert "inside {…} a `!sql` value with commas must be quoted" in linted.stdout
    (folder / "late.test.yaml").write_text(
        "cases:\n  - name: fires\n    rows:\n      orders: [{id: 1, quantity: -1}]\n"
        "      payments: [{id: 5, order_id: 9}]\n"
        "    expect: {keys: [1]}\n"
    )
    schema = tmp_path / "schema.sql"
    schema.write_text(SCHEMA)
    tested = cli(
        "test",
        "--invariants",
        str(folder),
        "--schema",
        str(schema),
        env={"INVMON_TEST_DSN": database},
    )
    assert tested.returncode == 1
    assert (
        f"❌ fires: {folder}/late.test.yaml:2: a row of payments: payments.order_id = 9 "
        "refers to a orders row the case does not list; add it under `rows:` as orders"
    ) in tested.stdout
    assert "untested:" not in tested.stdout  # it has a firing case; that case failed


def test_a_check_refusing_a_filled_in_value_names_what_invmon_filled_in(
    tmp_path: Path, database: str
) -> None:
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "refund.sql").write_text(
        "-- description: x\n-- key: [id]\nSELECT id FROM refunds WHERE note = 'dup'\n"
    )
    (folder / "refund.test.yaml").write_text(
        "cases:\n  - name: fires\n    rows:\n      refunds: [{id: 1, note: dup}]\n"
        "    expect: {keys: [1]}\n"
    )
    schema = tmp_path / "schema.sql"
    schema.write_text(
        "CREATE TABLE refunds (id bigint PRIMARY KEY, note text,\n"
        "  cents int NOT NULL CHECK (cents < 0), reason text NOT NULL,\n"
        "  made timestamptz NOT NULL);\n"
    )
    tested = cli(
        "test", "--invariants", str(folder), "--schema", str(schema),
        env={"INVMON_TEST_DSN": database},
    )  # fmt: skip
    assert tested.returncode == 1
    assert (
        f"❌ fires: {folder}/refund.test.yaml:2: a row of refunds: new row for relation "
        '"refunds" violates check constraint "refunds_cents_check" (Failing row contains '
        "(1, dup, 1, reason-1, 2000-01-02 00:00:00+00).); the case does not give cents, "
        "reason, made, which invmon filled in (cents = 1, reason = 'reason-1', made = "
        "'2000-01-02T00:00:00+00:00'): if the check is on one of them, give it a value the "
        "check accepts"
    ) in tested.stdout, tested.stdout


def test_lint_checks_fixture_tables_and_columns_against_the_schema(tmp_path: Path) -> None:
    schema = tmp_path / "schema.sql"
    schema.write_text(SCHEMA)
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "neg.sql").write_text(
        "-- description: x\n-- key: [id]\nSELECT id FROM orders WHERE quantity < 0\n"
    )
    (folder / "neg.test.yaml").write_text(
        "cases:\n  - name: fires\n    rows:\n      orders: [{id: 1, quantty: -1}]\n"
        "      ordrs: [{id: 2}]\n    expect: {keys: [1]}\n"
    )
    done = cli("lint", str(folder), "--schema", str(schema))
    assert done.returncode == 2
    assert done.stdout.splitlines() == [
        f"{folder}/neg.test.yaml:2: 'fires': orders has no column 'quantty'; "
        "did you mean 'quantity'?",
        f"{folder}/neg.test.yaml:2: 'fires': table 'ordrs' is not in the schema file; "
        "did you mean 'orders'?",
    ]


def test_a_dump_s_meta_commands_hide_no_table_from_lint(tmp_path: Path) -> None:
    """pg_dump 15.20 and later put `\\restrict KEY` at the top of a dump; read as SQL, that
    line swallowed a CREATE TABLE right after it (a dump trimmed of its SET lines), and lint
    said the table was not in the schema. COPY data of a dump with rows is not SQL either."""
    dump = (
        "\\restrict RSEusGHGIcK5TZdtkMB2FFGpMddNvc00\n"
        "CREATE TABLE public.orders (id bigint NOT NULL, quantity int);\n"
        "COPY public.orders (id, quantity) FROM stdin;\n"
        "1\t-1\n"
        "\\.\n"
        "\\connect other\n"
        "CREATE TABLE public.payments (id bigint, state text);\n"
        "\\unrestrict RSEusGHGIcK5TZdtkMB2FFGpMddNvc00\n"
    )
    assert load_schema(dump) == {
        "public.orders": {"id": "BIGINT", "quantity": "INT"},
        "orders": {"id": "BIGINT", "quantity": "INT"},
        "public.payments": {"id": "BIGINT", "state": "TEXT"},
        "payments": {"id": "BIGINT", "state": "TEXT"},
    }
    schema = tmp_path / "schema.sql"
    schema.write_text(dump)
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "neg.sql").write_text(
        "-- description: x\n-- key: [id]\nSELECT id FROM orders WHERE quantity < 0\n"
    )
    done = cli("lint", str(folder), "--schema", str(schema))
    assert (done.returncode, done.stdout) == (0, ""), done.stderr


# --- the hint to write `key:` when a keyless query's columns are aggregates (issue 27 §4b) --

WHY = (
    " without `key:` a row's identity is its whole value, so a row whose {fn} moves is a new "
    "offending row each run (a row gone and a row appeared in the incident's thread); "
)


def test_a_keyless_query_of_aggregates_is_hinted_at_its_line_and_still_passes(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "grouped.sql").write_text(
        "-- description: no customer owes money\n"
        "SELECT customer_id,\n"
        "       sum(amount) AS balance\n"
        "FROM payments GROUP BY customer_id HAVING sum(amount) < 0\n"
    )
    (folder / "total.sql").write_text(
        "-- description: the books balance\n"
        "SELECT sum(amount) AS total FROM payments HAVING sum(amount) <> 0\n"
    )
    (folder / "windowed.sql").write_text(
        "-- description: no running balance below zero\n"
        "SELECT id, sum(amount) OVER (ORDER BY id) AS running, count(*) OVER () AS n\n"
        "FROM payments\n"
    )
    (folder / "keyed.sql").write_text(
        "-- description: keyed\n-- key: [customer_id]\n"
        "SELECT customer_id, sum(amount) AS balance FROM payments GROUP BY customer_id\n"
        "HAVING sum(amount) < 0\n"
    )
    (folder / "plain.sql").write_text(
        "-- description: no aggregates\nSELECT id, amount FROM payments WHERE amount < 0\n"
    )
    (folder / "inner.sql").write_text(
        "-- description: aggregates only in a subquery, WHERE and HAVING\n"
        "SELECT p.order_id, (SELECT max(o.id) FROM orders o) AS newest FROM payments p\n"
        "WHERE p.amount > (SELECT avg(amount) FROM payments)\n"
        "GROUP BY p.order_id HAVING count(*) > 1\n"
    )
    (folder / "derived.sql").write_text(
        "-- description: aggregate in a FROM subquery\n"
        "SELECT x.order_id FROM (SELECT order_id, count(*) AS n FROM payments GROUP BY 1) x\n"
        "WHERE x.n > 2\n"
    )
    done = cli("lint", str(folder))
    assert done.returncode == 0, done.stdout + done.stderr  # a hint never fails lint
    assert done.stdout.splitlines() == [
        f"{folder}/grouped.sql:3: hint: no `key:`, and column 'balance' is computed by an "
        "aggregate (sum):"
        + WHY.format(fn="sum")
        + "write `key: [customer_id]` (the columns that are not aggregates)",
        f"{folder}/total.sql:2: hint: no `key:`, and column 'total' is computed by an "
        "aggregate (sum):"
        + WHY.format(fn="sum")
        + "the query returns one row: give it a constant label, e.g. "
        "`SELECT 'all' AS scope, …` with `key: [scope]`",
        f"{folder}/windowed.sql:2: hint: no `key:`, and columns 'running', 'n' are computed by "
        "aggregates (sum … OVER, count … OVER):"
        + WHY.format(fn="sum … OVER or count … OVER")
        + "write `key: [id]` (the columns that are not aggregates)",
    ]
    assert "7 invariants valid, 0 with errors" in done.stderr
    document = cli("lint", str(folder), "--format", "json")
    levels = {(Path(p["path"]).name, p["level"]) for p in json.loads(document.stdout)["problems"]}
    assert levels == {("grouped.sql", "hint"), ("total.sql", "hint"), ("windowed.sql", "hint")}


@pytest.mark.parametrize(
    ("sql", "advice"),
    [
        (
            "SELECT count(*) AS n, max(id) FROM orders GROUP BY status HAVING count(*) > 1",
            "select the GROUP BY columns too and name them in `key:`",
        ),
        (
            "SELECT *, round(avg(quantity), 2) FROM orders GROUP BY id",
            "write `key:` naming the columns that are not aggregates (list them, not `*`)",
        ),
        (
            "SELECT status, count(*) FROM orders GROUP BY status\n"
            "UNION ALL SELECT 'x', 1 FROM payments",
            "write `key: [status]` (the columns that are not aggregates)",
        ),
        (
            "SELECT sum(quantity) OVER () AS everything FROM orders",
            "select the columns that identify a row and name them in `key:`",
        ),
    ],
)
def test_the_key_hint_suggests_what_fits_the_query(sql: str, advice: str) -> None:
    from monitor.authoring.lint import key_hint_message
    from monitor.fence.builtin_catalog import builtin_catalog
    from monitor.fence.sqltree import parse

    statement = parse(sql)["stmts"][0]["stmt"]["SelectStmt"]
    found = key_hint_message(statement, builtin_catalog())
    assert found is not None
    assert found[0].endswith("; " + advice), found[0]


def test_the_summary_says_whose_tables_and_columns_went_unchecked(tmp_path: Path) -> None:
    """ "valid" never reads as more than lint checked: without a schema for an invariant's
    target, its tables and columns were not looked at (a misspelt table passes), and the
    summary and the JSON say so, naming them."""
    (tmp_path / "shop.sql").write_text(SCHEMA, encoding="utf-8")
    (tmp_path / "invmon.yaml").write_text(
        "targets:\n  shop: {schema: shop.sql}\n  crm: {}\n", encoding="utf-8"
    )
    for target in ("shop", "crm"):
        folder = tmp_path / "invariants" / target
        folder.mkdir(parents=True)
        (folder / "no_ghost_rows.sql").write_text(
            "-- description: x\n-- key: [id]\nSELECT o.id FROM ordres AS o WHERE false\n",
            encoding="utf-8",
        )
    config = str(tmp_path / "invmon.yaml")
    done = cli("lint", "--config", config)
    assert done.returncode == 2  # shop's file names a table its schema lacks
    assert "unknown table 'ordres'" in done.stdout
    assert done.stderr.strip() == (
        "1 invariant valid, 1 with errors; tables and columns of 1 not checked (no schema for "
        "their target: pass --schema, or set `schema:` or `targets.NAME.schema` in the config)"
    )
    document = json.loads(cli("lint", "--config", config, "--format", "json").stdout)
    assert document["tables_unchecked"] == ["crm/no_ghost_rows"]
    given = cli("lint", "--config", config, "--schema", str(tmp_path / "shop.sql"))
    assert given.stderr.strip() == "0 invariants valid, 2 with errors"
    alone = cli("lint", "--config", config, "--select", "crm/")
    assert (alone.returncode, alone.stderr.strip()) == (
        0,
        "1 invariant valid, 0 with errors; tables and columns not checked (no schema: pass "
        "--schema, or set `schema:` or `targets.NAME.schema` in the config)",
    )
