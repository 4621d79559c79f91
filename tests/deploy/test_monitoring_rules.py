"""The alert rules and the dashboard for invmon itself: every expression parses as PromQL
(promql-parser, Prometheus' grammar) and names only metrics a running daemon serves."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import promql_parser
import pytest
import yaml
from helpers import items_table
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "invmon-rules.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "invmon-dashboard.json"
METRIC = re.compile(r"\binvmon_[a-z_]+\b")


def rules() -> list[dict[str, object]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, admin_dsn: str) -> set[str]:
    """The sample names on /metrics of a daemon that has run, beaten and delivered once."""
    from builders import build_daemon, daemon_config

    from monitor.authoring.pgtemp import scratch_database
    from monitor.store.state import StateStore

    tmp = tmp_path_factory.mktemp("served")
    with scratch_database(admin_dsn, prefix="invmon_test") as dsn:
        items_table(dsn, bad=(1,))
        (tmp / "invariants").mkdir()
        (tmp / "invariants" / "bad.sql").write_text(
            "-- description: nothing is bad\n-- key: [id]\nSELECT id FROM items WHERE bad\n"
        )
        store = StateStore.open(path=tmp / "state.db")
        daemon = build_daemon(daemon_config(tmp / "invariants"), dsn, store)
        try:
            daemon.run_once()
            daemon.scheduler.heartbeat(datetime.now(UTC))
            text = daemon.metrics.render().decode()
        finally:
            daemon.close()
            store.close()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.mark.parametrize("rule", rules(), ids=lambda r: str(r["alert"]))
def test_each_alert_rule_is_complete_parses_and_names_served_metrics(
    rule: dict[str, object], served: set[str]
) -> None:
    assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}
    assert rule["labels"] in ({"severity": "critical"}, {"severity": "warning"})
    assert isinstance(rule["annotations"], dict) and rule["annotations"]["summary"]
    expr = str(rule["expr"])
    promql_parser.parse(expr)  # raises on anything Prometheus would refuse
    assert set(METRIC.findall(expr)) - served == set()


def test_the_rules_cover_what_the_monitor_must_be_alerted_on() -> None:
    assert sorted(str(r["alert"]) for r in rules()) == [
        "InvmonAlertsCannotBeDelivered",
        "InvmonDeliveriesFailed",
        "InvmonDeliveriesUnknownGrowing",
        "InvmonFleetSmallerThanDeployed",
        "InvmonInvalidFiles",
        "InvmonInvariantNotEvaluated",
        "InvmonNoDaemonHoldsTheSchedule",
        "InvmonReplicaStale",
        "InvmonStateStoreFailing",
        "InvmonTargetUnreachable",
    ]


@pytest.mark.parametrize("expr", dashboard_exprs())
def test_each_dashboard_query_parses_and_names_served_metrics(expr: str, served: set[str]) -> None:
    promql_parser.parse(expr)
    assert set(METRIC.findall(expr)) - served == set()


def test_a_made_up_metric_or_a_broken_expression_is_caught(served: set[str]) -> None:
    """The two checks above can fail."""
    assert METRIC.findall("rate(invmon_runs_totl[5m])") == ["invmon_runs_totl"]
    assert "invmon_runs_totl" not in served
    with pytest.raises(ValueError):
        promql_parser.parse("sum(rate(invmon_deliveries[5m])")


def test_the_operators_prometheusrule_holds_exactly_the_shipped_rules() -> None:
    kube = yaml.safe_load((ROOT / "deploy/kubernetes/base/prometheusrule.yaml").read_text())
    assert kube["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
