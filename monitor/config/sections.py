"""The config's sections, one model each: database, state, daemon, watchdog, http, log,
slack (and its routes), fence, redact, targets, limits."""

from __future__ import annotations

import re
import secrets
import urllib.parse
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from monitor.config.values import (
    ACK_MODES,
    MIN_PAGE_TOKEN,
    AckMode,
    Model,
    as_duration,
    as_duration_or_off,
    check_dsn,
    check_url,
    checked_temp_file_limit,
    is_loopback,
    parse_listen,
    secret,
)
from monitor.execution.offending import DEFAULT_ROW_LIMITS, MIN_CELL, RowLimits
from monitor.execution.redaction import DEFAULT_COLUMNS, DETECTORS, Detector, Redaction
from monitor.execution.temp_files import DEFAULT_TEMP_FILE_LIMIT
from monitor.fence.allowances import Allowances, FencePolicy
from monitor.invariants.header import Severity
from monitor.invariants.loader import MAX_FILE_BYTES


class DatabaseConfig(Model):
    """How invmon uses a monitored database; the top-level `database:` is every target's,
    a target's own `lock_timeout`, `temp_file_limit`… win over it."""

    # How long reaching a database (monitored or state store) may take before it is an error.
    connect_timeout: timedelta = timedelta(seconds=10)
    # A query waiting this long on a lock gives up instead of queueing behind it (at most
    # nine tenths of its timeout, so that a wait for a lock is said to be one).
    lock_timeout: timedelta = timedelta(seconds=5)
    # A standby cancels queries that conflict with replay; such a run is retried.
    recovery_conflict_retries: int = Field(default=3, ge=0, le=10)
    # The first wait before retrying a recovery conflict; it doubles each time.
    retry_backoff: timedelta = timedelta(seconds=1)
    # What one run may write to temporary files, in PostgreSQL's units. Only a superuser
    # may set it, so it is set for a superuser's runs (never above a lower limit the session
    # already has); a role is bounded by its own (deploy/readonly-role.sql). null: the
    # session's own setting, whatever it is.
    temp_file_limit: str | None = DEFAULT_TEMP_FILE_LIMIT
    # Run even as a role that can change the database (a superuser, an owner of its
    # objects, …; monitor/fence/role_check.py), which is refused otherwise. A deliberate exception.
    allow_privileged_role: bool = False
    # Read an invariant's keys first where the planner expects that no costlier: its other
    # columns computed for the sample's rows only (docs/how-it-works.md, "Keys first").
    # false: every invariant is read whole, in one reading.
    keys_first: bool = True

    _t = field_validator("connect_timeout", "lock_timeout", "retry_backoff", mode="before")(
        as_duration
    )
    _s = field_validator("temp_file_limit")(checked_temp_file_limit)


class StateConfig(Model):
    """Where the daemon keeps runs, incidents and events: never the monitored database."""

    path: Path = Path("invmon-state.db")  # SQLite file, used unless dsn is set
    dsn: str | None = secret()  # PostgreSQL, for a shared store (several daemons, HA)
    # Runs older than this are pruned (each invariant's last is kept), and finished alert
    # deliveries of incidents closed before it (every open incident's thread is kept).
    retention: timedelta = timedelta(days=30)

    _t = field_validator("retention", mode="before")(as_duration)
    _d = field_validator("dsn")(check_dsn)


class DaemonConfig(Model):
    # A replica further behind than this is stale: its invariants are not evaluated.
    max_replica_lag: timedelta = timedelta(minutes=5)
    cannot_evaluate_after: int = Field(default=3, ge=1)  # consecutive errors
    jitter: timedelta = timedelta(seconds=10)  # capped at a tenth of an interval; 0s: off
    # How long a stop waits for runs in flight; the whole stop takes at most this plus 10s.
    shutdown_grace: timedelta = timedelta(seconds=30)
    # A query that holds its connection this long past its timeout is quarantined, and its
    # connection closed.
    overrun_margin: timedelta = timedelta(seconds=10)
    track_keys: int = Field(default=1000, ge=0, le=100_000)  # offending keys kept per run
    # Several daemons on one PostgreSQL store (claims.py, fleet.py): a claimed slot whose
    # daemon stops renewing it for `lease` is taken over; a daemon not preferred for a slot
    # waits `handoff` before claiming it.
    lease: timedelta = timedelta(seconds=30)
    # Several daemons: one not preferred for a slot waits this long before claiming it.
    handoff: timedelta = timedelta(seconds=5)

    _t = field_validator(
        "max_replica_lag",
        "shutdown_grace",
        "lease",
        "handoff",
        "overrun_margin",
        mode="before",
    )(as_duration)

    _j = field_validator("jitter", mode="before")(as_duration_or_off)

    @field_validator("lease")
    @classmethod
    def _lease_long_enough(cls, value: timedelta) -> timedelta:
        if value < timedelta(seconds=3):
            raise ValueError("must be at least 3s: it is renewed every third of it")
        return value


