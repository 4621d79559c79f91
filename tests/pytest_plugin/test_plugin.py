"""The pytest plugin, driven as an application would use it: small projects run by pytest's
own `pytester`, against a real PostgreSQL database with the reference schema, asserting the
shipped invariant files."""

from __future__ import annotations

import re
import shlex
import shutil
import signal
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import INVARIANTS
from helpers import SLOW_INVARIANT, active_runs, interruptible, wait_for

from monitor.pytest_plugin.checks import TEST_DATABASE_HINT

pytestmark = pytest.mark.usefixtures("schema_database")

# One settled refund per dispute, and a credit whose ledger entry matches: every shipped
# invariant holds over these rows.
GOOD_ROWS = """
    INSERT INTO accounts (account_id, email, credit_balance_eur)
        VALUES (1, 'ana@example.com', 20.00);
    INSERT INTO credit_log (account_id, amount_eur, reason) VALUES (1, 20.00, 'refund 10');
    INSERT INTO disputes (dispute_id, account_id, reason, amount_eur) VALUES (10, 1, 'x', 20.00);
    INSERT INTO refunds (refund_id, dispute_id, amount_eur, status, settled_at)
        VALUES (101, 10, 20.00, 'settled', now());
"""
# The refund settled a second time: duplicate_settled_refunds returns dispute 10.
SECOND_SETTLEMENT = """
    INSERT INTO refunds (refund_id, dispute_id, amount_eur, status, settled_at)
        VALUES (102, 10, 20.00, 'settled', now());
"""


# A soak case that fails on its seed, 7: the refund is settled twice.
SETTLED_TWICE = """
    import pytest

    @pytest.mark.parametrize("seed", [7])
    @pytest.mark.invariants
    def test_refunds(write, seed):
        write.good_rows()
        write.second_settlement()
    """


def rerun_line(result: pytest.RunResult) -> str:
    """The failure report's own rerun command (the short summary repeats it whole in CI:
    pytest does not cut it there)."""
    report = result.stdout.str().split("short test summary info")[0]
    [line] = [x for x in report.splitlines() if "rerun this case alone: " in x]
    return line.split("rerun this case alone: ", 1)[1]


@pytest.fixture
def project(
    pytester: pytest.Pytester, schema_database: str, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """An application's test folder: the shipped invariants, and the test database named by
    INVMON_DSN (the plugin's default `invmon_dsn`)."""
    shutil.copytree(INVARIANTS, pytester.path / "invariants")
    pytester.makeini("[pytest]\ninvmon_invariants = invariants\n")
    monkeypatch.setenv("INVMON_DSN", schema_database)
    # The helper that writes rows, as an application's own fixtures would.
    pytester.makeconftest(
        f"""
        import psycopg, pytest

        class Writer:
            def __call__(self, statement):
                with psycopg.connect({schema_database!r}, autocommit=True) as conn:
                    conn.execute(statement)

            def good_rows(self):
                self({GOOD_ROWS!r})

            def second_settlement(self):
                self({SECOND_SETTLEMENT!r})

        @pytest.fixture
        def write():
            # Each inner test owns the database's rows: it starts from none.
            writer = Writer()
            writer("TRUNCATE accounts, credit_log, disputes, refunds, jobs, invoices,"
                   " receipt_objects RESTART IDENTITY")
            return writer
        """
    )
    return pytester.path


def test_it_passes_a_project_whose_invariants_hold(
    pytester: pytest.Pytester, project: Path
) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_fixture(write, invariants):
            write.good_rows()
            invariants.assert_hold()
            results = invariants.results()
            assert [(r.invariant, r.status, r.count) for r in results] == [
                ("balance_ledger_drift", "ok", 0),
                ("duplicate_settled_refunds", "ok", 0),
                ("expired_lease_jobs", "ok", 0),
                ("orphaned_receipts", "ok", 0),
            ]

        @pytest.mark.invariants
        def test_marker(write):
            write("UPDATE accounts SET email = email")
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=2)


