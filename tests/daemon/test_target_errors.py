"""`invmon run` names every target that cannot start, in one message: one without `dsn:`
and one whose ${VAR} is not set, each with the field and the file to fix, and every other
reference not set; never a value from the config (issue 27, §3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import invmon

from monitor.config import ConfigError, parse_config

SECRETS = ("s3cret-payments", "lit3ral-jobs-secret", "t0ken-value")
CONFIG = """\
state:
  path: state.db
slack:
  token: ${INVMON_UNSET_SLACK_TOKEN}
targets:
  payments:
    dsn: host=127.0.0.1 port=1 dbname=p password=s3cret-payments
  billing: {}
  jobs:
    dsn: host=127.0.0.1 dbname=j password=lit3ral-jobs-secret user=${INVMON_UNSET_JOBS_USER}
"""


def test_invmon_run_names_every_target_that_cannot_start_in_one_message(tmp_path: Path) -> None:
    (tmp_path / "invariants").mkdir()
    config = tmp_path / "prod.yaml"
    config.write_text(CONFIG)
    ran = invmon("run", "--once", "--config", str(config), cwd=tmp_path)
    assert ran.returncode == 2  # a config that cannot start, as for every config error
    assert ran.stdout == ""
    assert ran.stderr.splitlines() == [
        f"invmon: cannot start: target 'billing' has no DSN: set targets.billing.dsn in {config}; "
        f"target 'jobs' has no DSN: targets.jobs.dsn in {config} refers to "
        "${INVMON_UNSET_JOBS_USER}, which is not set "
        "(export it, or write ${INVMON_UNSET_JOBS_USER:-default})",
        f"{config}: field 'slack.token': environment variable INVMON_UNSET_SLACK_TOKEN is not "
        "set; export it or write ${INVMON_UNSET_SLACK_TOKEN:-default}",
    ]
    assert not any(secret in ran.stderr + ran.stdout for secret in SECRETS)
    assert not (tmp_path / "state.db").exists()  # refused before anything was opened


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        # Only the ${VAR} one: it used to be the only one named, now with its target.
        (
            "  ok: {dsn: host=x}\n  jobs: {dsn: '${INVMON_UNSET_J}'}\n",
            "cannot start: target 'jobs' has no DSN: targets.jobs.dsn in app.yaml refers to "
            "${INVMON_UNSET_J}, which is not set (export it, or write ${INVMON_UNSET_J:-default})",
        ),
        # Only targets without `dsn:`: the wording a start has always had.
        (
            "  ok: {dsn: host=x}\n  a: {}\n  b: {}\n",
            "cannot start: target 'a' has no DSN: set targets.a.dsn in app.yaml; "
            "target 'b' has no DSN: set targets.b.dsn in app.yaml",
        ),
    ],
)
def test_a_daemons_requirements_name_each_target_by_its_field(
    targets: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    monkeypatch.delenv("INVMON_UNSET_J", raising=False)
    config = parse_config(yaml.safe_load("targets:\n" + targets), "app.yaml")
    config.require("slack")  # a command needing other fields is not stopped by the targets
    with pytest.raises(ConfigError) as caught:
        config.require()
    assert str(caught.value) == message