class WatchdogConfig(Model):
    """invmon watching itself (monitor/daemon/watchdog.py)."""

    interval: timedelta = timedelta(minutes=1)  # how often the self-checks run
    slo: timedelta = timedelta(minutes=10)  # an alert still undelivered after this is one
    ping_url: str | None = secret()  # dead man's switch (healthchecks.io style); ${…} it

    _t = field_validator("interval", "slo", mode="before")(as_duration)

    @field_validator("ping_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("ping_url")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value, "https://hc-ping.com/<uuid>")


class HttpConfig(Model):
    listen: str | None = "127.0.0.1:9187"  # /healthz, /readyz, /metrics; null disables
    # The status page (/) asks for this as a bearer token or a basic-auth password; without
    # it the page is served only on a loopback listener. Use ${INVMON_PAGE_TOKEN}.
    page_token: str | None = secret()
    page_refresh: timedelta = timedelta(seconds=30)  # the page reloads its tables this often

    _t = field_validator("page_refresh", mode="before")(as_duration)

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


class LogConfig(Model):
    # Log lines on stderr as text, or as one JSON object a line.
    format: Literal["text", "json"] = "text"
    # The least severe log level written, in any case (`info` is INFO).
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class RoutesConfig(Model):
    severity: dict[Severity, str] = Field(default_factory=dict)  # severity -> channel
    owner: dict[str, str] = Field(default_factory=dict)  # owner (as in headers) -> channel


class SlackConfig(Model):
    """Alert delivery. Without a token, alerts are written to stdout and the log."""

    token: str | None = secret()  # bot token (xoxb-…); use ${SLACK_BOT_TOKEN}
    api_url: str = "https://slack.com/api/"  # point at a proxy or a test server
    channel: str = "#invariants"  # default channel
    routes: RoutesConfig = RoutesConfig()
    repeat_interval: timedelta = timedelta(hours=4)  # reminders while open and unacked
    # Rows at most in an incident's CSV attachment; its title says how many were left out.
    csv_max_rows: int = Field(default=1000, ge=1, le=100_000)
    csv_max_bytes: int = Field(default=4 << 20, ge=1024, le=1 << 30)  # the file stops here
    # "HH:MM" (UTC): each channel with incidents gets a summary of what is open,
    # acknowledged, snoozed, and what resolved in the last day. Unset: none.
    daily_summary: str | None = None
    digest_threshold: int = Field(default=5, ge=2)  # this many openings at once: one digest
    # A burst of openings in one channel is held until the channel has been quiet this long
    # (six times this at most); a lone opening, with nothing else of its channel running,
    # is planned as soon as its run is stored.
    digest_window: timedelta = timedelta(seconds=2)
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
    # How long a worker holds a delivery it claimed; renewed while its calls run.
    lease: timedelta = timedelta(seconds=60)
    max_backoff: timedelta = timedelta(minutes=5)  # longest wait between retries
    # Buttons (acknowledge, snooze): clicks arrive over Socket Mode when app_token is set,
    # else on the daemon's listener at /slack/actions, verified with signing_secret.
    app_token: str | None = secret()  # xapp-…; use ${SLACK_APP_TOKEN}
    signing_secret: str | None = secret()  # use ${SLACK_SIGNING_SECRET}
    # The acknowledgement meanings offered as buttons: until_resolved, until_new_rows.
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
    )(as_duration)


