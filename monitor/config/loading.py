"""Reading the config file: bounded in size, `${ENV_VAR}`, `${ENV_VAR:-default}` and
`${file:/run/secrets/name}` resolved at load time, secrets never shown in an error."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import (
    BaseModel,
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
    base: Path = Path(),
) -> Any:
    """Replace ${VAR}, ${VAR:-default} and ${file:PATH} in every string of a YAML tree.
    Each field that took a value from a reference is added to `tainted`: its value may be a
    secret and is never shown in a message. With `unresolved`, a field whose variable is not
    set is left out and recorded there (field -> variable) instead of failing the load.
    A relative `${file:PATH}` is read from `base`, the config file's folder."""
    tainted = set() if tainted is None else tainted
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            inner = interpolate(v, f"{where}.{k}" if where else str(k), tainted, unresolved, base)
            if inner is not UNSET:
                out[k] = inner
        return out
    if isinstance(value, list):
        items = [
            interpolate(v, f"{where}.{i}", tainted, unresolved, base) for i, v in enumerate(value)
        ]
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
            return _read_secret(base / Path(reference[5:]).expanduser(), where)
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


def parse_config(data: Any, source: str, base: Path = Path()) -> Config:
    """A config from its YAML tree; `base`: the folder its relative paths are read from."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of settings at the top level")
    tainted: set[str] = set()
    unresolved: dict[str, str] = {}
    try:
        tree = interpolate(data, tainted=tainted, unresolved=unresolved, base=base)
        config = rebased(Config.model_validate(tree), base)
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
                messages.append(f"{source}: unknown field {shorten(field, 60)}; {_guess(error)}")
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


def _guess(error: Any) -> str:
    """For a misspelt key: the closest field of the section it is in, as written in YAML."""
    *parent, key = error["loc"]
    close = difflib.get_close_matches(str(key), sorted(_fields_at(parent)), n=1)
    return f"did you mean {close[0]!r}?" if close else "check its spelling"


def _fields_at(loc: Sequence[str | int]) -> set[str]:
    """The keys the config's model takes at `loc` (a validation error's path, through
    sections, `targets.NAME` and list items); empty when it cannot be told."""
    annotation: Any = Config
    for part in loc:
        annotation = _without_none(annotation)
        model = _model(annotation)
        if model is not None:
            fields = _fields(model)
            if str(part) not in fields:
                return set()
            annotation = fields[str(part)]
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]  # part is a key: a target's name, …
        elif get_origin(annotation) is list:
            annotation = get_args(annotation)[0]  # part is an item's index
        else:
            return set()
    model = _model(_without_none(annotation))
    return set(_fields(model)) if model is not None else set()


def _without_none(annotation: Any) -> Any:
    """X for `X | None`; anything else as it is."""
    if get_origin(annotation) in (Union, UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    """Each field's key as written in YAML (its alias: `schema`) and its type."""
    return {f.alias or name: f.annotation for name, f in model.model_fields.items()}


def rebased(config: Config, base: Path) -> Config:
    """Every relative path of a config read from `base`, as docker compose and systemd read
    theirs: `invmon run --config /srv/shop/invmon.yaml` finds /srv/shop/invariants from any
    working directory. Absolute paths are kept; flags (`--invariants`) stay relative to the
    working directory, as a shell user expects."""
    if base == Path():
        return config

    def of(path: Path) -> Path:
        return path if path.is_absolute() else base / path

    def schema(path: Path | None) -> Path | None:
        return None if path is None else of(path)

    targets = {
        name: t.model_copy(update={"schema_path": schema(t.schema_path)})
        for name, t in config.targets.items()
    }
    return config.model_copy(
        update={
            "invariants": of(config.invariants),
            "schema_path": schema(config.schema_path),
            "state": config.state.model_copy(update={"path": of(config.state.path)}),
            "targets": targets,
        }
    )


def load_config(path: Path | None) -> Config:
    """Read `path`, or ./invmon.yaml when it exists, or use the defaults. Its relative paths
    are read from its folder (`rebased`)."""
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
    config = parse_config(data, shown, path.parent)
    config._file = path
    return config