def test_it_fails_naming_each_violated_invariant_its_count_rows_and_seed(
    pytester: pytest.Pytester, project: Path
) -> None:
    pytester.makepyfile(
        test_soak="""
        import pytest

        @pytest.mark.parametrize("seed", [3, 7])
        @pytest.mark.invariants
        def test_refunds(write, seed):
            write.good_rows()
            if seed == 7:
                write.second_settlement()
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "1 invariant violated after test_soak.py::test_refunds[7] (seed 7)" in out
    assert re.search(r"duplicate_settled_refunds\s+❌ violated\s+1\b", out), out
    assert "duplicate_settled_refunds: 1 offending row" in out
    # The row itself: dispute 10, two settled refunds, 40.00 in all, refunds 101 and 102.
    assert re.search(r"\b10\s+1\s+2\s+20\.00\s+40\.00\s+\[101, 102\]", out), out
    assert "3 held, 1 violated, 0 could not be evaluated" in out
    assert "seed: 7" in out
    command = "python -m pytest 'test_soak.py::test_refunds[7]'"
    assert f"rerun this case alone: {command}" in out

    # The command it gives reruns exactly that case, and it fails the same way again.
    again = pytester.runpytest_subprocess("test_soak.py::test_refunds[7]")
    again.assert_outcomes(failed=1)
    assert "duplicate_settled_refunds: 1 offending row" in again.stdout.str()


def test_the_rerun_command_runs_with_the_folder_given_on_the_command_line(
    pytester: pytest.Pytester, project: Path
) -> None:
    """The rerun line dropped --invmon-invariants, so the command it printed failed at setup
    ('invariants folder not found') instead of replaying the case."""
    (project / "invariants").rename(project / "checks")
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_soak=SETTLED_TWICE)
    first = pytester.runpytest_subprocess("--invmon-invariants", "checks")
    first.assert_outcomes(failed=1)
    command = rerun_line(first)
    assert command == "python -m pytest --invmon-invariants checks 'test_soak.py::test_refunds[7]'"
    again = pytester.runpytest_subprocess(*shlex.split(command)[3:])
    again.assert_outcomes(failed=1)
    assert "duplicate_settled_refunds: 1 offending row" in again.stdout.str()


def test_the_rerun_command_carries_an_ini_value_overridden_on_the_command_line(
    pytester: pytest.Pytester, project: Path
) -> None:
    """`-o invmon_invariants=checks` was left out of the rerun line, which then asserted
    the ini file's folder and passed."""
    (project / "invariants").rename(project / "checks")
    (project / "invariants").mkdir()  # the ini file's folder, now holding nothing that fails
    shutil.copy(
        project / "checks" / "expired_lease_jobs.sql",
        project / "invariants" / "expired_lease_jobs.sql",
    )
    pytester.makepyfile(test_soak=SETTLED_TWICE)
    first = pytester.runpytest_subprocess("-o", "invmon_invariants=checks")
    first.assert_outcomes(failed=1)
    command = rerun_line(first)
    assert command == (
        "python -m pytest -o invmon_invariants=checks 'test_soak.py::test_refunds[7]'"
    )
    again = pytester.runpytest_subprocess(*shlex.split(command)[3:])
    again.assert_outcomes(failed=1)


def test_the_rerun_command_keeps_the_applications_own_options_and_hides_a_password(
    pytester: pytest.Pytester, project: Path
) -> None:
    """The rerun line kept only invmon's options: a soak shaped by its own (here, how many
    settlements it makes) printed a line that passed."""
    conftest = project / "conftest.py"
    conftest.write_text(
        conftest.read_text()
        + "\ndef pytest_addoption(parser):\n"
        + "    parser.addoption('--settlements', type=int, default=1)\n"
        + "    parser.addoption('--app-url', default='')\n"
        + "    parser.addoption('--db-password', default='')\n"
        + "    parser.addoption('--api-token', default='')\n"
    )
    # The ini's testpaths, and a -k of the same word: a value equal to a test path was
    # taken for the path and dropped.
    (project / "checks").mkdir()
    (project / "checks" / "test_soak.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.parametrize("seed", [7])
            @pytest.mark.invariants
            def test_refunds(write, seed, request):
                write.good_rows()
                if request.config.getoption("--settlements") > 1:
                    write.second_settlement()
            """
        )
    )
    pytester.makeini("[pytest]\ninvmon_invariants = invariants\ntestpaths = checks\n")
    url = "postgresql://app:s3cret@db.example/app"
    secrets = ["--db-password", "pw_one", "--api-token=tok_two"]
    first = pytester.runpytest_subprocess(
        "--settlements", "2", "--app-url", url, *secrets, "-k", "checks"
    )
    first.assert_outcomes(failed=1)
    out = first.stdout.str()
    command = rerun_line(first)
    hidden = "'<hidden: it holds a password>'"
    assert command == (
        f"python -m pytest --settlements 2 --app-url {hidden} --db-password {hidden} "
        f"'--api-token=<hidden: it holds a password>' -k checks "
        "'checks/test_soak.py::test_refunds[7]'"
    )
    assert not {"s3cret", "pw_one", "tok_two"} & set(re.findall(r"\w+", out))
    words = [w.replace("<hidden: it holds a password>", "x") for w in shlex.split(command)[3:]]
    words[words.index("--app-url") + 1] = url
    again = pytester.runpytest_subprocess(*words)
    again.assert_outcomes(failed=1)


def test_a_dsn_flag_the_conftest_fixture_overrides_is_said_and_left_out_of_the_rerun(
    pytester: pytest.Pytester, project: Path, schema_database: str
) -> None:
    pytester.makeconftest(
        (project / "conftest.py").read_text()
        + f"\n@pytest.fixture\ndef invmon_dsn():\n    return {schema_database!r}\n"
    )
    pytester.makepyfile(test_soak=SETTLED_TWICE)
    unused = "postgresql://nobody@127.0.0.1:1/nothing"
    result = pytester.runpytest_subprocess("--invmon-dsn", unused)
    result.assert_outcomes(failed=1, warnings=1)
    out = result.stdout.str()
    assert "invmon: --invmon-dsn is not used: this project's invmon_dsn fixture" in out
    assert "rerun this case alone: python -m pytest 'test_soak.py::test_refunds[7]'" in out


def test_no_password_is_printed_with_a_failing_tests_arguments_and_locals(
    pytester: pytest.Pytester,
    project: Path,
    schema_database: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pytest prints a failing test's arguments and each frame's locals (-vv, -l): the
    `invariants` fixture, the config a project holds (a target's replica DSN, a token) and the
    fixture's own arguments, when a warning it gives is made an error, show no secret."""
    from psycopg.conninfo import make_conninfo

    # The servers the tests use trust their clients: a password is accepted and ignored.
    test_db = make_conninfo(schema_database, password="TESTDB-PW-1")
    pytester.makeconftest(
        (project / "conftest.py").read_text()
        + f"\n@pytest.fixture\ndef invmon_dsn():\n    return {test_db!r}\n"
    )
    (project / "invmon.yaml").write_text(
        "targets: {default: {}, replica: {dsn: '${REPLICA_DSN}'}}\n"
        "slack: {token: '${SLACK_BOT_TOKEN}'}\n"
    )
    pytester.makepyfile(
        test_soak="""
        def test_violated(write, invariants):
            write.good_rows()
            write.second_settlement()
            invariants.assert_hold()

        def test_its_own_assertion(write, invariants):
            config = invariants.project.config
            assert config.resolved_targets() == {}
        """
    )
    secrets = ["TESTDB-PW-1", "REPLICA-PW-2", "xoxb-TOKEN-3", "FLAG-PW-4"]
    env = {
        "REPLICA_DSN": "postgresql://monitor:REPLICA-PW-2@replica.invalid/app",
        "SLACK_BOT_TOKEN": "xoxb-TOKEN-3",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    failing = pytester.runpytest_subprocess("-vv", "-l", "--tb=long")
    failing.assert_outcomes(failed=2)
    # A warning made an error inside the fixture that holds the DSN as an argument.
    pytester.makeini("[pytest]\ninvmon_invariants = invariants\nfilterwarnings =\n    error\n")
    flagged = pytester.runpytest_subprocess(
        "-vv", "-l", "--tb=long", "--invmon-dsn", "postgresql://x:FLAG-PW-4@127.0.0.1:1/db"
    )
    flagged.assert_outcomes(errors=2)
    assert "--invmon-dsn is not used" in flagged.stdout.str()
    # pytest's own frames, which hold each fixture's value, shown too.
    (project / "conftest.py").write_text(
        (project / "conftest.py").read_text().split("\n@pytest.fixture\ndef invmon_dsn")[0]
    )
    pytester.makeini("[pytest]\ninvmon_invariants = invariants\n")
    traced = pytester.runpytest_subprocess(
        "-vv", "-l", "--full-trace", "--invmon-dsn", test_db, "test_soak.py::test_violated"
    )
    traced.assert_outcomes(failed=1)
    for result in (failing, flagged, traced):
        out = result.stdout.str() + result.stderr.str()
        assert [s for s in secrets if s in out] == []


def test_rows_in_a_failure_are_masked_as_configured(
    pytester: pytest.Pytester, project: Path
) -> None:
    (project / "invariants" / "emails.sql").write_text(
        "-- description: Accounts with no credit.\n-- key: [account_id]\n"
        "SELECT account_id, email FROM accounts WHERE credit_balance_eur = 0\n"
    )
    pytester.makepyfile(
        """
        def test_it(write, invariants):
            # Built here so that this line, which the traceback shows, does not hold it.
            email = "secret" + ".person@example.com"
            write(f"INSERT INTO accounts (account_id, email) VALUES (5, '{email}')")
            invariants.assert_hold(select="emails")
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "emails: 1 offending row" in out
    assert "secret.person@example.com" not in out
    assert "secret.person" not in out


def test_a_value_masked_in_one_failure_reads_the_same_in_the_next(
    pytester: pytest.Pytester, project: Path
) -> None:
    """Each check masked under a key of its own, so the same customer's email read
    differently in every failure of a session and could not be matched across them."""
    (project / "invariants" / "emails.sql").write_text(
        "-- description: Accounts with no credit.\n-- key: [account_id]\n"
        "SELECT account_id, email FROM accounts WHERE credit_balance_eur = 0\n"
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("seed", [1, 2])
        def test_it(write, invariants, seed):
            email = "secret" + ".person@example.com"
            write(f"INSERT INTO accounts (account_id, email) VALUES ({seed}, '{email}')")
            invariants.assert_hold(select="emails")
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=2)
    masked = re.findall(r"\[masked:[^\]]*\]", result.stdout.str())
    assert len(masked) >= 2 and len(set(masked)) == 1, masked


def test_eventually_passes_once_writes_that_land_late_have_settled(
    pytester: pytest.Pytester, project: Path
) -> None:
    # Correct credits keep landing while the test waits, one each poll for the first eight
    # (written from the watch, so no thread's timing decides the outcome on a busy machine);
    # the wait is over only once the ledger has stopped growing for the quiet window.
    pytester.makepyfile(
        """
        import os, psycopg

        def test_it(write, invariants):
            write.good_rows()
            entries = []
            def watch():
                if len(entries) < 8:
                    write("INSERT INTO credit_log (account_id, amount_eur, reason)"
                          " VALUES (1, 1, 'late');"
                          " UPDATE accounts SET credit_balance_eur = credit_balance_eur + 1")
                with psycopg.connect(os.environ["INVMON_DSN"]) as c:
                    entries.append(c.execute("SELECT count(*) FROM credit_log").fetchone()[0])
                return entries[-1]
            invariants.assert_hold_eventually(timeout=60, poll=0.05, quiet=0.3, watch=watch)
            # It accepted only after the last late entry, and a quiet window after it.
            assert entries[:9] == [2, 3, 4, 5, 6, 7, 8, 9, 9], entries
            assert set(entries[8:]) == {9}, entries
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)


def test_eventually_fails_at_the_deadline_when_the_system_never_settles(
    pytester: pytest.Pytester, project: Path
) -> None:
    pytester.makepyfile(
        """
        import itertools

        def test_it(invariants):
            busy = itertools.count()
            invariants.assert_hold_eventually(
                timeout=1.5, poll=0.1, quiet=1.0, watch=lambda: next(busy)
            )
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "the invariants did not settle after test_eventually_fails_at_the_deadline" in out
    assert "the system did not settle within 1.5 s: the invariants held, but the watched" in out
    assert "4 held, 0 violated, 0 could not be evaluated" in out


def test_eventually_fails_at_once_on_a_violation_that_lands_late(
    pytester: pytest.Pytester, project: Path
) -> None:
    pytester.makepyfile(
        """
        import threading, time

        def test_it(write, invariants):
            write.good_rows()
            polls = []
            def watch():
                polls.append(1)
                if len(polls) == 3:  # the second settlement lands while the test waits
                    write.second_settlement()
                return len(polls)
            started = time.monotonic()
            try:
                invariants.assert_hold_eventually(timeout=60, poll=0.05, quiet=30, watch=watch)
            finally:
                print("waited", time.monotonic() - started, "polls", len(polls))
        """
    )
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "1 invariant violated after" in out
    assert "seen on poll 3" in out
    assert "polls 3" in out  # not one poll more: it did not wait for the deadline


def test_a_file_the_fence_refuses_is_an_error_never_a_pass(
    pytester: pytest.Pytester, project: Path
) -> None:
    (project / "invariants" / "locks.sql").write_text(
        "-- description: Takes a lock.\nSELECT pg_advisory_lock(1) AS locked\n"
    )
    pytester.makepyfile(
        """
        import pytest

        def test_fixture(invariants):
            invariants.assert_hold()

        @pytest.mark.invariants
        def test_marker():
            pass
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(errors=2)
    out = result.stdout.str()
    assert "invmon: 1 problem in the invariant files; none is asserted until they are fixed" in out
    assert "locks.sql" in out
    assert "pg_advisory_lock" in out
    assert "Traceback" not in out


def test_an_invariant_the_database_cannot_run_is_not_a_pass(
    pytester: pytest.Pytester, project: Path
) -> None:
    (project / "invariants" / "missing.sql").write_text(
        "-- description: Reads a table this database lacks.\nSELECT 1 AS one FROM no_such_table\n"
    )
    pytester.makepyfile(
        """
        def test_it(invariants):
            invariants.assert_hold()
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "InvariantsNotEvaluated: 1 invariant could not be evaluated after" in out
    # Said of the test database: a target's dsn, which the runner's hint names, is not used.
    assert f'relation "no_such_table" does not exist: {TEST_DATABASE_HINT}' in out
    assert "dsn" not in out


def test_a_watched_list_that_grows_in_place_counts_as_activity(
    pytester: pytest.Pytester, project: Path
) -> None:
    """`watch=lambda: events` returns the same list object at every poll; compared with
    itself it never changed, and a wait settled while events were still landing."""
    pytester.makepyfile(
        """
        def test_it(write, invariants):
            write.good_rows()
            events = []
            def watch():
                if len(events) < 6:
                    events.append(len(events))  # work still landing, on the same list
                return events
            invariants.assert_hold_eventually(timeout=60, poll=0.05, quiet=0.3, watch=watch)
            assert len(events) == 6  # accepted only once the list stopped growing
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)


def test_a_missing_folder_names_the_session_s_option_once(
    pytester: pytest.Pytester, project: Path
) -> None:
    pytester.makepyfile("def test_it(invariants):\n    invariants.assert_hold()\n")
    result = pytester.runpytest_subprocess("--invmon-invariants", "nowhere")
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    said = "nowhere; pass --invmon-invariants DIR or set invmon_invariants in pytest's ini file"
    # Counted before the short summary, which repeats the message whole in CI.
    assert out.split("short test summary info")[0].count(said) == 1, out
    assert "invmon: invariants folder not found: " in out
    assert "During handling of the above exception" not in out


def test_without_a_database_it_says_how_to_name_one(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INVMON_DSN")
    pytester.makepyfile("def test_it(invariants):\n    invariants.assert_hold()\n")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(errors=1)
    assert "invmon: no test database for the invariants: pass --invmon-dsn" in result.stdout.str()


def test_a_conftest_fixture_names_the_database_and_select_narrows(
    pytester: pytest.Pytester, project: Path, schema_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INVMON_DSN", "postgresql://nobody@127.0.0.1:1/nothing")
    pytester.makeconftest(
        f"""
        import pytest

        @pytest.fixture
        def invmon_dsn():
            return {schema_database!r}
        """
    )
    pytester.makepyfile(
        """
        import pytest

        def test_it(invariants):
            assert [r.invariant for r in invariants.results("tag:money")] == [
                "balance_ledger_drift", "duplicate_settled_refunds"
            ]

        # As the marker refuses it: an empty selection (a list computed empty) would check
        # every invariant while meaning none.
        @pytest.mark.parametrize("empty", [[], (), "", [""]])
        def test_empty(invariants, empty):
            with pytest.raises(ValueError) as raised:
                invariants.assert_hold(select=empty)
            assert str(raised.value) == (
                "select= is empty; leave it out to check every invariant"
            )
            assert invariants.history == []
        """
    )
    result = pytester.runpytest_subprocess("--invmon-select", "tag:money")
    result.assert_outcomes(passed=5)


def test_a_session_selection_by_tag_never_leaves_out_a_file_that_did_not_load(
    pytester: pytest.Pytester, project: Path
) -> None:
    """A file whose header was not read may carry the tag: its problem is the session's.
    One whose header was read is chosen by its tags, loaded or not. Before, `tag:money`
    passed with the misspelt file, a violated one, left out without a word."""
    (project / "invariants" / "typo.sql").write_text(
        "-- description: x\n-- severty: high\n-- tags: [money]\nSELECT 1 AS x\n"
    )
    (project / "invariants" / "other.sql").write_text(
        "-- description: x\n-- tags: [jobs]\nSELECT nextval('s') AS n\n"
    )
    pytester.makepyfile("def test_it(invariants):\n    invariants.assert_hold()\n")
    result = pytester.runpytest_subprocess("--invmon-select", "tag:money")
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    assert "invmon: 1 problem in the invariant files; none is asserted" in out, out
    assert "typo.sql:2: unknown header key 'severty'; did you mean 'severity'?" in out, out
    assert "other.sql" not in out
    # Named by its path, a file that did not load is said as it is, not "matches nothing".
    named = pytester.runpytest_subprocess("--invmon-select", "other")
    named.assert_outcomes(errors=1)
    assert "other.sql:3:" in named.stdout.str() and "matches no" not in named.stdout.str()


def test_ctrl_c_in_a_soak_ends_the_session_and_cancels_the_invariants_queries(
    pytester: pytest.Pytester, schema_database: str
) -> None:
    """Before, the interrupt waited for the query's statement timeout, and was sometimes
    lost: the test was reported as not evaluated and the session went on to the next."""
    (pytester.path / "invariants").mkdir()
    (pytester.path / "invariants" / "slow.sql").write_text(SLOW_INVARIANT)
    pytester.makeini("[pytest]\ninvmon_invariants = invariants\n")
    pytester.makepyfile(
        test_soak="""
        def test_first(invariants):
            invariants.assert_hold()

        def test_second(invariants):
            invariants.assert_hold()
        """
    )
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist"]
    soak = interruptible(argv, pytester.path, {"INVMON_DSN": schema_database})
    try:
        wait_for(lambda: active_runs(schema_database) == 1, 60, "the invariant's query to run")
        soak.send_signal(signal.SIGINT)
        out, _ = soak.communicate(timeout=30)  # the query's statement timeout is 120 s
    finally:
        soak.kill()
        soak.wait()
    assert soak.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "KeyboardInterrupt" in out and "no tests ran" in out, out
    wait_for(lambda: active_runs(schema_database) == 0, 10, "the query to be cancelled")


def test_a_marker_it_cannot_follow_fails_the_tests_setup_saying_why(
    pytester: pytest.Pytester, project: Path
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.invariants(timout=5)
        def test_it():
            pass
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(errors=1)
    assert "invmon: @pytest.mark.invariants takes no timout" in result.stdout.str()


def test_the_marker_waits_when_asked_and_leaves_a_failed_body_alone(
    pytester: pytest.Pytester, project: Path
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.invariants(eventually=True, timeout=20, poll=0.05, quiet=0.3)
        def test_waits(write):
            write.good_rows()

        @pytest.mark.invariants
        def test_body_fails(write):
            write.good_rows()
            write.second_settlement()
            assert 1 == 2, "the body's own failure"
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "the body's own failure" in out
    # The body failed first: its failure is the report, not the invariants'.
    assert "duplicate_settled_refunds" not in out


def test_eventually_ends_near_its_deadline_when_a_poll_runs_long(
    pytester: pytest.Pytester, project: Path
) -> None:
    # A query that takes far longer than the wait (its own timeout is 30 s): the poll under
    # way at the deadline is given the time left, not its whole `timeout:`.
    (project / "invariants" / "slow.sql").write_text(
        "-- description: a query slower than the wait\n-- timeout: 30s\n"
        "SELECT n FROM (SELECT count(*) AS n FROM generate_series(1, 2000000000)) AS s"
        " WHERE n < 0\n"
    )
    pytester.makepyfile(
        """
        import time

        def test_it(invariants):
            started = time.monotonic()
            try:
                invariants.assert_hold_eventually(select="slow", timeout=2, poll=0.1, quiet=0.5)
            finally:
                print(f"WAITED {time.monotonic() - started:.1f}")
        """
    )
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "the system did not settle within 2 s: poll 1 was still running at the deadline" in out
    assert re.search(
        r"still running at the deadline \(its query was given \d\.\d s of the time left\)", out
    )
    assert "ran past its timeout, 30s" not in out  # its own timeout was not what ended it
    assert "InvariantsNotEvaluated" not in out
    [waited] = re.findall(r"WAITED (\d+\.\d)", out)
    # The wait's 2 s and the least a poll is given (FINAL_POLL), nowhere near 30 s.
    assert float(waited) < 10, out


def test_a_lock_wait_the_deadline_cut_short_is_said_to_be_the_deadline_s(
    pytester: pytest.Pytester, project: Path
) -> None:
    """A lock timeout lowered by the deadline's share (to 90% of the query's share) was
    said as the query's own lock timeout, quoting the share as "the query's timeout"."""
    pytester.makepyfile(
        """
        import psycopg

        def test_it(invariants, invmon_dsn):
            with psycopg.connect(invmon_dsn) as holder:  # a migration, mid-way
                holder.execute("LOCK TABLE refunds IN ACCESS EXCLUSIVE MODE")
                invariants.assert_hold_eventually(
                    select="duplicate_settled_refunds", timeout=5.4, poll=0.1, quiet=0.5
                )
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    out = re.sub(r"(?m)^E {7}", "", result.stdout.str())
    assert "the system did not settle within 5.4 s: poll 1 was still running at the deadline" in out
    assert "still running at the deadline (its query was given 5.4 s of the time left)" in out
    assert "lock timeout" not in out


def test_eventually_shares_the_time_left_among_the_rounds_a_poll_needs(
    pytester: pytest.Pytester, project: Path
) -> None:
    # Eight slow queries, four at a time (concurrency 4): two rounds, each given half.
    names = [f"slow{n}" for n in range(8)]
    for name in names:
        (project / "invariants" / f"{name}.sql").write_text(
            "-- description: a query slower than the wait\n-- timeout: 30s\n"
            "SELECT n FROM (SELECT count(*) AS n FROM generate_series(1, 2000000000)) AS s"
            " WHERE n < 0\n"
        )
    pytester.makepyfile(
        f"""
        def test_it(invariants):
            invariants.assert_hold_eventually(select={names!r}, timeout=3, poll=0.1, quiet=0.5)
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    # The message as raised, without the E of pytest's report: whether the short summary
    # holds it whole too depends on the CI variable, which a developer's shell lacks.
    out = re.sub(r"(?m)^E {7}", "", result.stdout.str())
    assert "the system did not settle within 3 s: poll 1 was still running at the deadline" in out
    assert (
        "8 invariants could not be evaluated, all for one reason:\n"
        "    still running at the deadline (its query was given 1.5 s of the time left)"
    ) in out


def test_every_target_s_invariants_run_on_the_test_database(
    pytester: pytest.Pytester, project: Path
) -> None:
    """An application's invmon.yaml names its deployment's databases under `targets:`. In a
    test they ran there: a violation in the test database passed, and the rows reported
    were the deployment's. Every invariant now runs on the test database."""
    nowhere = "postgresql://postgres@127.0.0.1:9/deployment"
    (project / "invmon.yaml").write_text(
        f"invariants: invariants\ntargets:\n  default:\n    dsn: {nowhere}\n"
        f"  payments:\n    dsn: {nowhere}\n"
    )
    (project / "invariants" / "payments").mkdir()
    (project / "invariants" / "duplicate_settled_refunds.sql").rename(
        project / "invariants" / "payments" / "duplicate_settled_refunds.sql"
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.invariants
        def test_refunds(write):
            write.good_rows()
            write.second_settlement()
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "payments/duplicate_settled_refunds: 1 offending row" in out, out
    assert "3 held, 1 violated, 0 could not be evaluated" in out, out


def test_a_folder_on_the_command_line_is_read_from_the_working_directory(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest started in tests/ with `--invmon-invariants checks`: with no invmon.yaml the
    folder was read from the rootdir, with one from the working directory, so the same
    command asserted other files. It is the working directory's, as for any path typed."""
    (project / "invariants").rename(project / "checks")  # the rootdir's: all four
    (project / "tests" / "checks").mkdir(parents=True)  # the working directory's: one
    shutil.copy(
        project / "checks" / "duplicate_settled_refunds.sql",
        project / "tests" / "checks" / "duplicate_settled_refunds.sql",
    )
    pytester.makeini("[pytest]\n")
    (project / "tests" / "test_refunds.py").write_text(
        "import pytest\n\n\n@pytest.mark.invariants\ndef test_refunds(write):\n"
        "    write.good_rows()\n    write.second_settlement()\n"
    )
    monkeypatch.chdir(project / "tests")
    result = pytester.runpytest_subprocess("--invmon-invariants", "checks", "test_refunds.py")
    result.assert_outcomes(failed=1)
    assert "0 held, 1 violated, 0 could not be evaluated" in result.stdout.str()


def test_a_marker_selector_that_matches_nothing_is_said_before_the_body_runs(
    pytester: pytest.Pytester, project: Path
) -> None:
    """A typo in select= was reported after the whole body had run, as a ValueError from
    the plugin's own code naming `--select`, which nobody had typed."""
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.invariants(select="duplicate_settled_refund")
        def test_refunds(write):
            raise RuntimeError("the body ran")
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    assert "invmon: the marker's select='duplicate_settled_refund' matches no invariant" in out
    assert "the body ran" not in out and "--select" not in out


def test_a_watch_that_cannot_be_copied_is_refused_saying_what_to_watch(
    pytester: pytest.Pytester, project: Path
) -> None:
    """A queue handed to watch= ended in a deepcopy traceback ("cannot pickle
    '_thread.lock' object")."""
    pytester.makepyfile(
        """
        import queue

        def test_refunds(write, invariants):
            work = queue.Queue()
            invariants.assert_hold_eventually(timeout=2, watch=lambda: work)
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    assert (
        "watch= returned a Queue, which cannot be copied to compare between polls"
        in result.stdout.str()
    )