class FenceConfig(Model):
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
    # also allows pg_settings and the settings of every role and function (rolconfig,
    # proconfig).
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


class RedactConfig(Model):
    """Personal data in offending rows (execution/redaction.py): masked on every path out."""

    # Column-name patterns, matched against each word of a name and each run of its words
    # joined by `_` (`customer_email`, `first_name`). Setting it replaces the defaults;
    # `add_columns` adds to them (`add_columns: [name]`) without repeating them.
    columns: list[str] = Field(default_factory=lambda: list(DEFAULT_COLUMNS))
    # Column-name patterns masked on top of the defaults, e.g. [name].
    add_columns: list[str] = Field(default_factory=list)
    # Values detected and masked in any column: email, card, iban.
    values: list[Detector] = Field(default_factory=lambda: list(DETECTORS))
    # The key of the masking hash; use ${file:…} or ${VAR}. Unset: the daemon keeps a random
    # one in its state store (so masks are stable across restarts), `check` makes one a run.
    key: str | None = secret()

    @field_validator("key", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    def redaction(self, stored_key: bytes | None = None) -> Redaction:
        key = self.key.encode() if self.key else stored_key or secrets.token_bytes(32)
        return Redaction(key, (*self.columns, *self.add_columns), tuple(self.values))


class TargetConfig(Model):
    """One monitored database (config `targets:`); unset fields take the top-level ones."""

    dsn: str | None = secret()  # this database (a read replica); required for `invmon run`
    concurrency: int | None = Field(default=None, ge=1, le=64)  # else the top-level one
    max_replica_lag: timedelta | None = None  # else daemon.max_replica_lag
    connect_timeout: timedelta | None = None  # else database.connect_timeout
    lock_timeout: timedelta | None = None  # else database.lock_timeout
    statement_timeout: timedelta | None = None  # the ceiling for its invariants' timeouts
    channel: str | None = None  # its incidents' default channel (a file's own wins)
    owner: str | None = None  # its invariants' default owner
    schema_path: Path | None = Field(default=None, alias="schema")  # for lint and test
    # `database.temp_file_limit` for this target. Left out, the database section's
    # applies; written as null, the session's own setting.
    temp_file_limit: str | None = None
    # `database.allow_privileged_role` for this target: the role it connects as may be one
    # that can change the database (see DatabaseConfig).
    allow_privileged_role: bool | None = None

    _t = field_validator(
        "max_replica_lag", "connect_timeout", "lock_timeout", "statement_timeout", mode="before"
    )(as_duration)
    _d = field_validator("dsn")(check_dsn)
    _s = field_validator("temp_file_limit")(checked_temp_file_limit)


@dataclass(frozen=True)
class Target:
    """A target with every setting resolved (its own, else the top-level one)."""

    name: str
    dsn: str | None = field(repr=False)  # a secret: never in a repr
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


class LimitsConfig(Model):
    """Bounds on what invmon reads; each refusal says which limit it met."""

    # A larger invariant or fixture file is refused before it is parsed.
    file_bytes: int = Field(default=MAX_FILE_BYTES, ge=1024, le=16 << 20)
    # What one run brings back and keeps (offending.py): a longer value is cut by the
    # database; rows past sample_bytes are counted, not kept; keys past keys_bytes are not
    # tracked (so none is claimed gone).
    cell_bytes: int = Field(default=DEFAULT_ROW_LIMITS.cell_bytes, ge=MIN_CELL, le=1 << 20)
    # One row's values at most: with many columns each is cut shorter.
    row_bytes: int = Field(default=DEFAULT_ROW_LIMITS.row_bytes, ge=1024, le=16 << 20)
    # Whole rows kept per run; rows past it are counted, not kept.
    sample_bytes: int = Field(default=DEFAULT_ROW_LIMITS.sample_bytes, ge=1024, le=256 << 20)
    # Offending keys tracked per run; past it no key is claimed gone.
    keys_bytes: int = Field(default=DEFAULT_ROW_LIMITS.keys_bytes, ge=1024, le=256 << 20)

    def rows(self) -> RowLimits:
        return RowLimits(self.cell_bytes, self.row_bytes, self.sample_bytes, self.keys_bytes)
