"""`invmon test`: fixture cases prove an invariant fires; a broken invariant fails them with
a readable key diff; an invariant with no firing case is called untested."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from builders import config_file
from helpers import cli, invmon

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "deploy" / "demo" / "schema.sql"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    target = tmp_path / "invariants"
    target.mkdir()
    for name in ("duplicate_settled_refunds.sql", "duplicate_settled_refunds.test.yaml"):
        shutil.copy(ROOT / "invariants" / name, target / name)
    return target


def run(folder: Path, admin_dsn: str, *more: str):  # type: ignore[no-untyped-def]
    return cli(
        "test", "--invariants", str(folder), "--schema", str(SCHEMA), "--dsn", admin_dsn, *more
    )


def test_the_shipped_fixtures_all_pass_strictly(admin_dsn: str) -> None:
    done = invmon(
        "test",
        "--invariants",
        str(ROOT / "invariants"),
        "--schema",
        str(SCHEMA),
        "--dsn",
        admin_dsn,
        "--strict",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    total = done.stdout.count("  ✅ ")
    assert total > 0 and "❌" not in done.stdout
    assert done.stdout.strip().endswith(
        f"{total} of {total} cases passed; 0 invariants failing, 0 untested"
    )


def test_expected_keys_that_differ_fail_with_a_readable_diff(folder: Path, admin_dsn: str) -> None:
    fixture = folder / "duplicate_settled_refunds.test.yaml"
    fixture.write_text(fixture.read_text().replace("keys: [[10]]", "keys: [[11]]"))
    done = run(folder, admin_dsn)
    assert done.returncode == 1
    assert (
        "  ❌ a dispute paid back twice fires, once: missing keys [11]; unexpected keys [10]"
        in (done.stdout.splitlines())
    )


NUMERIC_KEYS = """\
cases:
  - name: a number for a numeric key
    rows: {invoices: [{invoice_ref: 1000, amount: -5.00}]}
    expect: {keys: [[1000]]}
  - name: a number for a numeric value
    rows: {invoices: [{invoice_ref: 1000, amount: -5.00}]}
    expect: {rows: [{invoice_ref: "1000", amount: -5.00}]}
  - name: another number
    rows: {invoices: [{invoice_ref: 1000, amount: -5.00}]}
    expect: {keys: [[999]]}
  - name: written as returned
    rows: {invoices: [{invoice_ref: 1000, amount: -5.00}]}
    expect: {keys: [["1000"]], rows: [{invoice_ref: "1000", amount: "-5.00"}]}
