"""A fake Slack Web API: a real HTTP server on 127.0.0.1 that slack-sdk reaches through
`WebClient(base_url=...)`, implementing the calls invmon makes and recording every effect it
accepted, with deterministic, seeded fault injection at the boundary.

Faults (chosen per request by `random.Random(seed)`):
- accept_then_timeout: the effect lands, the answer comes after the client's timeout;
- reset: the connection is closed before anything is accepted;
- rate_limit: 429 with Retry-After, nothing accepted;
- error_500_applied / error_500: a 500 after or without accepting the effect;
- slow: a short delay, then a normal answer.

Also `archived` (channel ids that conversations.list leaves out and conversations.info calls
archived) and `answer_without(method, field)` (the next ok answer lacks a field, its effect
applied), for the checks of the delivery path.

Rate limit (off by default): `post_rate=(per_second, burst)` gives each channel a token bucket
for chat.postMessage, as Slack's "about one message per second per channel, short bursts
allowed"; a post that finds the bucket empty gets 429 with an integer Retry-After and nothing
is accepted. Counted in `rate_limited` (channel id -> 429s).
"""

from __future__ import annotations

import itertools
import json
import math
import random
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MANIFEST_SCOPES = (
    "chat:write",
    "channels:history",
    "groups:history",
    "channels:read",
    "groups:read",
    "files:write",
    "files:read",
    "usergroups:read",
)
# The scopes each method needs (one of them will do), as Slack's method pages list them for
# a bot token; a call without one is refused with missing_scope, `needed` and `provided`.
METHOD_SCOPES: dict[str, tuple[str, ...]] = {
    "chat.postMessage": ("chat:write",),
    "chat.update": ("chat:write",),
    "chat.postEphemeral": ("chat:write",),
    "files.getUploadURLExternal": ("files:write",),
    "files.completeUploadExternal": ("files:write",),
    "files.info": ("files:read",),
    "conversations.history": ("channels:history", "groups:history"),
    "conversations.replies": ("channels:history", "groups:history"),
    "conversations.info": ("channels:read", "groups:read"),
    "conversations.list": ("channels:read", "groups:read"),
    "usergroups.users.list": ("usergroups:read",),
}
TOKEN = "xoxb-fake-token"
APP_TOKEN = "xapp-fake-app-token"
FAULTS = ("accept_then_timeout", "reset", "rate_limit", "error_500_applied", "error_500", "slow")


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    thread_ts: str | None = None
    metadata: dict[str, Any] | None = None
    files: list[dict[str, Any]] = field(default_factory=list)
    updates: int = 0

    @property
    def key(self) -> str | None:
        return ((self.metadata or {}).get("event_payload") or {}).get("key")


@dataclass
class File:
    id: str
    name: str
    length: int
    data: bytes | None = None
    title: str | None = None
    shares: dict[str, list[str]] = field(default_factory=dict)  # channel -> thread ts


