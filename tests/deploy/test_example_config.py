"""deploy/invmon.example.yaml and the manual's config agree with the program: the example
loads through the real config loader, as it is and with every commented example in it
uncommented; every key the Configuration block (docs/configuring.md) shows is one the config models
have; and the two say the same `state.path`, the one the systemd unit lets invmon write,
whose user the Deployment steps (docs/deploying.md) create."""

from __future__ import annotations

import re
import typing
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from monitor.config import Config
from monitor.config.loading import load_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "invmon.example.yaml"
CONFIGURING = ROOT / "docs" / "configuring.md"
DEPLOYING = ROOT / "docs" / "deploying.md"
UNIT = ROOT / "deploy" / "systemd" / "invmon.service"
# Every ${VAR} the example refers to, set (a reference to an unset one would only be
# recorded, and the test would prove less).
VARIABLES = {
    "INVMON_DSN": "host=replica dbname=app",
    "PAYMENTS_REPLICA_DSN": "host=payments-replica dbname=payments",
    "BILLING_REPLICA_DSN": "host=billing-replica dbname=billing",
    "INVMON_STATE_DSN": "host=state dbname=invmon",
    "SLACK_BOT_TOKEN": "xoxb-1",
    "SLACK_APP_TOKEN": "",
    "SLACK_SIGNING_SECRET": "",
    "INVMON_PAGE_TOKEN": "",
    "INVMON_REDACT_KEY": "",
    "INVMON_PING_URL": "",
}
# `# key: value` at any depth: a commented example (prose comments start otherwise).
COMMENTED_KEY = re.compile(r"^(?P<indent> *)# (?P<line> *[a-z_]+:(?: .*)?)$")


@pytest.fixture(autouse=True)
def variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in VARIABLES.items():
        monkeypatch.setenv(name, value)


def referenced(text: str) -> set[str]:
    """The variables the values refer to (a comment's `${VAR}` is prose)."""
    values = [line.split(" #")[0] for line in text.splitlines() if not line.strip().startswith("#")]
    return set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", "\n".join(values)))


def uncommented(text: str) -> tuple[str, list[str]]:
    """The text with every commented example uncommented, and those lines."""
    out, lines = [], []
    for line in text.splitlines():
        match = COMMENTED_KEY.match(line)
        if match:
            line = match["indent"] + match["line"]
            lines.append(line.strip())
        out.append(line)
    return "\n".join(out) + "\n", lines


def loaded(text: str, tmp_path: Path) -> Config:
    path = tmp_path / "invmon.yaml"
    path.write_text(text)
    config = load_config(path)
    config.require_startable()  # every reference set, every target with a DSN
    return config


def test_the_example_refers_only_to_variables_the_test_sets() -> None:
    text, _examples = uncommented(EXAMPLE.read_text())
    assert referenced(text) == set(VARIABLES)


def test_the_example_loads_as_it_is(tmp_path: Path) -> None:
    config = loaded(EXAMPLE.read_text(), tmp_path)
    assert config.targets == {}
    assert list(config.resolved_targets()) == ["default"]
    assert config.state.path == Path("/var/lib/invmon/state.db")
    assert (config.state.dsn, config.slack.api_url) == (None, "https://slack.com/api/")


