"""The whole config: its sections, the targets it resolves, and what must be set before a
command or a daemon may start."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from monitor.config.sections import (
    DaemonConfig,
    DatabaseConfig,
    FenceConfig,
    HttpConfig,
    LimitsConfig,
    LogConfig,
    RedactConfig,
    SlackConfig,
    StateConfig,
    Target,
    TargetConfig,
    WatchdogConfig,
)
from monitor.config.values import ConfigError, Model, check_dsn, secret, unset_message
from monitor.fence.allowances import FencePolicy
from monitor.invariants.header import DEFAULT_TARGET
from monitor.invariants.loader import Defaults, Loading
from monitor.text import shorten


class Config(Model):
    # The monitored database (a read replica), for the target named `default`; `--dsn` and
    # `INVMON_DSN` win over it.
    dsn: str | None = secret()
    # The folder of invariant files (`.sql`, subfolders allowed).
    invariants: Path = Path("invariants")
    # The production schema (e.g. `pg_dump --schema-only`), for `invmon test` and
    # `invmon lint --schema`.
    schema_path: Path | None = Field(default=None, alias="schema")
    max_cost: float | None = Field(default=None, gt=0)  # `invmon explain` budget per query
    # Invariants evaluated at once per target, each on its own pooled connection.
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

    def default_dsn(self) -> str | None:
        """The target named default's database: the top-level `dsn:` (or --dsn, INVMON_DSN),
        or `targets.default.dsn`, which names the same target."""
        if self.dsn:
            return self.dsn
        default = self.targets.get(DEFAULT_TARGET)
        return default.dsn if default is not None else None

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
    _file: Path | None = PrivateAttr(default=None)  # the file read, if one was

    @property
    def file(self) -> Path | None:
        """The config file this came from (its relative paths are read from its folder),
        or None for the defaults."""
        return self._file

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