"""


def test_a_number_where_the_database_returns_text_says_how_to_write_it(
    tmp_path: Path, admin_dsn: str
) -> None:
    schema = tmp_path / "schema.sql"
    schema.write_text(
        "CREATE TABLE invoices (invoice_ref numeric PRIMARY KEY, amount numeric(12, 2));"
    )
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "negative.sql").write_text(
        "-- description: x\n-- key: [invoice_ref]\n"
        "SELECT i.invoice_ref, i.amount FROM invoices AS i WHERE i.amount < 0\n"
    )
    (folder / "negative.test.yaml").write_text(NUMERIC_KEYS)
    done = cli("test", "--invariants", str(folder), "--schema", str(schema), "--dsn", admin_dsn)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[1:5] == [
        '  ❌ a number for a numeric key: missing keys [1000]; unexpected keys ["1000"]; values '
        'are compared as the database returns them, and it returns these as text: write "1000"',
        '  ❌ a number for a numeric value: missing rows {"amount": -5.0, "invoice_ref": "1000"}; '
        'unexpected rows {"amount": "-5.00", "invoice_ref": "1000"}; values are compared as the '
        'database returns them, and it returns these as text: write "-5.00"',
        '  ❌ another number: missing keys [999]; unexpected keys ["1000"]; values are compared '
        "as the database returns them, and it returns text where the case has a number, e.g. "
        '"1000": quote them',
        "  ✅ written as returned",
    ]


def test_deleting_the_where_clause_makes_the_fixture_fail(folder: Path, admin_dsn: str) -> None:
    query = folder / "duplicate_settled_refunds.sql"
    query.write_text(query.read_text().replace("WHERE r.status = 'settled'\n", ""))
    done = run(folder, admin_dsn)
    assert done.returncode == 1
    assert (
        "  ❌ a retry after a failed attempt is fine: expected 0 offending rows, got 1: [10]"
        in done.stdout.splitlines()
    )


def test_an_invariant_without_a_firing_case_is_untested(folder: Path, admin_dsn: str) -> None:
    fixture = folder / "duplicate_settled_refunds.test.yaml"
    fixture.unlink()
    lenient = run(folder, admin_dsn)
    assert lenient.returncode == 0
    assert (
        "  warning: untested: it has no duplicate_settled_refunds.test.yaml, so no case shows "
        "it firing; an invariant that never returns a row is a check that cannot fail"
        in (lenient.stdout.splitlines())
    )
    strict = run(folder, admin_dsn, "--strict")
    assert strict.returncode == 2
    assert "  error: untested: " in strict.stdout
    fixture.write_text("cases:\n  - name: holds on no rows\n    rows: {}\n    expect: {count: 0}\n")
    holding_only = run(folder, admin_dsn)
    assert (
        "  warning: untested: no case in duplicate_settled_refunds.test.yaml shows it firing; "
        "an invariant that never returns a row is a check that cannot fail"
        in (holding_only.stdout.splitlines())
    )


def test_a_malformed_fixture_is_reported_at_its_line(folder: Path, admin_dsn: str) -> None:
    (folder / "duplicate_settled_refunds.test.yaml").write_text(
        "cases:\n  - name: fine\n    rows: {}\n    expect: {count: 0}\n"
        "  - name: bad\n    rows: {}\n"
    )
    done = run(folder, admin_dsn)
    assert done.returncode == 2  # an invalid file (docs/cli.md), not a failed case
    # The refused case never ran: the summary says so beside the count of those that did.
    assert done.stdout.splitlines()[-1].endswith("untested; 1 fixture problem above")
    assert (
        f"{folder}/duplicate_settled_refunds.test.yaml:5: 'bad': `expect` needs `keys`, "
        "`count` or `rows`" in done.stdout.splitlines()
    )


def test_fixture_files_that_would_make_a_case_vacuous_are_refused(tmp_path: Path) -> None:
    from monitor.authoring.fixtures import load_fixture

    cases = {
        "twice.yaml": (
            "cases:\n  - name: a\n    rows:\n      refunds: []\n      refunds: []\n"
            "    expect: {count: 0}\n",
            "5: 'refunds' appears twice",
        ),
        "extra.yaml": (
            "cases:\n  - name: a\n    rows: {}\n    expect: {count: 0, keys_absent: [1]}\n",
            "2: 'a': unknown `expect` field(s) ['keys_absent']; use keys, count or rows",
        ),
        "statement.yaml": (
            'cases:\n  - name: a\n    rows:\n      t: [{x: !sql "1); DELETE FROM t; SELECT (1"}]\n'
            "    expect: {count: 0}\n",
            "!sql",
        ),
        "twice_inline.yaml": (  # no comma cut: quoting the !sql value would not help
            "cases:\n  - name: a\n    rows:\n      t: [{id: 1, at: !sql now(), id: 2}]\n"
            "    expect: {count: 0}\n",
            "'id' appears twice",
        ),
        "side_effect.yaml": (
            'cases:\n  - name: a\n    rows:\n      t: [{x: !sql "pg_sleep(1)"}]\n'
            "    expect: {count: 0}\n",
            "function pg_sleep() is VOLATILE",
        ),
    }
    for name, (text, fragment) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        fixture = load_fixture(path, ("id",))
        assert fixture.cases == [], name
        assert len(fixture.problems) == 1, (name, fixture.problems)
        assert fragment in str(fixture.problems[0]), (name, str(fixture.problems[0]))
        # Refused as written, quoting would change nothing: no advice to quote it.
        assert "must be quoted" not in str(fixture.problems[0]), name


def test_a_key_returned_twice_must_be_expected_twice() -> None:
    from monitor.authoring.fixtures import Case, compare

    case = Case("one offender", 1, {}, keys=['["10"]'])
    result = compare(case, ['["10"]', '["10"]'], 2)
    assert (result.passed, result.missing, result.unexpected) == (False, [], ['["10"]'])


def test_a_case_runs_the_invariant_read_only_as_the_daemon_does(
    folder: Path, admin_dsn: str, tmp_path: Path
) -> None:
    schema = tmp_path / "schema.sql"
    schema.write_text(
        SCHEMA.read_text() + "\nCREATE FUNCTION insert_job() RETURNS SETOF bigint LANGUAGE sql AS "
        "'INSERT INTO jobs (job_id, kind, state) VALUES (99, ''x'', ''done'') RETURNING job_id';\n"
        "CREATE FUNCTION log_and_return() RETURNS SETOF bigint LANGUAGE sql STABLE AS "
        "'SELECT insert_job()';\n"
    )
    (folder / "duplicate_settled_refunds.sql").write_text(
        "-- description: writes\n-- key: [id]\nSELECT id FROM log_and_return() AS id\n"
    )
    (folder / "duplicate_settled_refunds.test.yaml").write_text(
        "cases:\n  - name: fires\n    rows: {}\n    expect: {keys: [[99]]}\n"
    )
    # User code runs only when trusted by name; trusted, its STABLE label is still stopped
    # by the READ ONLY transaction.
    config = config_file(tmp_path, fence={"allow_functions": ["log_and_return"]})
    done = invmon(
        "test",
        *("--config", str(config), "--invariants", str(folder)),
        *("--schema", str(schema), "--dsn", admin_dsn),
    )
    assert done.returncode == 1
    assert (
        "  ❌ fires: cannot execute INSERT in a read-only transaction" in done.stdout.splitlines()
    ), done.stdout


def forever(folder: Path, column: str, expect: str) -> None:
    """The folder's only invariant and fixture: jobs holding a lease forever, returning
    job_id and `column`; one case with one such job, expecting `expect`."""
    (folder / "duplicate_settled_refunds.sql").unlink()
    (folder / "duplicate_settled_refunds.test.yaml").unlink()
    (folder / "forever.sql").write_text(
        "-- description: no job holds its lease forever\n-- key: [job_id]\n"
        f"SELECT job_id, {column} FROM jobs WHERE lease_until = 'infinity'\n"
    )
    (folder / "forever.test.yaml").write_text(
        "cases:\n  - name: a lease that never ends fires\n    rows:\n      jobs:\n"
        "        - {job_id: 1, kind: x, state: in_progress, owner: w, lease_until: infinity}\n"
        f"    expect: {expect}\n"
    )


def test_invmon_test_and_the_daemon_read_the_same_rows_the_same_way(
    folder: Path, admin_dsn: str, database: str
) -> None:
    """A lease of 'infinity' is a row like any other: counted by the daemon's runner and by
    invmon test alike, because both go through one executor."""
    from monitor.authoring.pgtemp import apply_sql
    from monitor.execution.runner import Runner
    from monitor.invariants.loader import load_directory

    forever(folder, "lease_until::date AS until", "{keys: [[1]]}")
    done = run(folder, admin_dsn, "--strict")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "  ✅ a lease that never ends fires" in done.stdout.splitlines()
    apply_sql(database, SCHEMA.read_text())
    apply_sql(
        database,
        "INSERT INTO jobs (job_id, kind, state, owner, lease_until)"
        " VALUES (1, 'x', 'in_progress', 'w', 'infinity')",
    )
    [inv] = load_directory(folder).invariants
    with Runner(database) as runner:
        result = runner.run_one(inv)
    assert (result.status, result.count, result.rows) == (
        "violated",
        1,
        [{"job_id": 1, "until": "infinity"}],
    )


def test_an_expected_row_naming_a_column_the_query_does_not_return_fails(
    folder: Path, admin_dsn: str
) -> None:
    """It was compared as null: `{id: 1, note: null}` passed against a query returning no
    `note`, and a non-null one failed quoting a column the database never returned."""
    forever(folder, "kind", "{rows: [{job_id: 1, note: null}]}")
    done = run(folder, admin_dsn, "--strict")
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "  ❌ a lease that never ends fires: `expect.rows` names note, which the query does not "
        "return (it returns job_id, kind)"
    ) in done.stdout.splitlines(), done.stdout


def test_without_a_schema_cases_that_need_tables_are_not_run_and_the_fix_is_named(
    tmp_path: Path, admin_dsn: str
) -> None:
    shutil.copytree(ROOT / "invariants", tmp_path / "invariants")
    # One invariant that reads no table: it alone could run, but the run is refused whole.
    (tmp_path / "invariants" / "no_tables.sql").write_text(
        "-- description: x\nWITH t AS (SELECT 1 AS a) SELECT a FROM t WHERE a > 1\n"
    )
    done = cli("test", "--dsn", admin_dsn, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""  # nothing ran: no failing case, no false "untested"
    assert done.stderr == (
        "invmon: no schema was given, and 4 invariants with cases read tables a scratch "
        "database does not have (accounts, credit_log, disputes, invoices, jobs and 2 more); "
        "nothing was run. Give the schema with --schema FILE or `schema: FILE` in invmon.yaml "
        "(per target under `targets:`), e.g. the output of `pg_dump --schema-only` of the "
        "production database\n"
    )


def test_cases_of_invariants_that_read_no_table_need_no_schema(
    tmp_path: Path, admin_dsn: str
) -> None:
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "no_tables.sql").write_text(
        "-- description: x\nWITH t AS (SELECT 1 AS a) SELECT a FROM t WHERE a > 1\n"
    )
    (folder / "no_tables.test.yaml").write_text("cases:\n  - name: holds\n    expect: {count: 0}\n")
    done = cli("test", "--dsn", admin_dsn, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "✅ holds" in done.stdout


def test_a_missing_invariants_folder_is_said_alone_not_as_an_invalid_file(tmp_path: Path) -> None:
    """It printed `invariants:0: invariants folder not found` and then told the reader to
    fix invalid invariant files, of which there were none."""
    done = cli("test", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr.strip()) == (
        2,
        "",
        "invmon: invariants folder not found: invariants; pass --invariants DIR",
    )
