"""Which invmon runs, said three ways that agree: `invmon_build_info` on /metrics, with the
state store's real schema version, and the daemon's start-up log lines, as monitor.version
(what `invmon --version` prints, tests/cli/test_version.py) reports them."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from helpers import PRIVILEGED_YAML, start_daemon, wait_for
from helpers import http_get as get
from prometheus_client.parser import text_string_to_metric_families

from monitor import version as build
from monitor.daemon.metrics import Metrics
from monitor.store.state import StateStore


def build_info(metrics: str) -> list[tuple[dict[str, str], float]]:
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(metrics)
        if family.name == "invmon_build_info"
        for sample in family.samples
    ]


def schema_of(store: StateStore) -> int:
    with store.storage.transaction() as tx:
        [(newest,)] = tx.rows("SELECT max(version) FROM invmon_schema")
    return int(newest)


def test_build_info_names_the_version_the_commit_and_the_stores_schema(
    store: StateStore,
) -> None:
    rendered = Metrics(store.counts).render().decode()
    labels = {"version": build.version, "commit": build.commit}
    assert build_info(rendered) == [({**labels, "store_schema": str(schema_of(store))}, 1.0)]


def json_lines(log: Path) -> list[dict[str, Any]]:
    lines = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def logged(log: Path, message: str) -> dict[str, Any] | None:
    return next((line for line in json_lines(log) if line["msg"] == message), None)


def test_the_daemons_log_and_metrics_say_the_same_build(database: str, tmp_path: Path) -> None:
    folder = tmp_path / "invariants"
    folder.mkdir()
    state = tmp_path / "state.db"
    config = tmp_path / "invmon.yaml"
    config.write_text(
        f"invariants: {folder}\n"
        f"state:\n  path: {state}\n"
        "http:\n  listen: 127.0.0.1:0\n"
        "log:\n  format: json\n"
        f"{PRIVILEGED_YAML}"
    )
    log = tmp_path / "daemon.log"
    process = start_daemon(config, log, database)
    try:
        running = wait_for(lambda: logged(log, "invmon running"), 60, "invmon running")
        found = re.search(r"listening on (http://[\d.]+:\d+)", log.read_text())
        assert found is not None, log.read_text()
        metrics = wait_for(lambda: get(f"{found.group(1)}/metrics")[1], 20, "/metrics")
        with sqlite3.connect(f"file:{state}?mode=ro", uri=True) as db:
            [(stored,)] = db.execute("SELECT max(version) FROM invmon_schema").fetchall()
        built = {"version": build.version, "commit": build.commit, "store_schema": str(stored)}

        assert build_info(metrics) == [(built, 1.0)]
        first = json_lines(log)[0]  # before the state store is reached, or anything slow
        assert (first["msg"], first["version"], first["commit"]) == (
            "invmon starting",
            build.version,
            build.commit,
        )
        assert {k: running[k] for k in built} == built
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    assert code == 0, log.read_text()[-3000:]
