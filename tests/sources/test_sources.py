"""Sources: the `source:` header, the text and parameters invmon binds, the grace window,
the folder lister, and the live receipts invariant run on a real database against a
folder. The S3 lister is tested against a real S3-compatible server in test_sources_s3.py."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from helpers import cli, invariant
from sources_kit import add_invoices, found, live_invariant

from monitor.authoring.tester import run_fixtures
from monitor.daemon.metrics import Metrics
from monitor.execution.runner import Runner
from monitor.invariants.header import HeaderError, InvariantHeader, parse_header, split_file
from monitor.invariants.loader import load_directory
from monitor.sources.binding import ObjectRow, Objects, bind, emptied
from monitor.sources.header import SourceSpec
from monitor.sources.listing import ListingError, list_source, scrubbed, settled
from monitor.store.state import StateStore

# --- the header --------------------------------------------------------------------------


def header_problems(source: str) -> list[tuple[int, str]]:
    text = f"-- description: x\n-- source: {source}\nSELECT 1\n"
    try:
        parse_header(split_file(text))
    except HeaderError as exc:
        return exc.problems
    return []


def test_a_misspelt_key_in_a_source_is_refused_at_its_line_with_a_hint() -> None:
    problems = header_problems('{receipt_objects: {s3: "s3://receipts/x/", max_objets: 5}}')
    assert len(problems) == 1
    line, message = problems[0]
    assert line == 2
    assert message.startswith(
        "unknown key 'max_objets' in source 'receipt_objects'; did you mean 'max_objects'?"
    )


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ('{r: {s3: "s3://bucket/x/", folder: /tmp}}', "give exactly one of"),
        ("{r: {columns: [key]}}", "give exactly one of"),
        ('{r: {s3: "http://bucket/x/"}}', "must be s3://bucket/prefix"),
        ('{r: {s3: "s3://bucket/", endpoint: "http://AKIA:secret@minio:9000"}}', "credentials"),
        ('{r: {s3: "s3://bucket/", columns: [key, key]}}', "listed twice"),
        ('{r: {s3: "s3://bucket/", max_objects: 0}}', "greater than or equal to 1"),
        ('{r: {s3: "s3://bucket/", timeout: 2h}}', "longer than a listing may take (1h)"),
        ('{r: {s3: "s3://bucket/", timeout: 31d}}', "longer than a listing may take (1h)"),
        ('{r: {s3: "s3://bucket/", max_objects: true}}', "valid integer"),
        ('{r: {s3: "s3://bucket/", timeout: 0}}', "more than 0s"),
        ("{Receipts: {folder: /tmp}}", "not a lower-case SQL name"),
        ("{order: {folder: /tmp}}", "order is a reserved word in PostgreSQL"),
        ('{r: {folder: /tmp, endpoint: "http://x"}}', "are for `s3:` sources"),
    ],
)
def test_a_source_that_cannot_be_listed_as_written_is_refused(source: str, said: str) -> None:
    problems = header_problems(source)
    assert len(problems) == 1
    assert problems[0][0] == 2
    assert said in problems[0][1]


def test_a_source_gets_its_defaults() -> None:
    text = '-- description: x\n-- source: {objects: {s3: "s3://receipts-prod/r/"}}\nSELECT 1'
    spec = parse_header(split_file(text)).source["objects"]
    # The default timeout lets the default max_objects list at 1,000 objects a second.
    assert (spec.columns, spec.max_objects, spec.timeout_delta, spec.min_age_delta) == (
        ("key", "size", "last_modified"),
        100_000,
        timedelta(seconds=100),
        timedelta(0),
    )
    assert spec.bucket_and_prefix == ("receipts-prod", "r/")
    assert (
        spec.timeout_said == "1m40s, the default for max_objects 100,000 at 1,000 objects a second"
    )


@pytest.mark.parametrize(
    ("max_objects", "timeout"),
    [
        (1, timedelta(seconds=30)),  # never less than 30 s: a connection, a retry
        (30_000, timedelta(seconds=30)),
        (45_001, timedelta(seconds=46)),
        (1_000_000, timedelta(minutes=16, seconds=40)),
        (3_600_000, timedelta(hours=1)),
        (5_000_000, timedelta(hours=1)),  # the ceiling a header may write, too
    ],
)
def test_the_default_timeout_follows_max_objects_at_a_conservative_rate(
    max_objects: int, timeout: timedelta
) -> None:
    spec = SourceSpec(s3="s3://bucket/x/", max_objects=max_objects)
    assert spec.timeout_delta == timeout
    # And every default validates as if written out.
    written = SourceSpec(
        s3="s3://bucket/x/", max_objects=max_objects, timeout=f"{timeout.seconds}s"
    )
    assert written.timeout_delta == timeout
    # A timeout written in the header is the header's, whatever max_objects is.
    assert SourceSpec(s3="s3://bucket/x/", max_objects=max_objects, timeout="5s").timeout_delta == (
        timedelta(seconds=5)
    )


# --- binding (pure) ----------------------------------------------------------------------

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_binding_prepends_one_line_of_ctes_and_passes_the_values_as_typed_arrays() -> None:
    sources = {
        "receipt_objects": SourceSpec(s3="s3://bucket/r/"),
        "tags": SourceSpec(folder="/srv/tags", columns=("key",)),
    }
    rows = {
        "receipt_objects": [
            ObjectRow("r/a'; DROP TABLE x; --", 3, WHEN),
            ObjectRow("r/b", 4, None),
        ],
        "tags": [ObjectRow("t/$1", None, None)],
    }
    bound = bind(sources, rows)
    assert bound.prefix == (
        'WITH "receipt_objects"("key", "size", "last_modified") AS (SELECT * FROM '
        'unnest($1::text[], $2::bigint[], $3::timestamptz[])), "tags"("key") AS '
        "(SELECT * FROM unnest($4::text[]))\n"
    )
    assert bound.lines == 1
    assert [(p.type, p.oid, p.values()) for p in bound.params] == [
        ("text", 1009, ["r/a'; DROP TABLE x; --", "r/b"]),
        ("bigint", 1016, [3, 4]),
        ("timestamptz", 1185, [WHEN, None]),
        ("text", 1009, ["t/$1"]),
    ]
    assert [(p.type, p.values()) for p in emptied(bound)] == [
        ("text", []),
        ("bigint", []),
        ("timestamptz", []),
        ("text", []),
    ]


def test_the_grace_window_drops_objects_newer_than_min_age_and_counts_them() -> None:
    listed_at = WHEN
    rows = [
        ObjectRow("old", 1, listed_at - timedelta(minutes=11)),
        ObjectRow("edge", 1, listed_at - timedelta(minutes=10)),
        ObjectRow("new", 1, listed_at - timedelta(minutes=9)),
        ObjectRow("no time", 1, None),
    ]
    kept, new = settled(rows, timedelta(minutes=10), listed_at)
    assert ([r.key for r in kept], new) == (["old", "edge", "no time"], 1)
    assert settled(rows, timedelta(0), listed_at) == (rows, 0)


# --- the folder lister --------------------------------------------------------------------


def make_files(root: Path, names: list[str], age: timedelta = timedelta(hours=1)) -> None:
    stamp = time.time() - age.total_seconds()
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * len(name))
        os.utime(path, (stamp, stamp))


def test_a_folder_lists_every_file_under_it_by_relative_key_size_and_time(
    tmp_path: Path,
) -> None:
    names = ["a.pdf", "receipts/2026/b.pdf", "receipts/2026/c d'e.pdf", "z/y/x/deep.pdf"]
    make_files(tmp_path / "bucket", names)
    (tmp_path / "bucket" / "empty-dir").mkdir()
    (tmp_path / "outside.pdf").write_text("not listed")
    (tmp_path / "bucket" / "link.pdf").symlink_to(tmp_path / "outside.pdf")
    listing = list_source("objects", SourceSpec(folder=str(tmp_path / "bucket")))
    assert {r.key: r.size for r in listing.rows} == {n: len(n) for n in names}
    assert listing.seen == 4
    assert all(
        r.last_modified is not None and r.last_modified < datetime.now(UTC) - timedelta(minutes=59)
        for r in listing.rows
    )


def test_a_folder_over_max_objects_is_an_error_never_a_cut(tmp_path: Path) -> None:
    make_files(tmp_path, [f"{i}.pdf" for i in range(6)])
    spec = SourceSpec(folder=str(tmp_path), max_objects=5)
    with pytest.raises(ListingError) as raised:
        list_source("objects", spec)
    assert str(raised.value) == (
        f"source objects: folder {tmp_path} holds more than 5 objects (max_objects); the "
        "invariant is not evaluated on a partial listing"
    )
    assert len(list_source("objects", SourceSpec(folder=str(tmp_path), max_objects=6)).rows) == 6


def test_a_folder_that_is_not_there_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ListingError, match=r"folder .*/gone does not exist"):
        list_source("objects", SourceSpec(folder=str(tmp_path / "gone")))


def test_a_listing_past_its_timeout_is_an_error(tmp_path: Path) -> None:
    make_files(tmp_path, ["a/1.pdf", "b/2.pdf"])
    ticks = iter(range(0, 1000, 20))  # every look at the clock is 20 s later
    # No `timeout:`: the default for 1,000 objects, and the message says where it came from.
    said = r"took longer than its timeout \(30s, the default for max_objects 1,000 at 1,000"
    spec = SourceSpec(folder=str(tmp_path), max_objects=1000)
    with pytest.raises(ListingError, match=said):
        list_source("objects", spec, clock=lambda: next(ticks))


def test_a_flat_folder_is_bounded_file_by_file_not_folder_by_folder(tmp_path: Path) -> None:
    make_files(tmp_path, [f"{i:04}.pdf" for i in range(300)])
    reads = iter(range(1000))  # one second later at every look at the clock
    with pytest.raises(ListingError, match=r"took longer than its timeout \(5s\)"):
        list_source("objects", SourceSpec(folder=str(tmp_path), timeout="5s"), lambda: next(reads))
    # Stopped within the bound: a handful of reads, not one per folder after all 300.
    assert next(reads) < 10


def test_what_disappears_while_a_folder_is_listed_is_left_out_not_an_error(
    tmp_path: Path,
) -> None:
    make_files(tmp_path, ["a.pdf", "sub/b.pdf", "sub/deeper/c.pdf"])
    looks = []

    def clock() -> float:
        # Looks 1 and 2 start the listing and its deadline; the third is as the first
        # entry of the folder is read: the subfolder goes then, after the folder's names
        # were read, before it is listed itself.
        looks.append(1)
        if len(looks) == 3:
            shutil.rmtree(tmp_path / "sub")
        return float(len(looks)) / 1000

    listing = list_source("objects", SourceSpec(folder=str(tmp_path)), clock)
    assert [r.key for r in listing.rows] == ["a.pdf"]


def test_a_file_name_that_is_not_utf8_is_an_error_showing_it_escaped(tmp_path: Path) -> None:
    (tmp_path / os.fsdecode(b"bad-\xff.pdf")).write_text("x")
    with pytest.raises(ListingError) as raised:
        list_source("objects", SourceSpec(folder=str(tmp_path)))
    assert str(raised.value) == "source objects: an object key that is not UTF-8: 'bad-\\\\xff.pdf'"


# --- the live receipts invariant against a folder, on a real database -------------------


def test_the_live_receipts_invariant_reads_a_folder_and_finds_each_problem_exactly(
    schema_database: str, tmp_path: Path
) -> None:
    bucket = tmp_path / "bucket"
    referenced = [f"receipts/{i:04}.pdf" for i in range(200)]
    orphans = ["receipts/orphan-1.pdf", "receipts/x/orphan 2'.pdf"]
    make_files(bucket, [*referenced, *orphans, "receipts/shared.pdf"])
    make_files(bucket, ["receipts/fresh-orphan.pdf"], age=timedelta(minutes=1))
    invoices = {i + 1: key for i, key in enumerate(referenced)}
    invoices |= {301: "receipts/shared.pdf", 302: "receipts/shared.pdf"}
    invoices |= {401: "receipts/missing.pdf"}
    add_invoices(schema_database, invoices)
    add_invoices(schema_database, {501: "receipts/not-yet.pdf"}, age="5 minutes")
    inv = live_invariant(tmp_path / "invariants", folder=str(bucket), min_age="10m")
    inv = dataclasses.replace(inv, sample=1000)
    with Runner(schema_database, concurrency=1) as runner:
        result = runner.run_one(inv)
    assert (result.status, result.error) == ("violated", None)
    assert found(result.rows) == {
        ("unreferenced", "receipts/orphan-1.pdf"),
        ("unreferenced", "receipts/x/orphan 2'.pdf"),
        ("referenced_by_many", "receipts/shared.pdf"),
        ("missing_object", "401"),
    }
    assert result.count == 4
    assert result.listing_ms is not None and 0 < result.listing_ms <= result.duration_ms


def test_a_listing_error_makes_the_run_an_error_never_ok(
    schema_database: str, tmp_path: Path
) -> None:
    inv = live_invariant(tmp_path / "invariants", folder=str(tmp_path / "no-such-folder"))
    with Runner(schema_database, concurrency=1) as runner:
        result = runner.run_one(inv)
    assert (result.status, result.count) == ("error", None)
    assert (
        result.error == f"source receipt_objects: folder {tmp_path}/no-such-folder does not exist"
    )
    assert result.listing_ms is not None


def test_listing_time_is_a_histogram_of_its_own_in_the_metrics(
    schema_database: str, tmp_path: Path
) -> None:
    make_files(tmp_path / "bucket", ["receipts/a.pdf"])
    inv = live_invariant(tmp_path / "invariants", folder=str(tmp_path / "bucket"))
    with Runner(schema_database, concurrency=1) as runner:
        result = runner.run_one(inv)
    assert (result.status, result.count) == ("violated", 1)
    metrics = Metrics(lambda: {"open_incidents": 0, "events_pending": 0})
    metrics.observe(result, time.time())
    text = metrics.render().decode()
    labels = 'invariant="orphaned_receipts_live",target="default"'
    assert f"invmon_source_listing_seconds_count{{{labels}}} 1.0" in text
    assert f"invmon_run_duration_seconds_count{{{labels}}} 1.0" in text


# --- fixture cases with inline sources ---------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "live"
SCHEMA = Path(__file__).resolve().parents[2] / "deploy" / "demo" / "schema.sql"


def test_every_case_of_the_live_receipts_invariant_passes_with_its_listing_inline(
    admin_dsn: str,
) -> None:
    loaded = load_directory(EXAMPLES)
    assert [p for p in loaded.problems if p.level == "error"] == []
    [report] = run_fixtures(loaded.invariants, SCHEMA.read_text(), admin_dsn)
    assert report.fixture is not None and report.fixture.problems == []
    assert {r.case.name: (r.passed, r.error) for r in report.results} == {
        name: (True, None)
        for name in (
            "an orphan object, a shared object and a missing object each fire under their problem",
            "each problem lists the invoices behind it",
            "objects younger than min_age and receipts younger than the grace are not judged",
            "an empty bucket reports every judged invoice as missing",
        )
    }
    assert not report.untested


def objects_invariant(folder: Path) -> None:
    """An invariant reading one source, `objects` (key only), for its cases to give."""
    (folder / "objects.sql").write_text(
        "-- description: every object is known\n"
        "-- source: {objects: {folder: /nonexistent, columns: [key]}}\n"
        "SELECT o.key FROM objects AS o\n"
    )


def test_a_case_naming_a_source_the_header_does_not_declare_fails_at_its_line(
    admin_dsn: str, tmp_path: Path
) -> None:
    objects_invariant(tmp_path)
    (tmp_path / "objects.test.yaml").write_text(
        "cases:\n"
        "  - name: an object fires\n"
        "    sources:\n"
        "      objects: [{key: a.pdf}]\n"
        "    expect: {count: 1}\n"
        "  - name: a misspelt source\n"
        "    sources:\n"
        "      object: [{key: a.pdf}]\n"
        "    expect: {count: 0}\n"
    )
    said = (
        "'a misspelt source': `sources` names object, not a source of the header (declared:"
        " objects); did you mean 'object' -> 'objects'?"
    )
    loaded = load_directory(tmp_path)
    [report] = run_fixtures(loaded.invariants, None, admin_dsn)
    assert [(r.case.name, r.passed, r.error) for r in report.results] == [
        ("an object fires", True, None)
    ]
    assert report.fixture is not None
    assert [(p.line, p.message) for p in report.fixture.problems] == [(6, said)]
    # Read, not run: lint says the same, with no database.
    linted = cli("lint", str(tmp_path), "--format", "json")
    assert linted.returncode == 2, linted.stdout + linted.stderr  # invalid
    assert [
        (p["path"], p["line"], p["message"]) for p in json.loads(linted.stdout)["problems"]
    ] == [(str(tmp_path / "objects.test.yaml"), 6, said)]


@pytest.mark.parametrize(
    ("objects", "said"),
    [
        (
            "[{size: 3}]",
            "an object of objects needs `key` (text) and takes size, last_modified and etag",
        ),
        (
            "[{key: a, colour: red}]",
            "an object of objects needs `key` (text) and takes size,"
            " last_modified and etag; not colour",
        ),
        (
            "[{key: 12}]",
            "an object of objects needs `key` (text) and takes size, last_modified and etag",
        ),
        ("[{key: a, size: 1.5}]", "an object of objects: size must be a whole number"),
        ("[{key: a, size: true}]", "an object of objects: size must be a whole number"),
    ],
)
def test_an_inline_object_lint_cannot_read_as_a_listing_is_a_problem_at_its_case(
    tmp_path: Path, objects: str, said: str
) -> None:
    objects_invariant(tmp_path)
    (tmp_path / "objects.test.yaml").write_text(
        f"cases:\n  - name: one\n    sources: {{objects: {objects}}}\n    expect: {{count: 1}}\n"
    )
    linted = cli("lint", str(tmp_path), "--format", "json")
    assert linted.returncode == 2, linted.stdout + linted.stderr  # invalid
    assert [(p["line"], p["message"]) for p in json.loads(linted.stdout)["problems"]] == [
        (2, f"'one': {said}")
    ]


# --- the fence over what invmon adds -----------------------------------------------------


def test_a_parameter_in_an_invariant_is_refused_by_lint(tmp_path: Path) -> None:
    (tmp_path / "p.sql").write_text(
        "-- description: x\n-- source: {objects: {folder: /srv}}\nSELECT o.key\n"
        "FROM objects AS o WHERE o.key = $1\n"
    )
    loaded = load_directory(tmp_path)
    assert [(p.line, p.message) for p in loaded.problems] == [
        (
            4,
            "$1 is a parameter, and invmon passes an invariant none (a source's rows are named "
            "by its relation); write the value",
        )
    ]


def test_the_fence_judges_the_text_sent_with_its_sources_and_names_the_files_line(
    schema_database: str, tmp_path: Path
) -> None:
    make_files(tmp_path / "bucket", ["a.pdf"])
    sourced = invariant("sourced", "SELECT o.key\nFROM objects AS o, pg_advisory_lock(1)")
    header = InvariantHeader(
        description="x", source={"objects": SourceSpec(folder=str(tmp_path / "bucket"))}
    )
    with Runner(schema_database, concurrency=1) as runner:
        result = runner.run_one(dataclasses.replace(sourced, header=header))
        vetted = runner.vet([dataclasses.replace(sourced, header=header)])
    assert (result.status, result.count) == ("error", None)
    message = (
        "sourced.sql:3: function pg_advisory_lock() (pg_advisory_lock(bigint)) is VOLATILE: "
        "PostgreSQL's catalog says it "
        "may change the database or act outside the query; not allowed"
    )
    assert result.error == f"refused by the read-only fence: {message}"
    assert [str(p) for p in vetted["sourced"]] == [message]


def test_a_source_wins_over_a_table_of_the_same_name(schema_database: str, tmp_path: Path) -> None:
    make_files(tmp_path / "bucket", ["from-the-folder.pdf"])
    with psycopg.connect(schema_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE objects (key text)")
        conn.execute("INSERT INTO objects VALUES ('from-the-table.pdf')")
    header = InvariantHeader(
        description="x", source={"objects": SourceSpec(folder=str(tmp_path / "bucket"))}
    )
    inv = dataclasses.replace(
        invariant("shadow", "WITH k AS (SELECT key FROM objects) SELECT key FROM k"), header=header
    )
    with Runner(schema_database, concurrency=1) as runner:
        result = runner.run_one(inv)
    assert (result.status, result.rows) == ("violated", [{"key": "from-the-folder.pdf"}])


def test_a_credential_of_the_environment_is_scrubbed_from_any_listing_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value-1234")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "tok")  # too short to be told from a word: kept
    assert scrubbed("signature s3cr3t-value-1234 did not match; tok") == (
        "signature *** did not match; tok"
    )


@pytest.mark.parametrize("password", ["pa'ss", 'pa"ss', "p@ss", "pa ss", "p%40ss"])
def test_an_endpoint_password_is_scrubbed_whatever_it_holds(
    monkeypatch: pytest.MonkeyPatch, password: str
) -> None:
    """The URL pattern stopped at a quote, a space or an `@`: botocore quoted
    `http://usr:pa\\'ss@…` and the password came out whole, or `***@ss@…` half of it."""
    endpoint = f"http://usr:{password}@127.0.0.1:1"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    quoted = endpoint.replace("'", "\\'")
    for said in (f'Could not connect to the endpoint URL: "{quoted}/b?list-type=2"', endpoint):
        shown = scrubbed(said)
        assert password not in shown and "usr:" not in shown, shown
        assert "127.0.0.1:1" in shown


# --- explain: planned with what a run would send ------------------------------------------


def test_explain_plans_a_source_with_its_listing_and_says_how_many_objects_it_planned(
    schema_database: str, tmp_path: Path
) -> None:

    bucket = tmp_path / "bucket"
    make_files(bucket, [f"receipts/{i:04}.pdf" for i in range(1500)])
    live_invariant(tmp_path / "invariants", folder=str(bucket), min_age="10m")
    args = ["explain", "--dsn", schema_database, "--invariants", str(tmp_path / "invariants")]

    listed = cli(*args, "--format", "json")
    empty = cli(*args, "--format", "json", "--empty-sources")
    assert (listed.returncode, empty.returncode) == (0, 0), listed.stderr + empty.stderr
    [with_listing] = json.loads(listed.stdout)["results"]
    [without] = json.loads(empty.stdout)["results"]
    assert with_listing["sources"] == {"receipt_objects": 1500}
    assert without["sources"] == {"receipt_objects": None}
    # The planner sizes unnest() by the array it is given: 1,500 objects cost more to plan
    # than none, so an empty listing would understate the cost a max_cost gate compares.
    assert with_listing["cost"] > without["cost"]

    text = cli(*args).stdout.splitlines()
    assert text[0].startswith("✅ orphaned_receipts_live: cost ")
    assert text[1:] == ["     source receipt_objects: planned with the 1,500 objects listed now"]
    text = cli(*args, "--empty-sources").stdout.splitlines()
    assert text[1:] == [
        "     source receipt_objects: planned as an empty listing (--empty-sources): the cost"
        " leaves the listing out"
    ]


def test_explain_of_a_source_that_cannot_be_listed_cannot_explain_and_exits_2(
    schema_database: str, tmp_path: Path
) -> None:

    gone = tmp_path / "gone"
    live_invariant(tmp_path / "invariants", folder=str(gone))
    args = ["explain", "--dsn", schema_database, "--invariants", str(tmp_path / "invariants")]
    done = cli(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        f"⚠️  orphaned_receipts_live: cannot explain: source receipt_objects: folder {gone}"
        " does not exist"
    ]
    assert cli(*args, "--empty-sources").returncode == 0


def test_a_runs_listing_time_is_stored_with_it_and_shown_beside_its_duration(
    schema_database: str, tmp_path: Path, store: StateStore
) -> None:
    from monitor.web.detail_views import run_line
    from monitor.web.reads import read_invariant

    bucket = tmp_path / "bucket"
    make_files(bucket, ["receipts/a.pdf"])
    inv = live_invariant(tmp_path / "invariants", folder=str(bucket))
    plain = invariant("plain", "SELECT 1 AS x WHERE false")
    with Runner(schema_database, concurrency=1) as runner:
        sourced, unsourced = runner.run_one(inv), runner.run_one(plain)
    assert (sourced.status, unsourced.status) == ("violated", "ok")
    listed = dataclasses.replace(sourced, duration_ms=2500.0, listing_ms=1200.4)
    now = datetime.now(UTC)
    store.record_run(inv.name, listed, now)
    store.record_run(plain.name, unsourced, now)

    [run] = store.runs(inv.name)
    [other] = store.runs(plain.name)
    assert (run.listing_ms, other.listing_ms) == (1200.4, None)
    [point] = read_invariant(store, inv.name).runs
    assert run_line(point).duration == "2,500 ms (listing 1,200 ms)"
    [point] = read_invariant(store, plain.name).runs
    assert run_line(point).duration == f"{unsourced.duration_ms:,.0f} ms"


def test_a_run_still_listing_its_sources_is_not_called_stuck_before_listing_and_query_could_end(
    tmp_path: Path,
) -> None:
    from monitor.daemon.self_checks import Loaded, stuck

    inv = live_invariant(tmp_path, folder="/srv/receipts", timeout="2m")  # the query: 2m too
    assert (inv.timeout, inv.longest_run) == (timedelta(minutes=2), timedelta(minutes=4))
    loaded = {inv.name: Loaded(inv.schedule, inv.longest_run)}
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    # Stuck means a minute past the longest a run may take: listing (2m) + query (2m).
    in_time = {inv.name: now - timedelta(minutes=4, seconds=59)}
    late = {inv.name: now - timedelta(minutes=5, seconds=1)}
    assert stuck(in_time, loaded, now) == []
    assert [s["invariant"] for s in stuck(late, loaded, now)] == [inv.name]


def test_every_value_a_listing_can_hold_reaches_the_database_exactly(database: str) -> None:
    from monitor.execution.execute import listing_cursor
    from monitor.sources.binding import bound_text

    times = [
        datetime(1907, 8, 6, 23, 33, 59, 647803, tzinfo=UTC),  # a float came back 647804
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(1, 1, 2, 0, 0, 0, 1, tzinfo=UTC),
        datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC),
        None,
    ]
    keys = ["NULL", "", " a b ", "%s $1 {a,b} \\ é\n\t", 'x"y']
    rows = [
        ObjectRow(key, size, moment, etag)
        for key, size, moment, etag in zip(
            keys, [0, None, 2**62, 1, 7], times, ["NULL", None, "e", "", "x"], strict=True
        )
    ]
    spec = SourceSpec(folder="/srv", columns=("key", "size", "last_modified", "etag"))
    bound = bind({"objects": spec}, {"objects": rows})
    text = bound_text(bound, "SELECT key, size, last_modified, etag FROM objects ORDER BY key")
    with psycopg.connect(database) as conn:
        conn.execute("SET TIME ZONE 'America/New_York'")  # the input says its offset
        got = listing_cursor(conn).execute(text, bound.params).fetchall()
    expected = sorted(((r.key, r.size, r.last_modified, r.etag) for r in rows), key=lambda r: r[0])
    assert got == expected


# Keys a listing may hold that text handling gets wrong: quotes and backslashes (array
# literal and SQL syntax), separators, line breaks, every kind of Unicode, what looks like
# SQL, a placeholder or NULL, and the longest key S3 allows (1,024 bytes, in 2-, 3- and
# 4-byte characters too).
HOSTILE_KEYS = [
    "it's; DROP TABLE invoices; --.pdf",
    'say "hi"\\',
    "{a,b}",
    "a,b",
    "NULL",
    "null",
    "",
    " ",
    "\t",
    "line\nbreak",
    "carriage\rreturn\r\n",
    "$1 %s %(x)s {0}",
    "日本語/ü/é/🧾.pdf",
    "e\u0301 combining, \u200b zero width, \u202e right to left",
    "\x01\x1f\x7f control",
    "a" * 1024,
    "é" * 512,
    "語" * 341 + "a",
    "🧾" * 256,
    "receipts/" + "x/" * 507,
]


def _reference_bound(rows: list[ObjectRow]) -> tuple[str, list[list[object]]]:
    """How the listing was bound before it was packed: lists of values as typed arrays,
    the times as ISO 8601 text; what the packed form must equal, value for value."""
    text = (
        'WITH "objects"("key", "size", "last_modified", "etag") AS (SELECT * FROM '
        "unnest($1::text[], $2::bigint[], $3::text[]::timestamptz[], $4::text[]))\n"
    )
    params: list[list[object]] = [
        [r.key for r in rows],
        [r.size for r in rows],
        [None if r.last_modified is None else r.last_modified.isoformat() for r in rows],
        [r.etag for r in rows],
    ]
    return text, params


def test_the_packed_listing_gives_the_database_what_the_old_binding_gave_on_hostile_keys(
    database: str,
) -> None:
    from monitor.execution.execute import listing_cursor
    from monitor.sources.binding import bound_text

    zones = [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-9))]
    rows = [
        ObjectRow(
            key,
            [None, 0, 1, 2**63 - 1, 4096][i % 5],
            None if i % 7 == 3 else WHEN.astimezone(zones[i % 3]) + i * timedelta(seconds=1.5),
            [None, '"quoted"', "", key][i % 4],
        )
        for i, key in enumerate(HOSTILE_KEYS)
    ]
    assert max(len(k.encode()) for k in HOSTILE_KEYS) == 1024
    spec = SourceSpec(folder="/srv", columns=("key", "size", "last_modified", "etag"))
    bound = bind({"objects": spec}, {"objects": rows})
    select = (
        "SELECT row_number() OVER () AS n, key, size, last_modified, etag, "
        "octet_length(key) AS bytes FROM objects"
    )
    with psycopg.connect(database) as conn:
        conn.execute("SET TIME ZONE 'Asia/Kathmandu'")  # the input says its offset
        packed = listing_cursor(conn).execute(bound_text(bound, select), bound.params).fetchall()
        text, params = _reference_bound(rows)
        before = psycopg.RawCursor(conn).execute(text + select, params).fetchall()
    assert packed == before
    # And what came back is exactly what was listed, in listing order.
    assert [(k, s, t, e) for _, k, s, t, e, _ in packed] == [
        (r.key, r.size, r.last_modified, r.etag) for r in rows
    ]
    # Read back without the database, the packed listing is the listing.
    assert list(Objects.of(spec.columns, rows)) == rows


def test_a_folder_of_hostile_names_is_listed_and_bound_to_the_exact_keys(
    database: str, tmp_path: Path
) -> None:
    from monitor.execution.execute import listing_cursor
    from monitor.sources.binding import bound_text

    # What a file name can hold of the above (no NUL, no "/" inside a name, 255 bytes each).
    names = [
        "it's; DROP TABLE invoices; --.pdf",
        'say "hi"\\',
        "{a,b}",
        "line\nbreak",
        "$1 %s",
        "日本語/ü/🧾.pdf",
        "NULL",
        " ",
        "/".join(["é" * 127] * 4),  # 1,019 bytes, under S3's 1,024
    ]
    make_files(tmp_path / "store", names)
    spec = SourceSpec(folder=str(tmp_path / "store"), columns=("key", "size"))
    listing = list_source("objects", spec)
    assert sorted(r.key for r in listing.rows) == sorted(names)
    bound = bind({"objects": spec}, {"objects": listing.rows})
    with psycopg.connect(database) as conn:
        got = listing_cursor(conn).execute(
            bound_text(bound, "SELECT key, size FROM objects"), bound.params
        )
        assert sorted(got.fetchall()) == sorted((name, len(name)) for name in names)


def test_a_listing_is_packed_as_it_arrives_not_held_as_rows(tmp_path: Path) -> None:
    """The listing keeps each object as a length and its bytes per column asked for: what
    the parameters sent are, not a copy of them."""
    make_files(tmp_path, [f"r/{i:05}.pdf" for i in range(2000)])
    listing = list_source("objects", SourceSpec(folder=str(tmp_path), columns=("key",)))
    assert isinstance(listing.rows, Objects) and len(listing.rows) == 2000
    [param] = listing.rows.arrays()
    assert len(param.data) == 20 + 2000 * (4 + len("r/00000.pdf"))
    spec = SourceSpec(folder=str(tmp_path), columns=("key",))
    bound = bind({"objects": spec}, {"objects": listing.rows})
    assert bound.params[0].data is param.data  # sent as it is


def test_a_folder_swapped_for_a_link_while_it_is_listed_is_not_followed(tmp_path: Path) -> None:
    """A folder read as a folder, then swapped for a link before it was listed (`mv t old
    && ln -s /etc t`), was listed by its path, so through the link: files from outside the
    source came back. Each folder is now opened from its parent, refusing a link. The swap
    comes at the root's last entry, after `t` was read as a folder (1,000 files beside it
    make `t` the last one in one run of a thousand, when the swap just hides it)."""
    from monitor.sources.folder import list_folder
    from monitor.sources.listing import Bounds

    root, outside = tmp_path / "bucket", tmp_path / "outside"
    make_files(root, [f"f{i}.pdf" for i in range(1000)] + ["t/inside.pdf"])
    make_files(outside, ["secret.pem"])

    class SwapAtTheLastEntry(Bounds):
        calls = 0

        def remaining(self) -> float:
            self.calls += 1
            if self.calls == 1001:  # the root's last entry
                (root / "t").rename(tmp_path / "old")
                (root / "t").symlink_to(outside, target_is_directory=True)
            return super().remaining()

    spec = SourceSpec(folder=str(root))
    listing = list_folder(str(root), SwapAtTheLastEntry("objects", spec, time.monotonic))
    keys = {r.key for r in listing.rows}
    assert "t/secret.pem" not in keys
    assert keys == {f"f{i}.pdf" for i in range(1000)}  # t is a link now: left out