class FakeSlack:
    def __init__(
        self,
        seed: int = 0,
        fault_rate: float = 0.0,
        channels: dict[str, str] | None = None,
        answer_delay: float = 0.5,
        clock: Callable[[], datetime] | None = None,
        post_rate: tuple[float, int] | None = None,
    ) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.fault_rate = fault_rate
        self.answer_delay = answer_delay  # how late an accept_then_timeout answer comes
        # Slack's ts is its clock at the post; the tests' clock is what invmon sees as now.
        self.clock = clock or (lambda: datetime.now(UTC))
        self.channels = channels or {"C0INVARIANTS": "invariants", "C0PAYMENTS": "payments"}
        self.messages: list[Message] = []
        self.files: dict[str, File] = {}
        self.calls: list[tuple[str, str]] = []  # (method, fault)
        self.ephemerals: list[tuple[str, str, str]] = []  # (channel, user, text)
        self.usergroups: dict[str, list[str]] = {}
        self.socket_url: str | None = None  # what apps.connections.open hands out
        self.scripted: dict[str, list[str]] = {}  # method -> faults for its next calls
        # method -> an Event its calls wait for (up to 30 s) before answering: a Slack that
        # answers late, released by the test when it chooses.
        self.gates: dict[str, threading.Event] = {}
        self.archived: set[str] = set()  # channel ids: listed no more, info says archived
        # Channel ids the bot is not a member of: conversations.info answers as ever, a post
        # is refused with not_in_channel (a public channel without chat:write.public).
        self.not_member: set[str] = set()
        self.stripped: dict[str, list[str]] = {}  # method -> a field its next answer lacks
        # The token's scopes, in each answer's x-oauth-scopes header as Slack sends them;
        # None: no such header (a proxy that drops it). Those of deploy/slack/manifest.yaml.
        self.scopes: set[str] | None = set(MANIFEST_SCOPES)
        self.lock = threading.Lock()
        # chat.postMessage per channel: (tokens per second, bucket size); None: unlimited.
        # Real (monotonic) time, not `clock`: the limit is about how fast calls arrive.
        self.post_rate = post_rate
        self._buckets: dict[str, tuple[float, float]] = {}  # channel -> (tokens, at)
        self.rate_limited: dict[str, int] = {}  # channel id -> 429s answered
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self._serving = threading.Thread(target=self.server.serve_forever, daemon=True)

    # --- lifecycle -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    def __enter__(self) -> FakeSlack:
        self._serving.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def faults_off(self) -> None:
        with self.lock:
            self.fault_rate = 0.0

    # --- what tests look at --------------------------------------------------------------

    def roots(self) -> list[Message]:
        with self.lock:
            return [m for m in self.messages if m.thread_ts is None]

    def thread(self, root: Message) -> list[Message]:
        with self.lock:
            return [m for m in self.messages if m.thread_ts == root.ts]

    def shared_files(self) -> list[File]:
        with self.lock:
            return [f for f in self.files.values() if f.shares]

    # --- the API -------------------------------------------------------------------------

    def revoke(self, *scopes: str) -> None:
        """The token loses `scopes` (the app reinstalled without them)."""
        with self.lock:
            assert self.scopes is not None, "a token whose scopes are not said has none to lose"
            self.scopes -= set(scopes)

    def grant(self, *scopes: str) -> None:
        """The token gains `scopes` (the app reinstalled with them)."""
        with self.lock:
            assert self.scopes is not None, "a token whose scopes are not said gains none"
            self.scopes |= set(scopes)

    def fail_next(self, method: str, fault: str) -> None:
        """The next call of `method` meets `fault`, whatever the seed says: for a test about
        one particular outcome."""
        assert fault in FAULTS
        with self.lock:
            self.scripted.setdefault(method, []).append(fault)

    def answer_without(self, method: str, field: str) -> None:
        """The next ok answer to `method` lacks `field` (what a broken proxy might send),
        after its effect was applied."""
        with self.lock:
            self.stripped.setdefault(method, []).append(field)

    def _strip(self, method: str, answer: dict[str, Any]) -> dict[str, Any]:
        if answer.get("ok") and self.stripped.get(method):
            left_out = self.stripped[method].pop(0)
            answer = {k: v for k, v in answer.items() if k != left_out}
        return answer

    def _fault(self, method: str) -> str:
        with self.lock:
            roll = self.rng.random()
            fault = "none"
            if roll < self.fault_rate:
                fault = FAULTS[self.rng.randrange(len(FAULTS))]
            if self.scripted.get(method):
                fault = self.scripted[method].pop(0)
            self.calls.append((method, fault))
            return fault

    def _throttle(self, method: str, args: dict[str, Any]) -> int | None:
        """Seconds to put in Retry-After when this call exceeds its channel's rate, else
        None (and a token is spent). Only chat.postMessage, only with `post_rate`."""
        if self.post_rate is None or method != "chat.postMessage":
            return None
        channel = self._channel(args.get("channel"))
        if channel is None:
            return None  # channel_not_found is answered as usual
        rate, burst = self.post_rate
        now = time.monotonic()
        with self.lock:
            tokens, at = self._buckets.get(channel, (float(burst), now))
            tokens = min(float(burst), tokens + (now - at) * rate)
            if tokens >= 1:
                self._buckets[channel] = (tokens - 1, now)
                return None
            self._buckets[channel] = (tokens, now)
            self.rate_limited[channel] = self.rate_limited.get(channel, 0) + 1
            # Slack's Retry-After is whole seconds: until the next token, rounded up.
            return max(1, math.ceil((1 - tokens) / rate))

    def _next_ts(self) -> str:
        return f"{int(self.clock().timestamp())}.{next(self._ts):06d}"

    def _channel(self, value: str | None) -> str | None:
        if value in self.channels:
            return value
        by_name = {name: cid for cid, name in self.channels.items()}
        return by_name.get(str(value or "").lstrip("#"))

    def call(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        """Apply one API call to the fake's state. Runs under the lock."""
        if method == "chat.postEphemeral":
            self.ephemerals.append(
                (str(args.get("channel")), str(args.get("user")), str(args.get("text")))
            )
            return {"ok": True, "message_ts": self._next_ts()}
        if method == "usergroups.users.list":
            group = str(args.get("usergroup"))
            if group not in self.usergroups:
                return {"ok": False, "error": "no_such_subteam"}
            return {"ok": True, "users": self.usergroups[group]}
        if method == "apps.connections.open":
            return {"ok": True, "url": self.socket_url}
        if method == "auth.test":
            return {"ok": True, "user_id": "UINVMON", "team": "fake"}
        if method == "conversations.list":
            hide = str(args.get("exclude_archived", "")).lower() in ("1", "true")
            return {
                "ok": True,
                "channels": [
                    {"id": c, "name": n}
                    for c, n in self.channels.items()
                    if not (hide and c in self.archived)
                ],
                "response_metadata": {"next_cursor": ""},
            }
        if method == "conversations.info":
            # Slack looks channels up by id only here.
            channel_id = str(args.get("channel"))
            if channel_id not in self.channels:
                return {"ok": False, "error": "channel_not_found"}
            return {
                "ok": True,
                "channel": {
                    "id": channel_id,
                    "name": self.channels[channel_id],
                    "is_archived": channel_id in self.archived,
                },
            }
        if method == "chat.postMessage":
            channel = self._channel(args.get("channel"))
            if channel is None:
                return {"ok": False, "error": "channel_not_found"}
            if channel in self.not_member:
                return {"ok": False, "error": "not_in_channel"}
            thread_ts = args.get("thread_ts") or None
            if thread_ts and not any(
                m.ts == thread_ts and m.channel == channel for m in self.messages
            ):
                return {"ok": False, "error": "thread_not_found"}
            metadata = args.get("metadata")
            if isinstance(metadata, str):
                metadata = json.loads(metadata)
            blocks = args.get("blocks") or []
            if isinstance(blocks, str):
                blocks = json.loads(blocks)
            message = Message(
                channel, self._next_ts(), str(args.get("text", "")), blocks, thread_ts, metadata
            )
            self.messages.append(message)
            return {"ok": True, "channel": channel, "ts": message.ts}
        if method == "chat.update":
            channel = self._channel(args.get("channel"))
            for message in self.messages:
                if message.channel == channel and message.ts == args.get("ts"):
                    blocks = args.get("blocks") or []
                    message.blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
                    message.text = str(args.get("text", ""))
                    message.updates += 1
                    return {"ok": True, "channel": channel, "ts": message.ts}
            return {"ok": False, "error": "message_not_found"}
        if method in ("conversations.history", "conversations.replies"):
            return self._history(method, args)
        if method == "files.getUploadURLExternal":
            file_id = f"F{next(self._ids):08d}"
            self.files[file_id] = File(file_id, str(args["filename"]), int(args["length"]))
            return {
                "ok": True,
                "file_id": file_id,
                "upload_url": f"http://127.0.0.1:{self.port}/upload/{file_id}",
            }
        if method == "files.completeUploadExternal":
            files = args.get("files")
            entries = json.loads(files) if isinstance(files, str) else files
            channel = self._channel(args.get("channel_id"))
            if channel is None:
                return {"ok": False, "error": "channel_not_found"}
            assert entries is not None, "files.completeUploadExternal without `files`"
            for entry in entries:
                found = self.files.get(entry["id"])
                if found is None or found.data is None:
                    return {"ok": False, "error": "file_not_found"}
                if found.shares:
                    return {"ok": False, "error": "file_already_completed"}
            thread_ts = args.get("thread_ts")
            for entry in entries:
                found = self.files[entry["id"]]
                found.title = entry.get("title")
                found.shares[channel] = [thread_ts or ""]
                self.messages.append(
                    Message(
                        channel,
                        self._next_ts(),
                        "",
                        [],
                        thread_ts,
                        None,
                        [{"id": found.id, "name": found.name, "title": found.title}],
                    )
                )
            return {"ok": True, "files": [{"id": e["id"]} for e in entries]}
        if method == "files.info":
            found = self.files.get(str(args.get("file")))
            if found is None:
                return {"ok": False, "error": "file_not_found"}
            shares = {
                "public": {c: [{"ts": t}] for c, ts_list in found.shares.items() for t in ts_list}
            }
            return {"ok": True, "file": {"id": found.id, "name": found.name, "shares": shares}}
        return {"ok": False, "error": "unknown_method"}

    def _history(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args.get("channel"))
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        if method == "conversations.history":
            oldest = float(args.get("oldest") or 0)
            found = [
                m
                for m in self.messages
                if m.channel == channel and m.thread_ts is None and float(m.ts) >= oldest
            ]
            found.reverse()  # newest first, as Slack does
        else:
            root = args.get("ts")
            found = [
                m
                for m in self.messages
                if m.channel == channel and (m.ts == root or m.thread_ts == root)
            ]
        limit = max(1, min(int(args.get("limit") or 100), 2))  # tiny pages: pagination matters
        start = int(args.get("cursor") or 0)
        page = found[start : start + limit]
        with_metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        out = []
        for m in page:
            item: dict[str, Any] = {"ts": m.ts, "text": m.text}
            if m.thread_ts:
                item["thread_ts"] = m.thread_ts
            if with_metadata and m.metadata:
                item["metadata"] = m.metadata
            out.append(item)
        more = start + limit < len(found)
        return {
            "ok": True,
            "messages": out,
            "has_more": more,
            "response_metadata": {"next_cursor": str(start + limit) if more else ""},
        }

    # --- HTTP ----------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.do_POST()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = urllib.parse.urlparse(self.path)
                if path.path.startswith("/upload/"):
                    return self._upload(path.path.rsplit("/", 1)[1], body)
                method = path.path.removeprefix("/api/")
                expected = APP_TOKEN if method == "apps.connections.open" else TOKEN
                if self.headers.get("Authorization") != f"Bearer {expected}":
                    return self._json(200, {"ok": False, "error": "invalid_auth"})
                args = self._args(body, path.query)
                fault = fake._fault(method)  # recorded in fake.calls, refused or not
                needed = METHOD_SCOPES.get(method, ())
                with fake.lock:
                    granted = None if fake.scopes is None else set(fake.scopes)
                if granted is not None and needed and not granted & set(needed):
                    refusal = {"ok": False, "error": "missing_scope", "needed": ",".join(needed)}
                    refusal["provided"] = ",".join(sorted(granted))
                    return self._json(200, refusal)
                if fault == "reset":
                    return self._reset()
                if fault == "rate_limit":
                    return self._json(
                        429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "1"}
                    )
                if fault == "error_500":
                    return self._json(500, {"ok": False, "error": "internal_error"})
                wait = fake._throttle(method, args)
                if wait is not None:
                    return self._json(
                        429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(wait)}
                    )
                if fault == "slow":
                    time.sleep(0.05)
                gate = fake.gates.get(method)
                if gate is not None:
                    gate.wait(30)
                with fake.lock:
                    answer = fake._strip(method, fake.call(method, args))
                if fault == "error_500_applied":
                    return self._json(500, {"ok": False, "error": "internal_error"})
                if fault == "accept_then_timeout":
                    time.sleep(fake.answer_delay)
                    return self._reset()
                with fake.lock:
                    scopes = None if fake.scopes is None else ",".join(sorted(fake.scopes))
                self._json(200, answer, {"x-oauth-scopes": scopes} if scopes is not None else {})

            def _args(self, body: bytes, query: str) -> dict[str, Any]:
                args: dict[str, Any] = {k: v[0] for k, v in urllib.parse.parse_qs(query).items()}
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    args.update(json.loads(body or b"{}"))
                elif body:
                    args.update({k: v[0] for k, v in urllib.parse.parse_qs(body.decode()).items()})
                return args

            def _upload(self, file_id: str, body: bytes) -> None:
                with fake.lock:
                    found = fake.files.get(file_id)
                    if found is not None:
                        found.data = body
                self._json(200 if found else 404, {"ok": found is not None})

            def _json(
                self, status: int, document: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _reset(self) -> None:
                self.close_connection = True
                try:
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                    )
                    self.connection.close()
                except OSError:
                    pass

        return Handler
