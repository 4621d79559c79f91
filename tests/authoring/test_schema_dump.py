"""A production schema as pg_dump writes it loads into the scratch database of `invmon test`:
psql meta-commands, owners and grants naming roles the server lacks, and extensions it may
lack are left out with a word; a statement that truly fails is a sentence at its line."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from helpers import cli

from monitor.authoring.fillers import Needed, NoFiller, filler
from monitor.authoring.schema_dump import dump_statements

DUMP = Path(__file__).parent / "dumps" / "pg_dump_15_20.sql"  # real pg_dump 15.20 output


def test_a_pg_dump_file_is_split_into_what_runs_what_is_tried_and_what_is_left_out() -> None:
    statements = dump_statements(DUMP.read_text())
    assert Counter(s.handling for s in statements) == {"run": 29, "skip": 12, "try": 3}
    assert not any(s.text.lstrip().startswith("\\") for s in statements)
    [extension] = [s for s in statements if "CREATE EXTENSION" in s.text]
    assert (extension.line, extension.handling) == (34, "try")


def write_case(folder: Path) -> None:
    folder.mkdir()
    (folder / "big_orders.sql").write_text(
        "-- description: No order is over 1000.\n-- key: [id]\n"
        "SELECT o.id FROM shop.orders AS o WHERE o.total > 1000\n"
    )
    (folder / "big_orders.test.yaml").write_text(
        "cases:\n"
        "  - name: one big order\n"
        "    rows:\n"
        "      shop.customers: [{id: 1, email: a@example.com}]\n"
        "      shop.orders:\n"
        "        - {id: 7, customer_id: 1, total: 5000, placed_at: 2026-01-01T00:00:00Z}\n"
        "        - {id: 8, customer_id: 1, total: 10, placed_at: 2026-01-01T00:00:00Z}\n"
        "    expect: {keys: [7]}\n"
    )


def test_invmon_test_runs_cases_on_a_schema_from_pg_dump(database: str, tmp_path: Path) -> None:
    write_case(tmp_path / "invariants")
    done = cli(
        "test",
        "--invariants",
        str(tmp_path / "invariants"),
        "--schema",
        str(DUMP),
        env={"INVMON_TEST_DSN": database},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "✅ one big order" in done.stdout
    assert f"warning: {DUMP}: 12 owner and privilege statements left out" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_a_failing_schema_statement_is_a_sentence_at_its_line(
    database: str, tmp_path: Path
) -> None:
    write_case(tmp_path / "invariants")
    schema = tmp_path / "schema.sql"
    schema.write_text("CREATE TABLE a (id int);\n\nCREATE TABLE b (id int REFERENCES nowhere);\n")
    done = cli(
        "test",
        "--invariants",
        str(tmp_path / "invariants"),
        "--schema",
        str(schema),
        env={"INVMON_TEST_DSN": database},
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f'invmon: {schema}:3: relation "nowhere" does not exist'


def test_a_case_names_only_the_columns_its_invariant_reads(database: str, tmp_path: Path) -> None:
    folder = tmp_path / "invariants"
    write_case(folder)
    (folder / "big_orders.test.yaml").write_text(
        "cases:\n"
        "  - name: only what matters\n"  # email (NOT NULL UNIQUE) and placed_at are filled
        "    rows:\n"
        "      shop.customers: [{id: 1}, {id: 2}]\n"
        "      shop.orders:\n"
        "        - {id: 7, customer_id: 1, total: 5000}\n"
        "        - {id: 8, customer_id: 2, total: 5}\n"
        "    expect: {keys: [7]}\n"
        "  - name: an order of nobody\n"
        "    rows:\n"
        "      shop.orders: [{id: 9, total: 5000}]\n"
        "    expect: {keys: [9]}\n"
    )
    done = cli(
        "test",
        "--invariants",
        str(folder),
        "--schema",
        str(DUMP),
        env={"INVMON_TEST_DSN": database},
    )
    assert "✅ only what matters" in done.stdout, done.stdout
    assert (
        f"❌ an order of nobody: {folder}/big_orders.test.yaml:9: a row of shop.orders: "
        "customer_id is NOT NULL and refers to shop.customers: list the shop.customers row "
        "under `rows:` and set customer_id to it"
    ) in done.stdout


@pytest.mark.parametrize(
    ("need", "first", "second"),
    [
        (Needed("qty", "integer", "N", "integer"), 1, 2),
        (Needed("code", "character varying(4)", "S", "character varying"), "de-1", "de-2"),
        (Needed("ok", "boolean", "B", "boolean"), False, False),
        (Needed("state", "order_status", "E", "order_status", "new"), "new", "new"),
        (Needed("tags", "text[]", "A", "text[]"), [], []),
        (Needed("doc", "jsonb", "U", "jsonb"), {}, {}),
    ],
)
def test_fillers_fit_their_type_and_differ_per_row(
    need: Needed, first: object, second: object
) -> None:
    assert (filler(need, 1), filler(need, 2)) == (first, second)


def test_a_column_without_a_filler_says_what_to_write() -> None:
    with pytest.raises(NoFiller, match=r"^area \(polygon\) is NOT NULL with no default"):
        filler(Needed("area", "polygon", "G", "polygon"), 1)