def test_the_example_loads_with_only_its_dsn_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the replica's DSN is required: a host that sets no Slack token gets its alerts
    in the log, as the file says, and not a start that fails (a restart loop under the
    unit's Restart=always)."""
    for name in VARIABLES:
        if name != "INVMON_DSN":
            monkeypatch.delenv(name)
    config = loaded(EXAMPLE.read_text(), tmp_path)
    assert (config.dsn, config.slack.token) == ("host=replica dbname=app", None)


def test_every_commented_example_in_it_loads_uncommented(tmp_path: Path) -> None:
    text, examples = uncommented(EXAMPLE.read_text())
    assert [line.split(":")[0] for line in examples] == [
        "targets",
        "payments",
        *("dsn", "concurrency", "max_replica_lag", "connect_timeout", "lock_timeout"),
        *("statement_timeout", "channel", "owner"),
        "billing",
        "dsn",
        "dsn",  # state.dsn
        "api_url",
        "add_columns",
    ]
    config = loaded(text, tmp_path)
    targets = config.resolved_targets()
    assert list(targets) == ["default", "payments", "billing"]
    payments = targets["payments"]
    assert (payments.dsn, payments.statement_timeout, payments.channel, payments.owner) == (
        VARIABLES["PAYMENTS_REPLICA_DSN"],
        timedelta(minutes=5),
        "#payments-alerts",
        "@payments-oncall",
    )
    assert targets["billing"].dsn == VARIABLES["BILLING_REPLICA_DSN"]
    assert targets["billing"].concurrency == config.concurrency  # unset: the top level's
    assert config.slack.api_url == "https://slack.com/api/"
    assert config.state.dsn == VARIABLES["INVMON_STATE_DSN"]
    assert config.redact.add_columns == ["name"]


def readme_config_block() -> str:
    section = CONFIGURING.read_text().split("\n## The config file\n", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```yaml\n(.*?)```", section, re.S)
    return str(block)


def model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds, and whether as the values of a mapping (`targets:`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if typing.get_origin(annotation) is dict:
        _key, value = typing.get_args(annotation)
        if isinstance(value, type) and issubclass(value, BaseModel):
            return value, True
    return None, False


def unknown_keys(data: dict[str, Any], model: type[BaseModel], where: str = "") -> list[str]:
    fields = {(info.alias or name): info for name, info in model.model_fields.items()}
    unknown = []
    for key, value in data.items():
        path = f"{where}{key}"
        if key not in fields:
            unknown.append(path)
            continue
        inner, mapping = model_of(fields[key].annotation)
        if inner is None or not isinstance(value, dict):
            continue
        items = value.items() if mapping else [("", value)]
        for name, each in items:
            if isinstance(each, dict):
                prefix = f"{path}.{name}." if mapping else f"{path}."
                unknown += unknown_keys(each, inner, prefix)
    return unknown


def test_every_key_the_readmes_configuration_block_shows_is_in_the_config_models(
    tmp_path: Path,
) -> None:
    block = readme_config_block()
    data = yaml.safe_load(block)
    assert {"state", "daemon", "http", "redact", "limits"} <= set(data)
    assert unknown_keys(data, Config) == []
    # And each of its values is one the real loader takes.
    for name in referenced(block):
        assert name in VARIABLES or name == "INVMON_REPLICA_DSN", name
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("INVMON_REPLICA_DSN", "host=replica dbname=app")
        loaded(block, tmp_path)


def test_a_key_the_models_lack_would_be_found() -> None:
    data = {"state": {"path": "x", "pth": "y"}, "targets": {"a": {"dsn": "x", "dns": "y"}}}
    assert unknown_keys(data, Config) == ["state.pth", "targets.a.dns"]


def test_the_readme_and_the_example_keep_state_where_the_unit_may_write() -> None:
    example = yaml.safe_load(EXAMPLE.read_text())
    readme = yaml.safe_load(readme_config_block())
    assert readme["state"]["path"] == example["state"]["path"] == "/var/lib/invmon/state.db"
    unit = UNIT.read_text()
    assert "ReadWritePaths=/var/lib/invmon\n" in unit


def test_the_manuals_deployment_steps_create_the_user_the_unit_runs_as() -> None:
    unit = UNIT.read_text()
    [useradd] = re.findall(r"^# Create the user first: (useradd .*)$", unit, re.M)
    assert useradd.endswith(" invmon") and "User=invmon\n" in unit
    deployment = DEPLOYING.read_text().split("\n## On a host, with systemd\n", 1)[1]
    deployment = deployment.split("\n## ", 1)[0]
    assert f"   {useradd}\n" in deployment
