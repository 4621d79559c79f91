"""The S3 lister against a real S3-compatible HTTP server started here (moto's server mode
on 127.0.0.1), with a bucket of a few thousand objects: the live receipts invariant finds
exactly the planted problems across many pages, the max-objects bound and a listing error
are `error`, the grace window holds back new objects, and no credential is ever printed."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from helpers import CHECK, cli
from moto.server import ThreadedMotoServer
from sources_kit import ROOT, add_invoices, found, live_invariant

from monitor.authoring.pgtemp import apply_sql
from monitor.execution.runner import Runner
from monitor.sources.header import SourceSpec
from monitor.sources.listing import ListingError, list_source
from monitor.store.state import StateStore

if TYPE_CHECKING:
    from standby import StandbyPair

# Credentials the tests own: distinctive, so finding them in any output is unambiguous.
ACCESS_KEY = "AKIAINVMONTEST" + uuid.uuid4().hex[:6].upper()
SECRET_KEY = "invmon-secret-" + uuid.uuid4().hex
OBJECTS = 2500  # in the shared bucket
PAGE = 100  # objects per page in these tests: 25 pages for the shared bucket


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The standard chain, reduced to the environment: no profile or instance role here."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def client(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )


def new_bucket(endpoint: str, keys: list[str]) -> str:
    """A bucket of this test's own, holding `keys` (uploaded over HTTP, eight at a time)."""
    name = f"receipts-{uuid.uuid4().hex[:12]}"
    s3 = client(endpoint)
    s3.create_bucket(Bucket=name)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=name, Key=k, Body=b"%PDF"), keys))
    return name


# The shared bucket: read by several tests, changed by none.
REFERENCED = [f"receipts/2026/{i:05}.pdf" for i in range(OBJECTS - 40)]
ORPHANS = [f"receipts/orphans/{i:02}.pdf" for i in range(27)] + [
    "receipts/odd/it's; DROP TABLE invoices; --.pdf",
    "receipts/odd/$1 %s {x}.pdf",
    "receipts/odd/日本語 ü.pdf",
]
SHARED = [f"receipts/shared/{i:02}.pdf" for i in range(10)]
MISSING = {9001 + i: f"receipts/missing/{i:02}.pdf" for i in range(13)}


@pytest.fixture(scope="module")
def shared_bucket(endpoint: str) -> str:
    keys = REFERENCED + ORPHANS + SHARED
    assert len(keys) == OBJECTS
    return new_bucket(endpoint, keys)


def receipts_world(dsn: str) -> None:
    invoices = {i + 1: key for i, key in enumerate(REFERENCED)}
    for n, key in enumerate(SHARED):
        invoices |= {5001 + 2 * n: key, 5002 + 2 * n: key}
    invoices |= MISSING
    add_invoices(dsn, invoices)


def s3_invariant(tmp_path: Path, endpoint: str, bucket: str, **more: object) -> Any:
    source: dict[str, object] = {
        "s3": f'"s3://{bucket}/receipts/"',
        "endpoint": endpoint,
        "region": "us-east-1",
        "page_size": PAGE,
        "timeout": "60s",
        **more,
    }
    inv = live_invariant(tmp_path / "invariants", **source)
    return dataclasses.replace(inv, sample=1000)


EXPECTED = (
    {("unreferenced", key) for key in ORPHANS}
    | {("referenced_by_many", key) for key in SHARED}
    | {("missing_object", str(invoice)) for invoice in MISSING}
)


