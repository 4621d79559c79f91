"""The config file: defaults, environment interpolation, and errors that name the field."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from helpers import CHECK, cli

from monitor.config import ConfigError, LimitsConfig, load_config, parse_config


def test_no_config_file_means_every_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(None)
    assert config.dsn is None
    assert config.concurrency == 4
    assert config.defaults.schedule == "every 15m"
    assert config.defaults.timeout == timedelta(seconds=30)
    assert config.defaults.sample == 20


def test_env_references_are_resolved_and_files_can_hold_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("REPLICA_HOST", "replica.internal")
    config = parse_config(
        {
            "dsn": f"host=${{REPLICA_HOST}} password=${{file:{secret}}} port=${{PORT:-5433}}",
            "defaults": {"timeout": "45s"},
        },
        "invmon.yaml",
    )
    assert config.dsn == "host=replica.internal password=s3cret port=5433"
    assert config.defaults.timeout == timedelta(seconds=45)


def test_an_unset_variable_names_the_field_and_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NOPE_DSN", raising=False)
    config = parse_config({"dsn": "${NOPE_DSN}"}, "invmon.yaml")
    assert config.dsn is None  # loaded: only a command that needs the DSN stops
    with pytest.raises(ConfigError) as caught:
        config.require("dsn")
    assert str(caught.value) == (
        "invmon.yaml: field 'dsn': environment variable NOPE_DSN is not set; "
        "export it or write ${NOPE_DSN:-default}"
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"concurency": 4}, "invmon.yaml: unknown field 'concurency'; did you mean 'concurrency'?"),
        ({"concurrency": 0}, "invmon.yaml: field 'concurrency': Input should be greater than"),
        ({"defaults": {"timeout": "soon"}}, "invmon.yaml: field 'defaults.timeout': 'soon' is"),
        ({"defaults": {"schedule": "often"}}, "invmon.yaml: field 'defaults.schedule': 'often'"),
        (["a"], "invmon.yaml: expected a mapping"),
    ],
)
def test_a_bad_config_gets_one_message_naming_the_field(data: object, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, "invmon.yaml")
    assert str(caught.value).startswith(message)


def test_a_misspelt_key_gets_the_closest_key_of_its_own_section() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(
            {
                "shema": "db/schema.sql",
                "daemon": {"jiter": "1s"},
                "targets": {"payments": {"statment_timeout": "5m", "shema": "x.sql"}},
                "slack": {"routes": {"severty": {"critical": "#incidents"}}},
                "nothing_like_it": 1,
            },
            "invmon.yaml",
        )
    assert str(caught.value).splitlines() == [
        "invmon.yaml: unknown field 'daemon.jiter'; did you mean 'jitter'?",
        "invmon.yaml: unknown field 'slack.routes.severty'; did you mean 'severity'?",
        "invmon.yaml: unknown field 'targets.payments.statment_timeout'; did you mean "
        "'statement_timeout'?",
        "invmon.yaml: unknown field 'targets.payments.shema'; did you mean 'schema'?",
        "invmon.yaml: unknown field 'shema'; did you mean 'schema'?",
        "invmon.yaml: unknown field 'nothing_like_it'; check its spelling",
    ]


def test_invalid_yaml_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "invmon.yaml"
    path.write_text("concurrency: 2\ndefaults: [\n")
    with pytest.raises(ConfigError, match=rf"^{path}:3: not valid YAML"):
        load_config(path)


def test_the_shipped_example_config_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INVMON_DSN", "host=replica dbname=app")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    monkeypatch.delenv("SLACK_APP_TOKEN", raising=False)
    monkeypatch.delenv("SLACK_SIGNING_SECRET", raising=False)
    root = Path(__file__).resolve().parents[2]
    config = load_config(root / "deploy" / "invmon.example.yaml")
    assert config.dsn == "host=replica dbname=app"
    assert (config.slack.token, config.slack.app_token, config.slack.interactive) == (
        "xoxb-1",
        None,
        False,
    )
    assert config.slack.routes.severity == {"critical": "#incidents"}
    assert config.limits == LimitsConfig()  # the example shows the defaults
    assert (config.slack.csv_max_rows, config.slack.csv_max_bytes) == (1000, 4 << 20)


def test_an_unset_reference_stops_only_the_commands_that_need_it(
    tmp_path: Path, database: str
) -> None:
    (tmp_path / "invmon.yaml").write_text(
        "dsn: ${INVMON_REPLICA_DSN}\nslack:\n  token: ${SLACK_BOT_TOKEN}\n"
        "state:\n  dsn: ${INVMON_STATE_DSN}\n"
    )
    (tmp_path / "invariants").mkdir()
    (tmp_path / "invariants" / "ok.sql").write_text(
        "-- description: x\nSELECT 1 AS a WHERE false\n"
    )
    env: dict[str, str] = {}  # cli() clears INVMON_*; SLACK_BOT_TOKEN is unset in tests
    assert cli("lint", cwd=tmp_path).returncode == 0
    assert cli("test", cwd=tmp_path, env={"INVMON_TEST_DSN": database}).returncode == 0
    checked = cli(*CHECK, "--dsn", database, cwd=tmp_path, env=env)
    assert checked.returncode == 0, checked.stderr
    needs_dsn = cli(*CHECK, cwd=tmp_path)
    assert needs_dsn.returncode == 2
    assert needs_dsn.stderr.strip() == (
        "invmon: invmon.yaml: field 'dsn': environment variable INVMON_REPLICA_DSN is not set; "
        "export it or write ${INVMON_REPLICA_DSN:-default}"
    )
    status = cli("status", cwd=tmp_path)
    assert status.returncode == 2 and "field 'state.dsn'" in status.stderr
    daemon = cli("run", "--dsn", database, cwd=tmp_path)
    assert daemon.returncode == 2
    assert "field 'slack.token'" in daemon.stderr and "field 'state.dsn'" in daemon.stderr
