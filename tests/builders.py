"""The builders the tests share, each written once: a config file written from parts, a
Daemon from a config, a store, a clock and the fake Slack, and a signed Slack request.
Polling, the test's clock, SQL and the command line are in helpers.py."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.parse
from datetime import timedelta
from pathlib import Path

import yaml
from fake_slack import TOKEN, FakeSlack
from helpers import PRIVILEGED
from pydantic import BaseModel

from alerts.slack import SlackTransport
from alerts.transport import Transport
from monitor.clock import Clock, utc_now
from monitor.config import Config, HttpConfig, SlackConfig
from monitor.daemon.assembly import assemble
from monitor.daemon.daemon import Daemon
from monitor.store.state import StateStore

# --- config files -----------------------------------------------------------------------------


def config_file(home: Path, **sections: object) -> Path:
    """`home/invmon.yaml` holding these top-level sections. A value is written as YAML: a
    Path as its text, a config model (PRIVILEGED) as the fields set in it."""
    path = home / "invmon.yaml"
    path.write_text(yaml.safe_dump(_plain(sections), sort_keys=False))
    return path


def process_config(home: Path, folder: Path, **sections: object) -> Path:
    """`home/invmon.yaml` for a daemon process: `folder`'s invariants, its state in
    `home/state.db`, the suite's superuser allowed; a section of `sections` is added, or
    replaces one of these whole."""
    parts: dict[str, object] = {
        "invariants": folder,
        "state": {"path": home / "state.db"},
        "database": PRIVILEGED,
    }
    return config_file(home, **{**parts, **sections})


def slack_to(fake: FakeSlack, **settings: object) -> dict[str, object]:
    """The `slack:` section that delivers to `fake`: its token and address, the channel
    #invariants, then `settings`; for a config file or a Config alike."""
    return {"token": TOKEN, "api_url": fake.api_url, "channel": "#invariants", **settings}


def quick_slack(fake: FakeSlack, **settings: object) -> SlackConfig:
    """The slack section of a daemon a test drives by its clock, delivering to `fake`: a
    settle of 2 s and 0.3 s a call, then `settings`."""
    quick = {"settle": timedelta(seconds=2), "timeout": timedelta(seconds=0.3)}
    return SlackConfig.model_validate({**slack_to(fake), **quick, **settings})


def _plain(value: object) -> object:
    if isinstance(value, BaseModel):
        return _plain(value.model_dump(exclude_unset=True))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, str | int | float):
        return value
    raise TypeError(f"not written to a config file: {value!r}")


# --- daemons ----------------------------------------------------------------------------------


def daemon_config(folder: Path, **sections: object) -> Config:
    """The config of a daemon built in the test's process: `folder`'s invariants, no
    listener, the suite's superuser allowed; a section of `sections` (a model, or what the
    file would hold) is added, or replaces one of these whole."""
    parts: dict[str, object] = {
        "invariants": folder,
        "http": HttpConfig(listen=None),
        "database": PRIVILEGED,
    }
    return Config.model_validate({**parts, **sections})


def build_daemon(
    config: Config,
    dsn: str | None,
    store: StateStore,
    clock: Clock = utc_now,
    call_timeout: float | None = None,
    transport: Transport | None = None,
) -> Daemon:
    """`assemble` of these. `call_timeout`: alerts go out through a SlackTransport to
    the config's slack.api_url with its token, each call bounded to that many seconds
    (whatever slack.timeout says); `transport`: through that one. Neither: the daemon's own,
    from the config."""
    if transport is None and call_timeout is not None:
        slack = config.slack
        transport = SlackTransport(slack.token or "", slack.api_url, timeout=call_timeout)
    return assemble(config, dsn, store, clock=clock, transport=transport)


# --- signed Slack requests --------------------------------------------------------------------


def slack_signature(body: bytes, secret: str, timestamp: str) -> dict[str, str]:
    """The headers Slack signs `body` with (v0, HMAC-SHA256 of `v0:timestamp:body`)."""
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256)
    return {"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": f"v0={digest.hexdigest()}"}


def signed_click(
    payload: dict[str, object], secret: str, age: int = 0
) -> tuple[bytes, dict[str, str]]:
    """A button click as Slack posts it to /slack/actions: the form-encoded `payload`, signed
    with `secret` `age` seconds ago."""
    body = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
    headers = slack_signature(body, secret, str(int(time.time()) - age))
    return body, {**headers, "Content-Type": "application/x-www-form-urlencoded"}
