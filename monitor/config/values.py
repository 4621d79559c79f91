"""What the config's fields are checked with: DSNs, URLs, listen addresses, durations,
the base model every section shares, and the wording of an unset variable. Pure."""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from datetime import timedelta
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from monitor.durations import parse_duration
from monitor.execution.temp_files import temp_file_kb

# How an acknowledgement may last (store/acks.py applies them; `slack.ack_modes` offers them).
AckMode = Literal["until_resolved", "until_new_rows"]


ACK_MODES: tuple[AckMode, ...] = ("until_resolved", "until_new_rows")


class ConfigError(Exception):
    """A config problem, phrased for the person who wrote the file."""


def as_duration(value: Any) -> timedelta:
    return parse_duration(value)


def as_duration_or_off(value: Any) -> timedelta:
    """A duration where 0 turns the setting off."""
    return parse_duration(value, zero=True)


def check_dsn(value: str | None) -> str | None:
    """A DSN libpq can read; the error never repeats the value, which holds a password."""
    if value is not None:
        # Here, not at the top: a command that reads a config without a DSN (lint) loads no
        # database driver.
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

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


def safe_to_show(value: Any) -> bool:
    # Values may come from ${VAR} and hold secrets: echo only short, plain ones.
    text = str(value)
    return len(text) <= 40 and not re.search(r"://|password|secret|token|xox|@", text, re.I)


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def secret() -> Any:
    """The default of a field that holds a secret (a DSN, a token, a key, a ping URL): unset,
    and left out of the model's repr, which tracebacks, logs and pytest's failure output
    (`-vv`, `-l`: a fixture's arguments and a frame's locals) print."""
    return Field(default=None, repr=False)


def checked_temp_file_limit(value: str | None) -> str | None:
    if value is not None:
        temp_file_kb(value)  # its ValueError says what to write
    return value


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


def unset_message(field: str, name: str) -> str:
    return (
        f"field {field!r}: environment variable {name} is not set; "
        f"export it or write ${{{name}:-default}}"
    )
