"""What a held-out walk-through by a dbt user found, each held to the behaviour it expected."""

from __future__ import annotations

from pathlib import Path

from helpers import cli

from monitor.authoring.fixtures import Case, compare
from monitor.authoring.schema_check import check_against_schema, load_schema

SCHEMA = """
CREATE SCHEMA billing;
CREATE TABLE billing."LedgerEntries" (entry_id bigint PRIMARY KEY, "InvoiceId" bigint);
CREATE TABLE invoices (invoice_id bigint PRIMARY KEY, state text);
CREATE TABLE payments (payment_id bigint PRIMARY KEY, invoice_id bigint);
ALTER TABLE invoices ADD COLUMN due_on date;
"""
TABLES = load_schema(SCHEMA)


def problems(sql: str) -> list[str]:
    return [p.message for p in check_against_schema(sql, TABLES)]


def test_an_empty_rows_expectation_fails_when_rows_come_back() -> None:
    case = Case("rows empty", 1, {}, rows_expected=[])
    assert not compare(case, ["[1]"], 1, [{"id": 1}]).passed
    assert compare(case, [], 0, []).passed


def test_names_fold_as_postgresql_folds_them() -> None:
    assert problems('SELECT le.entry_id FROM billing."LedgerEntries" AS le') == []
    assert problems('SELECT le."InvoiceId" FROM billing."LedgerEntries" le') == []
    assert problems("SELECT le.entry_id FROM billing.LedgerEntries AS le") == [
        "unknown table 'billing.ledgerentries': not in the schema file"
    ]
    assert problems('SELECT le.InvoiceId FROM billing."LedgerEntries" AS le') == [
        "unknown column le.invoiceid: table billing.LedgerEntries has no column 'invoiceid'; "
        "did you mean 'InvoiceId'?"
    ]
    # Written as it says, the name is found: unquoted, LedgerEntries is ledgerentries.
    assert problems('SELECT entry_id FROM "LedgerEntries"') == [
        "unknown table 'LedgerEntries': not in the schema file; it is in schema billing: "
        'write billing."LedgerEntries"'
    ]
    assert problems('SELECT entry_id FROM billing."LedgerEntries"') == []


def test_advice_to_qualify_a_table_is_written_as_sql_reads_it() -> None:
    """A reserved word, a name with a dot: each part quoted where SQL needs it."""
    tables = {"auth.user": {"id": "int"}, "billing.weird.name": {"id": "int"}}
    said = [p.message for p in check_against_schema('SELECT id FROM "user"', tables)]
    assert said == [
        "unknown table 'user': not in the schema file; it is in schema auth: write auth.\"user\""
    ]
    said = [p.message for p in check_against_schema('SELECT id FROM "weird.name"', tables)]
    assert said == [
        "unknown table 'weird.name': not in the schema file; it is in schema billing: "
        'write billing."weird.name"'
    ]


def test_whole_rows_added_columns_and_ambiguity_are_judged_as_postgresql_does() -> None:
    assert problems("SELECT to_jsonb(i) AS doc FROM invoices AS i") == []
    assert problems("SELECT i.due_on FROM invoices i") == []  # ALTER TABLE … ADD COLUMN
    assert problems(
        "SELECT invoice_id FROM invoices i JOIN payments p ON p.invoice_id = i.invoice_id"
    ) == [
        "column reference 'invoice_id' is ambiguous: table invoices and table payments both "
        "have it; qualify it"
    ]


def test_lint_says_what_a_dbt_user_needs(tmp_path: Path) -> None:
    schema = tmp_path / "schema.sql"
    schema.write_text(SCHEMA + "\nCREATE TABLEX nope (id int);\n")
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "typo.sql").write_text(
        "-- description: x\n-- key: [invoice_id]\nSELECT i.invoce_id FROM invoices AS i\n"
    )
    (folder / "comment.sql").write_text(
        "-- description: x\n-- a comment right under it\nSELECT 1 AS a WHERE false\n"
    )
    (folder / "ok.sql").write_text("-- description: x\nSELECT 1 AS a WHERE false\n")
    (folder / "ok.test.yaml").write_text("case:\n  - name: x\n")
    done = cli("lint", str(folder), "--schema", str(schema))
    out = done.stdout
    assert f"{schema}:8: cannot parse the schema file: syntax error at or near" in out
    assert "is the query's 'invoce_id' a misspelling of 'invoice_id'?" in out
    assert "an ordinary comment right under the header needs a blank line before it" in out
    assert "expected `cases:`, a list of named cases; did you mean 'case' -> 'cases'?" in out
    assert done.stderr.strip() == "0 invariants valid, 3 with errors"
    nothing = cli("lint", str(folder), "--select", "nope")
    assert nothing.returncode == 2
    assert nothing.stderr.startswith("invmon: --select 'nope' matches no invariant; names: ")


def test_test_names_the_schema_line_and_the_meta_commands_it_left_out(
    tmp_path: Path, database: str
) -> None:
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "x.sql").write_text("-- description: x\nSELECT 1 AS a WHERE false\n")
    schema = tmp_path / "schema.sql"
    schema.write_text("\\restrict abc\nCREATE TABLE a (id int);\n\\unrestrict abc\n")
    done = cli(
        "test",
        "--invariants",
        str(folder),
        "--schema",
        str(schema),
        env={"INVMON_TEST_DSN": database},
    )
    assert f"warning: {schema}: 2 psql meta-command lines (such as \\restrict) left out" in (
        done.stderr
    )
    schema.write_text("CREATE TABLE a (id int);\n\nCREATE TABLE b (id int,,);\n")
    broken = cli(
        "test",
        "--invariants",
        str(folder),
        "--schema",
        str(schema),
        env={"INVMON_TEST_DSN": database},
    )
    assert broken.stderr.strip() == (
        f'invmon: {schema}:3: cannot parse: syntax error at or near ","'
    )


def test_init_again_does_not_bring_back_the_example(tmp_path: Path) -> None:
    cli("init", str(tmp_path))
    for example in (tmp_path / "invariants").iterdir():
        example.unlink()
    (tmp_path / "invariants" / "mine.sql").write_text(
        "-- description: x\nSELECT 1 AS a WHERE false\n"
    )
    cli("init", str(tmp_path))
    assert sorted(p.name for p in (tmp_path / "invariants").iterdir()) == ["mine.sql"]
