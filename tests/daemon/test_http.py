"""The listener under hostile requests: bounded bodies, headers, connections and time;
every request answered with a status and a body; nothing dropped with a traceback."""

from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping

import pytest
from builders import slack_signature
from helpers import wait_for

from monitor.daemon.http import MAX_BODY, THREADS, Listener, Probe, Routes
from monitor.web.page import Reply

SECRET = "signing-secret-for-tests"


def answer(body: bytes, headers: Mapping[str, str]) -> tuple[int, str]:
    """Stands in for Interactions.http in the raw-request tests."""
    return 200, f"got {len(body)} bytes"


@pytest.fixture
def listener() -> Iterator[Listener]:
    routes = Routes(
        healthz=Probe(lambda: None),
        readyz=Probe(lambda: "the database is down"),
        metrics=lambda: b"invmon_up 1\n",
        slack_actions=answer,
    )
    served = Listener("127.0.0.1:0", routes)
    served.start()
    yield served
    served.stop()


def raw(listener: Listener, request: bytes, timeout: float = 10) -> bytes:
    """Sends `request` while reading the answer: a server that refuses a request early
    answers and closes while the client is still sending, and that answer is what counts."""
    host, port = listener.address.rsplit(":", 1)
    chunks: list[bytes] = []
    with socket.create_connection((host, int(port)), timeout=timeout) as conn:

        def send() -> None:
            try:
                conn.sendall(request)
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the server stopped reading; its answer is already on the way

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass  # after the answer, a reset for the bytes it never read
        sender.join(timeout)
    return b"".join(chunks)


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


@pytest.mark.parametrize(
    ("content_length", "status"),
    [(b"-1", 400), (b"abc", 400), (b"1e3", 400), (str(MAX_BODY + 1).encode(), 413)],
)
def test_a_bad_or_too_large_content_length_is_refused_with_a_status(
    listener: Listener, content_length: bytes, status: int
) -> None:
    request = (
        b"POST /slack/actions HTTP/1.1\r\nHost: x\r\nContent-Length: "
        + content_length
        + b"\r\n\r\n"
    ) + b"x" * 1024
    response = raw(listener, request)
    assert status_of(response) == status, response[:200]
    assert response.split(b"\r\n\r\n", 1)[1]  # with a body


def test_a_chunked_body_over_the_limit_is_refused(listener: Listener) -> None:
    chunk = b"x" * 65536
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(20)) + b"0\r\n\r\n"
    request = b"POST /slack/actions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert status_of(raw(listener, request + body)) == 413


