"""The config file (YAML) and the models it is checked against.

Secrets never need to be written into the file: any string may be `${ENV_VAR}`,
`${ENV_VAR:-default}` or `${file:/run/secrets/name}`, resolved at load time.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import urllib.parse
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import psycopg
from psycopg.conninfo import conninfo_to_dict
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from monitor import yamlsafe
from monitor.durations import parse_duration
from monitor.execution.execute import DEFAULT_TEMP_FILE_LIMIT, temp_file_kb
from monitor.execution.offending import DEFAULT_ROW_LIMITS, MIN_CELL, RowLimits
from monitor.execution.redaction import DEFAULT_COLUMNS, DETECTORS, Detector, Redaction
from monitor.fence.fence import Allowances, FencePolicy
from monitor.invariants.header import DEFAULT_TARGET, Severity
from monitor.invariants.loader import MAX_FILE_BYTES, Defaults, Loading
from monitor.text import printable, shorten
from monitor.yamlsafe import YamlProblem

DEFAULT_CONFIG = Path("invmon.yaml")
_REFERENCE = re.compile(r"\$\{([^}]+)\}")

# How an acknowledgement may last (store/acks.py applies them; `slack.ack_modes` offers them).
AckMode = Literal["until_resolved", "until_new_rows"]
ACK_MODES: tuple[AckMode, ...] = ("until_resolved", "until_new_rows")


class ConfigError(Exception):
    """A config problem, phrased for the person who wrote the file."""


def _duration(value: Any) -> timedelta:
    return parse_duration(value)


def check_dsn(value: str | None) -> str | None:
    """A DSN libpq can read; the error never repeats the value, which holds a password."""
    if value is not None:
        try:
            conninfo_to_dict(value)
        except psycopg.ProgrammingError:
            raise ValueError(
                "cannot be read as a PostgreSQL connection string (the value is not shown); "
                "check its quoting and percent-encoding"
            ) from None
    return value


def check_url(value: str, example: str) -> str:
    """An http(s) URL that urllib and slack-sdk can call: a scheme, a host, a valid port, no
    spaces, no user or password. The reasons never repeat the value: a ping URL is a
    secret, and a URL with a password in it is one too."""
    parts = urllib.parse.urlsplit(value)
    if parts.scheme.lower() not in ("http", "https") or not value.lower().startswith(
        f"{parts.scheme.lower()}://"
    ):
        raise ValueError(f"must start with http:// or https://, e.g. {example}")
    if re.search(r"[\s\x00-\x1f\x7f]", value):
        raise ValueError("must not contain spaces or control characters")
    if parts.username is not None or parts.password is not None:
        # Neither urllib nor slack-sdk sends them (they become part of the host name),
        # and a password written here would be shown wherever the URL is.
        raise ValueError("must not hold a user or password (user:password@)")
    if not parts.hostname:
        raise ValueError(f"must name a host, e.g. {example}")
    try:
        _ = parts.port  # reading it is the check: urlsplit raises for a bad port
    except ValueError:
        raise ValueError("has a port that is not a number from 0 to 65535") from None
    return value


def _safe_to_show(value: Any) -> bool:
    # Values may come from ${VAR} and hold secrets: echo only short, plain ones.
    text = str(value)
    return len(text) <= 40 and not re.search(r"://|password|secret|token|xox|@", text, re.I)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _temp_file_limit(value: str | None) -> str | None:
    if value is not None:
        temp_file_kb(value)  # its ValueError says what to write
    return value


class DatabaseConfig(_Model):
    """How invmon uses a monitored database; the top-level `database:` is every target's,
    a target's own `lock_timeout`, `temp_file_limit`… win over it."""

    connect_timeout: timedelta = timedelta(seconds=10)
    lock_timeout: timedelta = timedelta(seconds=5)
    # A standby cancels queries that conflict with replay; such a run is retried.
    recovery_conflict_retries: int = Field(default=3, ge=0, le=10)
    retry_backoff: timedelta = timedelta(seconds=1)
    # What one run may write to temporary files, in PostgreSQL's units. Only a superuser
    # may set it, so it is set for a superuser's runs (never above a lower limit the session
    # already has); a role is bounded by its own (deploy/readonly-role.sql). null: the
    # session's own setting, whatever it is.
    temp_file_limit: str | None = DEFAULT_TEMP_FILE_LIMIT
    # Run even as a role that can change the database (a superuser, an owner of its
    # objects, …; monitor/fence/role_check.py), which is refused otherwise. A deliberate exception.
    allow_privileged_role: bool = False

    _t = field_validator("connect_timeout", "lock_timeout", "retry_backoff", mode="before")(
        _duration
    )
    _s = field_validator("temp_file_limit")(_temp_file_limit)


