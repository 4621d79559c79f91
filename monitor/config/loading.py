"""Reading the config file: bounded in size, `${ENV_VAR}`, `${ENV_VAR:-default}` and
`${file:/run/secrets/name}` resolved at load time, secrets never shown in an error."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import (
    ValidationError,
)

from monitor import yamlsafe
from monitor.config.model import Config
from monitor.config.values import ConfigError, safe_to_show, unset_message
from monitor.text import printable, shorten
from monitor.yamlsafe import YamlProblem

DEFAULT_CONFIG = Path("invmon.yaml")


_REFERENCE = re.compile(r"\$\{([^}]+)\}")


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
            shown = "" if secret or not safe_to_show(value) else f" (got {shorten(value)})"
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