def test_too_many_headers_are_refused(listener: Listener) -> None:
    headers = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 100) for i in range(400))
    response = raw(listener, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
    assert status_of(response) in (400, 431)


def test_probes_answer_with_their_reason(listener: Listener) -> None:
    assert raw(listener, b"GET /healthz HTTP/1.0\r\n\r\n").endswith(b"\r\n\r\nok\n")
    ready = raw(listener, b"GET /readyz HTTP/1.0\r\n\r\n")
    assert status_of(ready) == 503 and ready.endswith(b"the database is down\n")
    assert status_of(raw(listener, b"POST /healthz HTTP/1.0\r\nContent-Length: 0\r\n\r\n")) == 405
    assert status_of(raw(listener, b"GET /nope HTTP/1.0\r\n\r\n")) == 404


def test_slow_clients_neither_block_the_probes_nor_stay_forever(listener: Listener) -> None:
    host, port = listener.address.rsplit(":", 1)
    slow = []
    for _ in range(300):
        conn = socket.create_connection((host, int(port)), timeout=30)
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never finishes
        slow.append(conn)
    try:
        started = time.monotonic()
        assert raw(listener, b"GET /healthz HTTP/1.0\r\n\r\n").endswith(b"ok\n")
        assert time.monotonic() - started < 5

        def all_closed() -> bool:
            return all(conn.recv(1024) == b"" for conn in slow)

        wait_for(all_closed, 30, "the server to close the idle connections")
    finally:
        for conn in slow:
            conn.close()


def test_a_request_trickled_a_byte_at_a_time_is_cut_off_and_healthz_answers(
    listener: Listener,
) -> None:
    """Every byte counts as activity for waitress's idle timeout, so clients sending one
    byte every few seconds kept their connections for as long as they liked: 520 of them
    held every slot and /healthz went unanswered. A request must arrive within
    REQUEST_SECONDS of its first byte."""
    from monitor.daemon.http import REQUEST_SECONDS

    host, port = listener.address.rsplit(":", 1)
    trickling = []
    for _ in range(50):
        conn = socket.create_connection((host, int(port)), timeout=5)
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-a: ")
        trickling.append(conn)
    open_ = list(trickling)
    started = time.monotonic()
    deadline = started + REQUEST_SECONDS + 60  # generous on a busy machine; never forever
    try:
        while open_ and time.monotonic() < deadline:
            still = []
            for conn in open_:
                try:
                    conn.sendall(b"a")  # well within the idle timeout: activity
                    conn.settimeout(0.01)
                    closed = conn.recv(1) == b""
                except TimeoutError:
                    closed = False
                except OSError:
                    closed = True
                if not closed:
                    still.append(conn)
            open_ = still
            time.sleep(0.5)  # the trickle's pace: one byte each half second
        assert open_ == [], f"{len(open_)} trickling connections still open"
        assert time.monotonic() - started >= REQUEST_SECONDS  # not cut before the bound
        assert raw(listener, b"GET /healthz HTTP/1.0\r\n\r\n").endswith(b"ok\n")
    finally:
        for conn in trickling:
            conn.close()


def test_healthz_is_answered_while_every_worker_thread_is_held() -> None:
    """Page builds, /readyz's connections to targets, Slack actions: whatever holds the
    listener's threads, /healthz does not wait in line behind it, and still says what the
    daemon's parts say."""
    lock = threading.Lock()  # guards `held`
    held = 0
    release = threading.Event()
    problem: list[str | None] = [None]

    def stuck(method: str, path: str, query: str, headers: Mapping[str, str]) -> Reply | None:
        nonlocal held
        if path != "/stuck":
            return None
        with lock:
            held += 1
        release.wait(60)
        return Reply(200, b"built\n", "text/plain")

    routes = Routes(
        healthz=Probe(lambda: problem[0]),
        readyz=Probe(lambda: None),
        metrics=lambda: b"",
        page=stuck,
    )
    served = Listener("127.0.0.1:0", routes)
    served.start()
    answers: list[bytes] = []
    # Every worker thread held, and two more requests queued behind them.
    clients = [
        threading.Thread(
            target=lambda: answers.append(raw(served, b"GET /stuck HTTP/1.0\r\n\r\n", 60))
        )
        for _ in range(THREADS + 2)
    ]
    try:
        for client in clients:
            client.start()

        def all_held() -> bool:
            with lock:
                return held == THREADS

        wait_for(all_held, 30, "every worker thread to be held")
        assert raw(served, b"GET /healthz HTTP/1.0\r\n\r\n", 10).endswith(b"\r\n\r\nok\n")
        problem[0] = "scheduler is not running"
        unhealthy = raw(served, b"GET /healthz HTTP/1.0\r\n\r\n", 10)
        assert status_of(unhealthy) == 503
        assert unhealthy.endswith(b"\r\n\r\nscheduler is not running\n")
        with lock:
            assert held == THREADS  # the pages were still being built meanwhile
    finally:
        release.set()
        for client in clients:
            client.join(60)
        served.stop()
    assert [status_of(a) for a in answers] == [200] * (THREADS + 2)


# --- the signed Slack endpoint, with its real verifier --------------------------------------


@pytest.fixture
def slack_http(world: object) -> Iterator[object]:
    from alerts.alerter import Alerter
    from alerts.console import ConsoleTransport
    from alerts.interactions import Interactions
    from monitor.config import SlackConfig

    store = world.store  # type: ignore[attr-defined]
    config = SlackConfig(signing_secret=SECRET)
    alerter = Alerter(store, config, lambda _: None, world.clock, ConsoleTransport())  # type: ignore[attr-defined]
    yield Interactions(alerter, config)


@pytest.mark.parametrize("timestamp", ["", "abc", "1e10", "-5", "99999999999999999999999"])
def test_a_malformed_timestamp_is_a_401_not_a_traceback(slack_http: object, timestamp: str) -> None:
    body = b"payload=%7B%7D"
    status, text = slack_http.http(body, slack_signature(body, SECRET, timestamp))  # type: ignore[attr-defined]
    assert (status, text) == (401, "invalid signature")


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        ("[1, 2]", 400),
        ('"text"', 400),
        ('{"type": "block_actions", "user": "U1", "actions": "x", "channel": 5}', 200),
        ('{"type": "block_actions", "user": {"id": "U1"}, "actions": [5, {"value": []}]}', 200),
    ],
)
def test_a_signed_payload_of_the_wrong_shape_is_answered(
    slack_http: object, payload: str, status: int
) -> None:
    body = urllib.parse.urlencode({"payload": payload}).encode()
    now = str(int(time.time()))
    answered, _ = slack_http.http(body, slack_signature(body, SECRET, now))  # type: ignore[attr-defined]
    assert answered == status


def test_the_listener_answers_on_ipv6(tmp_path: object) -> None:
    routes = Routes(healthz=Probe(lambda: None), readyz=Probe(lambda: None), metrics=lambda: b"")
    try:
        served = Listener("[::1]:0", routes)
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    served.start()
    try:
        host, port = served.address.rsplit(":", 1)
        assert host == "[::1]"
        with socket.create_connection(("::1", int(port)), timeout=5) as conn:
            conn.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            assert conn.recv(1024).startswith(b"HTTP/1.0 200")
    finally:
        served.stop()


def test_a_queue_of_waiting_requests_is_said_once_a_minute_with_its_depth(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """waitress said 'Task queue depth is N' for every request that waited for a thread:
    55,000 lines in two 15-second page loads. The lanes' dispatchers say it through
    QueueDepth: the deepest queue, at most once a minute."""
    from monitor.daemon.http import Lanes, QueueDepth

    lanes = Lanes(2)
    try:
        assert lanes.rest.queue_logger is lanes.queue_depth
        assert lanes.health.queue_logger is lanes.queue_depth
    finally:
        lanes.shutdown(timeout=5)
    now = [0.0]
    depth = QueueDepth(clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="invmon.http")
    for n, at in ((1, 0.0), (5, 10.0), (3, 59.0), (2, 60.0), (9, 61.0), (4, 130.0)):
        now[0] = at
        depth.warning("Task queue depth is %d", n)
    assert [r.getMessage() for r in caplog.records if r.name == "invmon.http"] == [
        "requests waited for a listener thread: up to 1 in the queue (said at most once a minute)",
        "requests waited for a listener thread: up to 5 in the queue (said at most once a minute)",
        "requests waited for a listener thread: up to 9 in the queue (said at most once a minute)",
    ]