class StateConfig(_Model):
    """Where the daemon keeps runs, incidents and events: never the monitored database."""

    path: Path = Path("invmon-state.db")  # SQLite file, used unless dsn is set
    dsn: str | None = None  # PostgreSQL, for a shared store (several daemons, HA)
    retention: timedelta = timedelta(days=30)  # runs older than this are pruned

    _t = field_validator("retention", mode="before")(_duration)
    _d = field_validator("dsn")(check_dsn)


class DaemonConfig(_Model):
    max_replica_lag: timedelta = timedelta(minutes=5)
    cannot_evaluate_after: int = Field(default=3, ge=1)  # consecutive errors
    jitter: timedelta = timedelta(seconds=10)  # capped at a tenth of an interval
    shutdown_grace: timedelta = timedelta(seconds=30)
    # A run that goes on this long past its timeout (plus its sources') is quarantined.
    overrun_margin: timedelta = timedelta(seconds=10)
    track_keys: int = Field(default=1000, ge=0, le=100_000)  # offending keys kept per run
    # Several daemons on one PostgreSQL store (claims.py, fleet.py): a claimed slot whose
    # daemon stops renewing it for `lease` is taken over; a daemon not preferred for a slot
    # waits `handoff` before claiming it.
    lease: timedelta = timedelta(seconds=30)
    handoff: timedelta = timedelta(seconds=5)

    _t = field_validator(
        "max_replica_lag",
        "jitter",
        "shutdown_grace",
        "lease",
        "handoff",
        "overrun_margin",
        mode="before",
    )(_duration)

    @field_validator("lease")
    @classmethod
    def _lease_long_enough(cls, value: timedelta) -> timedelta:
        if value < timedelta(seconds=3):
            raise ValueError("must be at least 3s: it is renewed every third of it")
        return value


class WatchdogConfig(_Model):
    """invmon watching itself (monitor/daemon/watchdog.py)."""

    interval: timedelta = timedelta(minutes=1)  # how often the self-checks run
    slo: timedelta = timedelta(minutes=10)  # an alert still undelivered after this is one
    ping_url: str | None = None  # dead man's switch (healthchecks.io style); ${…} it

    _t = field_validator("interval", "slo", mode="before")(_duration)

    @field_validator("ping_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("ping_url")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value, "https://hc-ping.com/<uuid>")


def parse_listen(value: str) -> tuple[str, int]:
    """`host:port`, or `[v6 address]:port`, as (host, port); ValueError otherwise."""
    host, _, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"write an IPv6 address in brackets, e.g. [::1]:9187, got {value!r}")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"write host:port, e.g. 127.0.0.1:9187 or [::1]:9187, got {value!r}")
    return host, int(port)


MIN_PAGE_TOKEN = 16  # a shared secret people type or paste; shorter ones are guessable


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach a listener bound to `host`."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name may resolve to anything


class HttpConfig(_Model):
    listen: str | None = "127.0.0.1:9187"  # /healthz, /readyz, /metrics; null disables
    # The status page (/) asks for this as a bearer token or a basic-auth password; without
    # it the page is served only on a loopback listener. Use ${INVMON_PAGE_TOKEN}.
    page_token: str | None = None
    page_refresh: timedelta = timedelta(seconds=30)  # the page reloads its tables this often

    _t = field_validator("page_refresh", mode="before")(_duration)

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is not None:
            parse_listen(value)
        return value

    @field_validator("page_token", mode="before")
    @classmethod
    def _empty_token_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("page_token")
    @classmethod
    def _long_enough(cls, value: str | None) -> str | None:
        if value is not None and len(value) < MIN_PAGE_TOKEN:
            raise ValueError(f"must be at least {MIN_PAGE_TOKEN} characters")
        return value

    @field_validator("page_refresh")
    @classmethod
    def _sane_refresh(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=1) <= value <= timedelta(hours=1):
            raise ValueError("must be between 1s and 1h")
        return value

    @property
    def page_is_local(self) -> bool:
        """The listener is reachable from this machine only."""
        return self.listen is not None and is_loopback(parse_listen(self.listen)[0])