def test_a_listing_reads_every_object_across_every_page(endpoint: str, shared_bucket: str) -> None:
    spec = SourceSpec(
        s3=f"s3://{shared_bucket}/receipts/", endpoint=endpoint, region="us-east-1", page_size=PAGE
    )
    listing = list_source("receipt_objects", spec)
    assert sorted(r.key for r in listing.rows) == sorted(REFERENCED + ORPHANS + SHARED)
    assert (listing.pages, listing.seen, listing.ignored_new) == (OBJECTS // PAGE, OBJECTS, 0)
    assert {r.size for r in listing.rows} == {4}
    narrower = spec.model_copy(update={"s3": f"s3://{shared_bucket}/receipts/odd/"})
    assert sorted(r.key for r in list_source("x", narrower).rows) == sorted(ORPHANS[-3:])


def test_without_an_endpoint_in_the_header_the_environments_endpoint_is_used(
    monkeypatch: pytest.MonkeyPatch, endpoint: str, shared_bucket: str
) -> None:
    # The same invariant file against MinIO in staging and S3 in production: the endpoint
    # comes from boto3's own AWS_ENDPOINT_URL_S3 (or the profile's endpoint_url).
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    spec = SourceSpec(s3=f"s3://{shared_bucket}/receipts/odd/")
    assert sorted(r.key for r in list_source("x", spec).rows) == sorted(ORPHANS[-3:])


@pytest.fixture
def stalling_endpoint() -> Iterator[str]:
    """An endpoint that accepts, reads the request, then sends one byte a second and never
    finishes: each socket read succeeds, so no read timeout of the client's ever fires."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            while not stop.wait(1):
                try:
                    conn.sendall(b"H")
                except OSError:
                    return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=trickle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.close()


def test_a_stalled_store_is_an_error_at_the_listings_timeout_not_whenever_it_answers(
    stalling_endpoint: str,
) -> None:
    spec = SourceSpec(s3="s3://bucket/receipts/", endpoint=stalling_endpoint, timeout="2s")
    started = time.monotonic()
    with pytest.raises(ListingError) as raised:
        list_source("receipt_objects", spec)
    took = time.monotonic() - started
    assert str(raised.value) == (
        f"source receipt_objects: listing s3://bucket/receipts/ at {stalling_endpoint} took "
        "longer than its timeout (2s)"
    )
    # The bound is the listing's 2 s (this store would never have answered); the margin is
    # for a loaded machine starting a thread and a client.
    assert 2 <= took < 5, took


def test_a_credential_in_the_environments_endpoint_url_is_never_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]  # nothing listens once closed
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://minio:hunter2pass@127.0.0.1:{port}/")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with pytest.raises(ListingError) as raised:
        list_source("r", SourceSpec(s3="s3://bucket/receipts/", timeout="20s"))
    said = str(raised.value)
    assert said.startswith("source r: listing s3://bucket/receipts/ failed: ")
    assert "hunter2pass" not in said and "minio:" not in said
    assert f"http://***@127.0.0.1:{port}/" in said


def test_the_live_receipts_invariant_finds_exactly_the_orphaned_shared_and_missing_objects(
    schema_database: str, tmp_path: Path, endpoint: str, shared_bucket: str
) -> None:
    receipts_world(schema_database)
    inv = s3_invariant(tmp_path, endpoint, shared_bucket)
    with Runner(schema_database, concurrency=1) as runner:
        result = runner.run_one(inv)
    assert (result.status, result.error) == ("violated", None)
    assert result.count == len(EXPECTED) == 30 + 10 + 13
    assert found(result.rows) == EXPECTED
    assert result.listing_ms is not None and 0 < result.listing_ms < result.duration_ms


def test_objects_newer_than_min_age_are_not_judged(
    schema_database: str, tmp_path: Path, endpoint: str
) -> None:
    bucket = new_bucket(endpoint, ["receipts/just-now.pdf", "receipts/also-now.pdf"])
    inv = s3_invariant(tmp_path, endpoint, bucket, min_age="10m")
    without_grace = s3_invariant(tmp_path / "no-grace", endpoint, bucket)
    with Runner(schema_database, concurrency=1) as runner:
        held = runner.run_one(inv)
        fired = runner.run_one(without_grace)
    assert (held.status, held.count) == ("ok", 0)
    assert found(fired.rows) == {
        ("unreferenced", "receipts/just-now.pdf"),
        ("unreferenced", "receipts/also-now.pdf"),
    }
    listing = list_source("r", inv.header.source["receipt_objects"])
    assert (listing.seen, listing.ignored_new, list(listing.rows)) == (2, 2, [])


def test_a_bucket_over_max_objects_is_an_error_never_a_partial_check(
    schema_database: str, tmp_path: Path, endpoint: str, shared_bucket: str
) -> None:
    inv = s3_invariant(tmp_path, endpoint, shared_bucket, max_objects=OBJECTS - 1)
    with Runner(schema_database, concurrency=1) as runner:
        result = runner.run_one(inv)
    assert (result.status, result.count, result.rows) == ("error", None, [])
    assert result.error == (
        f"source receipt_objects: s3://{shared_bucket}/receipts/ at {endpoint} holds more than "
        f"{OBJECTS - 1:,} objects (max_objects); the invariant is not evaluated on a partial "
        "listing"
    )


def test_a_bucket_that_does_not_exist_is_an_error_never_ok(
    schema_database: str, tmp_path: Path, endpoint: str
) -> None:
    inv = s3_invariant(tmp_path, endpoint, "no-such-bucket-here")
    with Runner(schema_database, concurrency=1) as runner:
        result = runner.run_one(inv)
    assert (result.status, result.count) == ("error", None)
    assert result.error is not None
    assert result.error.startswith(
        f"source receipt_objects: listing s3://no-such-bucket-here/receipts/ at {endpoint} "
        "failed: NoSuchBucket: "
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_store_is_an_error_within_the_listing_timeout() -> None:
    spec = SourceSpec(
        s3="s3://receipts-prod/receipts/",
        endpoint=f"http://127.0.0.1:{closed_port()}",
        region="us-east-1",
        timeout="5s",
    )
    with pytest.raises(ListingError) as raised:
        list_source("receipt_objects", spec)
    message = str(raised.value)
    assert message.startswith(
        f"source receipt_objects: listing s3://receipts-prod/receipts/ at {spec.endpoint} failed: "
    )
    assert "Could not connect to the endpoint URL" in message


def test_credentials_are_never_in_any_output_error_or_stored_run(
    schema_database: str, tmp_path: Path, endpoint: str, shared_bucket: str
) -> None:
    receipts_world(schema_database)
    good = s3_invariant(tmp_path / "a", endpoint, shared_bucket)
    missing = s3_invariant(tmp_path / "b", endpoint, "no-such-bucket-here")
    folder = tmp_path / "both"
    folder.mkdir()
    (folder / "good.sql").write_text(good.path.read_text())
    (folder / "missing.sql").write_text(missing.path.read_text())
    outputs = []
    for form in ("json", "text", "markdown"):
        ran = cli(*CHECK, "--dsn", schema_database, "--invariants", str(folder), "--format", form)
        assert ran.returncode == 2  # one violated, one error
        outputs.append(ran.stdout + ran.stderr)
    document = json.loads(outputs[0])
    assert {r["invariant"]: r["status"] for r in document["results"]} == {
        "good": "violated",
        "missing": "error",
    }
    assert all(r["listing_ms"] is not None for r in document["results"])
    with Runner(schema_database, concurrency=1) as runner:
        results = [runner.run_one(good), runner.run_one(missing)]
    store = StateStore.open(path=tmp_path / "state.db")
    for result in results:
        store.record_run(result.invariant, result, datetime.now(UTC))
    store.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("state.db*"))
    for secret in (SECRET_KEY, ACCESS_KEY):
        assert all(secret not in text for text in outputs)
        assert all(secret not in repr(result) for result in results)
        assert secret.encode() not in stored


def test_the_live_receipts_invariant_runs_on_a_streaming_standby(
    standby_pair: StandbyPair, tmp_path: Path, endpoint: str, shared_bucket: str
) -> None:
    """No temporary table, no write: the listing travels as parameters, so the bound query
    runs on a hot standby inside its READ ONLY transaction and finds the same problems."""
    apply_sql(standby_pair.primary_dsn, (ROOT / "deploy" / "demo" / "schema.sql").read_text())
    receipts_world(standby_pair.primary_dsn)
    standby_pair.wait_caught_up()
    with standby_pair.standby() as conn:
        assert conn.execute("SELECT pg_is_in_recovery(), count(*) FROM invoices").fetchone() == (
            True,
            len(REFERENCED) + 2 * len(SHARED) + len(MISSING),
        )
    inv = s3_invariant(tmp_path, endpoint, shared_bucket)
    with Runner(standby_pair.standby_dsn, concurrency=1) as runner:
        result = runner.run_one(inv)
    assert (result.status, result.error, result.count) == ("violated", None, len(EXPECTED))
    assert found(result.rows) == EXPECTED


LISTING_WITH_A_KEY_THAT_IS_NOT_UTF8 = b"""<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
<Name>bucket</Name><Prefix>receipts/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>
<EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>
<Contents><Key>receipts/fine%20%C3%BC.pdf</Key><Size>4</Size>
<LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents>
<Contents><Key>receipts/bad%FF%FE.pdf</Key><Size>4</Size>
<LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents>
</ListBucketResult>"""


def test_a_key_that_is_not_utf8_is_the_runs_error_not_a_key_silently_changed() -> None:
    """botocore decoded the url-encoded keys it had asked for itself, replacing bytes that
    are not UTF-8 (bad%FF%FE.pdf became bad\\ufffd\\ufffd.pdf), so the run judged a key the
    store does not hold. invmon asks for the encoding itself and decodes strictly."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    asked: list[str] = []

    class Store(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(LISTING_WITH_A_KEY_THAT_IS_NOT_UTF8)))
            self.end_headers()
            self.wfile.write(LISTING_WITH_A_KEY_THAT_IS_NOT_UTF8)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Store)
    serving = threading.Thread(target=server.serve_forever, name="test-fake-s3", daemon=True)
    serving.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        spec = SourceSpec(s3="s3://bucket/receipts/", endpoint=endpoint, timeout="10s")
        with pytest.raises(ListingError) as raised:
            list_source("receipt_objects", spec)
    finally:
        server.shutdown()
        server.server_close()
        serving.join(10)
    assert any("encoding-type=url" in path for path in asked), asked
    assert str(raised.value) == (
        "source receipt_objects: an object key that is not UTF-8: 'receipts/bad\\\\xff\\\\xfe.pdf'"
    )