class LogConfig(_Model):
    format: Literal["text", "json"] = "text"
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class RoutesConfig(_Model):
    severity: dict[Severity, str] = Field(default_factory=dict)  # severity -> channel
    owner: dict[str, str] = Field(default_factory=dict)  # owner (as in headers) -> channel


class SlackConfig(_Model):
    """Alert delivery. Without a token, alerts are written to stdout and the log."""

    token: str | None = None  # bot token (xoxb-…); use ${SLACK_BOT_TOKEN}
    api_url: str = "https://slack.com/api/"  # point at a proxy or a test server
    channel: str = "#invariants"  # default channel
    routes: RoutesConfig = RoutesConfig()
    repeat_interval: timedelta = timedelta(hours=4)  # reminders while open and unacked
    csv_max_rows: int = Field(default=1000, ge=1, le=100_000)
    csv_max_bytes: int = Field(default=4 << 20, ge=1024, le=1 << 30)  # the file stops here
    # "HH:MM" (UTC): each channel with incidents gets a summary of what is open,
    # acknowledged, snoozed, and what resolved in the last day. Unset: none.
    daily_summary: str | None = None
    digest_threshold: int = Field(default=5, ge=2)  # this many openings at once: one digest
    digest_window: timedelta = timedelta(seconds=2)  # quiet time that ends a burst
    # An opening this soon after its channel's digest was planned joins it (the digest is
    # edited to list it, its own message goes in the digest's thread), like Alertmanager's
    # group_interval: a burst whose last incidents open a round late is still one digest.
    digest_group_interval: timedelta = timedelta(minutes=5)
    # At most one thread reply per incident this often for rows that appear and go: later
    # changes wait and go out as one reply saying the net change (the root shows the live
    # count at every run). A reply not sent yet takes in the changes planned meanwhile.
    thread_update_interval: timedelta = timedelta(minutes=5)
    timeout: timedelta = timedelta(seconds=10)  # per Slack call
    settle: timedelta = timedelta(seconds=10)  # wait before looking for an ambiguous post
    lease: timedelta = timedelta(seconds=60)
    max_backoff: timedelta = timedelta(minutes=5)  # longest wait between retries
    # Buttons (acknowledge, snooze): clicks arrive over Socket Mode when app_token is set,
    # else on the daemon's listener at /slack/actions, verified with signing_secret.
    app_token: str | None = None  # xapp-…; use ${SLACK_APP_TOKEN}
    signing_secret: str | None = None  # use ${SLACK_SIGNING_SECRET}
    ack_modes: list[AckMode] = Field(default_factory=lambda: list(ACK_MODES), min_length=1)
    ack_allowlist: list[str] = Field(default_factory=list)  # user (U…) or group (S…) ids

    @field_validator("token", "app_token", "signing_secret", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # `${SLACK_APP_TOKEN:-}` with the variable unset means "not configured".
        return None if value == "" else value

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        check_url(value, "https://slack.com/api/")
        if urllib.parse.urlsplit(value).query or "#" in value:
            # slack-sdk appends the method name (chat.postMessage) to it.
            raise ValueError("must not have a query or fragment: the method name is appended")
        return value

    @field_validator("daily_summary")
    @classmethod
    def _time_of_day(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"([01][0-9]|2[0-3]):[0-5][0-9]", value):
            raise ValueError(f"write a time of day in UTC as HH:MM, e.g. 09:00, got {value!r}")
        return value

    @model_validator(mode="after")
    def _lease_outlasts_calls(self) -> SlackConfig:
        # A lease that expires while its holder is still calling Slack lets a second worker
        # reconcile a post that is still in flight; a CSV upload makes three calls.
        if self.lease <= self.timeout * 4:
            raise ValueError(
                f"lease ({self.lease.total_seconds():g}s) must be longer than four Slack "
                f"timeouts ({4 * self.timeout.total_seconds():g}s)"
            )
        return self

    @property
    def interactive(self) -> bool:
        return bool(self.app_token or self.signing_secret)

    _t = field_validator(
        "repeat_interval",
        "timeout",
        "settle",
        "lease",
        "digest_window",
        "digest_group_interval",
        "thread_update_interval",
        "max_backoff",
        mode="before",
    )(_duration)


class FenceConfig(_Model):
    """Names trusted past the read-only fence (see SECURITY.md). A VOLATILE function listed
    here runs with the READ ONLY transaction and the database role as its only fences; code
    that is not PostgreSQL's own (user-defined, or from an extension) runs only when listed
    here or when its extension is trusted, since its labels are its author's claim."""

    allow_functions: list[str] = Field(default_factory=list)  # `fn` or `schema.fn`
    allow_operators: list[str] = Field(default_factory=list)  # operators unknown offline
    # Types and domains whose code (input and output functions, CHECK constraints) is not
    # PostgreSQL's own: `type` or `schema.type`.
    allow_types: list[str] = Field(default_factory=list)
    # Extensions whose functions, operators and types are trusted like built-ins (their
    # volatility labels believed): e.g. [postgis, citext].
    trust_extensions: list[str] = Field(default_factory=list)
    # Settings current_setting() may read beyond the fence's harmless built-in ones; "*"
    # also allows pg_settings and the settings of every role (rolconfig).
    allow_settings: list[str] = Field(default_factory=list)

    def allowances(self) -> Allowances:
        def lowered(names: list[str]) -> frozenset[str]:
            return frozenset(name.lower() for name in names)

        return Allowances(
            functions=lowered(self.allow_functions),
            operators=lowered(self.allow_operators),
            types=lowered(self.allow_types),
            extensions=lowered(self.trust_extensions),
            settings=lowered(self.allow_settings),
        )

    def policy(self, with_database: bool) -> FencePolicy:
        """How files are judged when loaded: `with_database` when a database's own catalog
        will judge every query again before it runs (check, test, explain, run)."""
        return FencePolicy(self.allowances(), unknown_is_error=not with_database)


class RedactConfig(_Model):
    """Personal data in offending rows (execution/redaction.py): masked on every path out."""

    # Column-name patterns, matched against each word of a name and each run of its words
    # joined by `_` (`customer_email`, `first_name`). Setting it replaces the defaults;
    # `add_columns` adds to them (`add_columns: [name]`) without repeating them.
    columns: list[str] = Field(default_factory=lambda: list(DEFAULT_COLUMNS))
    add_columns: list[str] = Field(default_factory=list)
    values: list[Detector] = Field(default_factory=lambda: list(DETECTORS))
    # The key of the masking hash; use ${file:…} or ${VAR}. Unset: the daemon keeps a random
    # one in its state store (so masks are stable across restarts), `check` makes one a run.
    key: str | None = None

    @field_validator("key", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    def redaction(self, stored_key: bytes | None = None) -> Redaction:
        key = self.key.encode() if self.key else stored_key or secrets.token_bytes(32)
        return Redaction(key, (*self.columns, *self.add_columns), tuple(self.values))


class TargetConfig(_Model):
    """One monitored database (config `targets:`); unset fields take the top-level ones."""

    dsn: str | None = None
    concurrency: int | None = Field(default=None, ge=1, le=64)
    max_replica_lag: timedelta | None = None
    connect_timeout: timedelta | None = None
    lock_timeout: timedelta | None = None
    statement_timeout: timedelta | None = None  # the ceiling for its invariants' timeouts
    channel: str | None = None  # its incidents' default channel (a file's own wins)
    owner: str | None = None  # its invariants' default owner
    schema_path: Path | None = Field(default=None, alias="schema")  # for lint and test
    # `database.temp_file_limit` for this target (null here too: the session's own).
    temp_file_limit: str | None = None
    # `database.allow_privileged_role` for this target: the role it connects as may be one
    # that can change the database (see DatabaseConfig).
    allow_privileged_role: bool | None = None

    _t = field_validator(
        "max_replica_lag", "connect_timeout", "lock_timeout", "statement_timeout", mode="before"
    )(_duration)
    _d = field_validator("dsn")(check_dsn)
    _s = field_validator("temp_file_limit")(_temp_file_limit)


@dataclass(frozen=True)
class Target:
    """A target with every setting resolved (its own, else the top-level one)."""

    name: str
    dsn: str | None
    concurrency: int
    database: DatabaseConfig
    max_replica_lag: timedelta
    statement_timeout: timedelta | None
    channel: str | None
    owner: str | None
    schema_path: Path | None
    # Where the config allows this target to run as a privileged role (for messages).
    allowance_field: str = "database.allow_privileged_role"

    @property
    def allow_privileged_role(self) -> bool:
        return self.database.allow_privileged_role


class LimitsConfig(_Model):
    """Bounds on what invmon reads; each refusal says which limit it met."""

    file_bytes: int = Field(default=MAX_FILE_BYTES, ge=1024, le=16 << 20)
    # What one run brings back and keeps (offending.py): a longer value is cut by the
    # database; rows past sample_bytes are counted, not kept; keys past keys_bytes are not
    # tracked (so none is claimed gone).
    cell_bytes: int = Field(default=DEFAULT_ROW_LIMITS.cell_bytes, ge=MIN_CELL, le=1 << 20)
    row_bytes: int = Field(default=DEFAULT_ROW_LIMITS.row_bytes, ge=1024, le=16 << 20)
    sample_bytes: int = Field(default=DEFAULT_ROW_LIMITS.sample_bytes, ge=1024, le=256 << 20)
    keys_bytes: int = Field(default=DEFAULT_ROW_LIMITS.keys_bytes, ge=1024, le=256 << 20)

    def rows(self) -> RowLimits:
        return RowLimits(self.cell_bytes, self.row_bytes, self.sample_bytes, self.keys_bytes)


class Config(_Model):
    dsn: str | None = None
    invariants: Path = Path("invariants")
    # The production schema (e.g. `pg_dump --schema-only`), for `invmon test` and
    # `invmon lint --schema`.
    schema_path: Path | None = Field(default=None, alias="schema")
    max_cost: float | None = Field(default=None, gt=0)  # `invmon explain` budget per query
    concurrency: int = Field(default=4, ge=1, le=64)
    defaults: Defaults = Defaults()
    database: DatabaseConfig = DatabaseConfig()
    state: StateConfig = StateConfig()
    daemon: DaemonConfig = DaemonConfig()
    watchdog: WatchdogConfig = WatchdogConfig()
    http: HttpConfig = HttpConfig()
    log: LogConfig = LogConfig()
    slack: SlackConfig = SlackConfig()
    fence: FenceConfig = FenceConfig()
    limits: LimitsConfig = LimitsConfig()
    redact: RedactConfig = RedactConfig()
    targets: dict[str, TargetConfig] = Field(default_factory=dict)

    @field_validator("targets")
    @classmethod
    def _target_names(cls, value: dict[str, TargetConfig]) -> dict[str, TargetConfig]:
        for name in value:
            if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", name):
                raise ValueError(
                    f"target name {shorten(name, 40)} must be lower-case letters, digits, "
                    "_ or -, starting with a letter"
                )
        return value

    @model_validator(mode="after")
    def _one_default(self) -> Config:
        if self.dsn and DEFAULT_TARGET in self.targets:
            raise ValueError(
                "`dsn:` is the target named default; set it there or at the top, not both"
            )
        return self

    def resolved_targets(self) -> dict[str, Target]:
        """Every target by name; the top-level `dsn:` (or no targets at all) is `default`."""
        configured = dict(self.targets)
        if self.dsn or not configured:
            configured = {DEFAULT_TARGET: TargetConfig(dsn=self.dsn), **configured}
        out = {}
        for name, t in configured.items():
            own: dict[str, Any] = {
                k: v
                for k, v in (
                    ("connect_timeout", t.connect_timeout),
                    ("lock_timeout", t.lock_timeout),
                    ("allow_privileged_role", t.allow_privileged_role),
                )
                if v is not None
            }
            if "temp_file_limit" in t.model_fields_set:  # null is a choice: the session's own
                own["temp_file_limit"] = t.temp_file_limit
            database = self.database.model_copy(update=own)
            out[name] = Target(
                name=name,
                dsn=t.dsn,
                concurrency=t.concurrency or self.concurrency,
                database=database,
                max_replica_lag=t.max_replica_lag or self.daemon.max_replica_lag,
                statement_timeout=t.statement_timeout,
                channel=t.channel,
                owner=t.owner,
                schema_path=t.schema_path or (self.schema_path if name == DEFAULT_TARGET else None),
                allowance_field=f"targets.{name}.allow_privileged_role"
                if name in self.targets
                else "database.allow_privileged_role",
            )
        return out

    _d = field_validator("dsn")(check_dsn)
    # Fields left at their default because their ${VAR} is not set (field -> variable):
    # an error only for a command that needs them (`require`), so `lint` and `test` run in
    # a CI job that has none of the production's variables.
    _unresolved: dict[str, str] = PrivateAttr(default_factory=dict)
    _source: str = PrivateAttr(default="invmon.yaml")

    def require(self, *fields: str) -> None:
        """Fail for each field (or field under these) whose reference is not set. With none
        given (a daemon starting: it watches every target), for every reference not set
        and every target without a DSN, in one message (`require_startable`)."""
        if not fields:
            self.require_startable()
            return
        missing = [
            (field, name)
            for field, name in sorted(self._unresolved.items())
            if not fields or any(field == f or field.startswith(f + ".") for f in fields)
        ]
        if missing:
            raise ConfigError(
                "\n".join(f"{self._source}: {unset_message(f, n)}" for f, n in missing)
            )

    def require_startable(self) -> None:
        """Everything that stops a daemon from starting, all of it in one ConfigError, so
        one start names every mistake rather than one per attempt: each configured target
        without a DSN (no `dsn:` written, or its ${VAR} not set), on one line, then every
        other reference that is not set. Values are never shown, only fields and variables."""
        targets = self.resolved_targets()
        # The one default target's database may still come from --dsn or INVMON_DSN: the
        # command says so itself (require_database), in those words.
        named = (
            []
            if list(targets) == [DEFAULT_TARGET]
            else sorted(name for name, target in targets.items() if not target.dsn)
        )
        covered = {self._dsn_field(name) for name in named}
        lines = (
            ["cannot start: " + "; ".join(self.no_dsn_reason(n) for n in named)] if named else []
        )
        lines += [
            f"{self._source}: {unset_message(field, variable)}"
            for field, variable in sorted(self._unresolved.items())
            if field not in covered
        ]
        if lines:
            raise ConfigError("\n".join(lines))

    def _dsn_field(self, target: str) -> str:
        """Where a target's DSN is written in the config file."""
        return (
            "dsn"
            if target == DEFAULT_TARGET and target not in self.targets
            else f"targets.{target}.dsn"
        )

    def no_dsn_reason(self, target: str) -> str:
        """Why a target has no DSN, in the words that fix it: the field, in which file."""
        field = self._dsn_field(target)
        variable = self._unresolved.get(field)
        if variable is not None:
            return (
                f"target {target!r} has no DSN: {field} in {self._source} refers to "
                f"${{{variable}}}, which is not set (export it, or write ${{{variable}:-default}})"
            )
        if field == "dsn":
            return "no database: pass --dsn, set INVMON_DSN, or set dsn in invmon.yaml"
        return f"target {target!r} has no DSN: set {field} in {self._source}"

    def without_unresolved(self, field: str) -> Config:
        """After a command-line value replaced `field`: its reference no longer matters."""
        copy = self.model_copy()
        copy._unresolved = {k: v for k, v in self._unresolved.items() if k != field}
        return copy

    def policy(self, with_database: bool) -> FencePolicy:
        return self.fence.policy(with_database)

    def loading(self, with_database: bool) -> Loading:
        """How invariant files are read: `with_database` when a database's own catalog
        judges every query again before it runs (check, test, explain, run)."""
        ceilings = {name: t.statement_timeout for name, t in self.resolved_targets().items()}
        return Loading(self.defaults, self.policy(with_database), self.limits.file_bytes, ceilings)


# URLs that are secrets themselves: a ping URL's path is the check's key.
SECRET_URLS = frozenset({"watchdog.ping_url"})
_QUOTED = re.compile(r"'[^']*'?…?|\"[^\"]*\"?")
MAX_CONFIG_BYTES = 1 << 20
MAX_SECRET_BYTES = 64 * 1024  # a password, a token, a DSN; not /dev/zero


class _Unset:
    """A field whose ${VAR} is not set: left out, so the field keeps its default, and
    reported only by a command that needs it (Config.require)."""


UNSET = _Unset()


def interpolate(
    value: Any,
    where: str = "",
    tainted: set[str] | None = None,
    unresolved: dict[str, str] | None = None,
) -> Any:
    """Replace ${VAR}, ${VAR:-default} and ${file:PATH} in every string of a YAML tree.
    Each field that took a value from a reference is added to `tainted`: its value may be a
    secret and is never shown in a message. With `unresolved`, a field whose variable is not
    set is left out and recorded there (field -> variable) instead of failing the load."""
    tainted = set() if tainted is None else tainted
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            inner = interpolate(v, f"{where}.{k}" if where else str(k), tainted, unresolved)
            if inner is not UNSET:
                out[k] = inner
        return out
    if isinstance(value, list):
        items = [interpolate(v, f"{where}.{i}", tainted, unresolved) for i, v in enumerate(value)]
        if any(item is UNSET for item in items):
            assert unresolved is not None
            unresolved.setdefault(where, next(iter(_missing(value))))
            return UNSET
        return items
    if not isinstance(value, str):
        return value
    if unresolved is not None:
        missing = _missing(value)
        if missing:
            unresolved[where] = missing[0]
            return UNSET

    def resolve(match: re.Match[str]) -> str:
        tainted.add(where)
        reference = match.group(1).strip()
        if reference.startswith("file:"):
            return _read_secret(Path(reference[5:]).expanduser(), where)
        name, _, default = reference.partition(":-")
        if name in os.environ:
            return os.environ[name]
        if ":-" in reference:
            return default
        raise ConfigError(unset_message(where, name))

    return _REFERENCE.sub(resolve, value)


def _missing(value: Any) -> list[str]:
    """The variables a value refers to, without a default, that are not set."""
    texts = value if isinstance(value, list) else [value]
    out = []
    for text in texts:
        for match in _REFERENCE.finditer(str(text)):
            reference = match.group(1).strip()
            name = reference.partition(":-")[0]
            unset = name not in os.environ and ":-" not in reference
            if unset and not reference.startswith("file:"):
                out.append(name)
    return out


def unset_message(field: str, name: str) -> str:
    return (
        f"field {field!r}: environment variable {name} is not set; "
        f"export it or write ${{{name}:-default}}"
    )


def _read_secret(path: Path, where: str) -> str:
    shown = printable(str(path))
    try:
        if not path.is_file():
            raise ConfigError(f"field {where!r}: secret file {shown!r} is not a regular file")
        with path.open("rb") as handle:
            data = handle.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise ConfigError(
            f"field {where!r}: cannot read secret file {shown!r} ({exc.strerror})"
        ) from None
    if len(data) > MAX_SECRET_BYTES:
        raise ConfigError(
            f"field {where!r}: secret file {shown!r} is larger than {MAX_SECRET_BYTES:,} bytes"
        )
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"field {where!r}: secret file {shown!r} is not UTF-8 text") from None


def parse_config(data: Any, source: str) -> Config:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of settings at the top level")
    tainted: set[str] = set()
    unresolved: dict[str, str] = {}
    try:
        config = Config.model_validate(interpolate(data, tainted=tainted, unresolved=unresolved))
        config._unresolved = unresolved
        config._source = source
        return config
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except ValidationError as exc:
        messages = []
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"]) or "(top level)"
            if error["type"] == "extra_forbidden":
                messages.append(f"{source}: unknown field {shorten(field, 60)}; check its spelling")
                continue
            reason = str(error["msg"]).removeprefix("Value error, ")
            from_reference = any(field == t or field.startswith(t + ".") for t in tainted)
            if from_reference:
                # The reason may quote the value (a validator's "'x' is not a duration").
                reason = _QUOTED.sub("the value from its ${…} reference", reason)
            secret = (
                from_reference
                or "dsn" in field
                or "token" in field
                or "secret" in field
                or field in SECRET_URLS
            )
            value = error.get("input")
            shown = "" if secret or not _safe_to_show(value) else f" (got {shorten(value)})"
            if shown and shorten(value) in reason:
                shown = ""  # the validator's own words already quote it
            messages.append(f"{source}: field {field!r}: {reason}{shown}")
        raise ConfigError("\n".join(messages)) from None


def load_config(path: Path | None) -> Config:
    """Read `path`, or ./invmon.yaml when it exists, or use the defaults."""
    if path is None:
        if not DEFAULT_CONFIG.exists():
            return Config()
        path = DEFAULT_CONFIG
    shown = printable(str(path))
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{shown}: cannot read the config file ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{shown}: the config file is not UTF-8 text (byte {exc.start})"
        ) from None
    try:
        data = yamlsafe.load(text, MAX_CONFIG_BYTES)
    except YamlProblem as exc:
        raise ConfigError(f"{shown}:{exc.line}: {exc.message}") from None
    return parse_config(data, shown)
