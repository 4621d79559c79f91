"""`invmon test --watch` runs everything once, then only what each save touched."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from helpers import wait_for

from monitor.authoring.watching import affected, changed

CASES = "cases:\n  - name: {name}\n    expect: {{count: {count}}}\n"


def test_a_change_touches_its_invariant_and_the_schema_touches_all(tmp_path: Path) -> None:
    folder = tmp_path / "invariants"
    schema = tmp_path / "schema.sql"
    before = {folder / "a.sql": (1, 1), folder / "b.test.yaml": (1, 1), schema: (1, 1)}
    after = {**before, folder / "b.test.yaml": (2, 1), folder / "c.sql": (1, 1)}
    assert changed(before, after) == {folder / "b.test.yaml", folder / "c.sql"}
    assert affected(changed(before, after), folder, schema) == {"b", "c"}
    assert affected([schema], folder, schema) is None


def test_watch_reruns_only_the_invariant_whose_cases_changed(tmp_path: Path, database: str) -> None:
    folder = tmp_path / "invariants"
    folder.mkdir()
    for name in ("one", "two"):
        (folder / f"{name}.sql").write_text("-- description: x\nSELECT 1 AS a WHERE false\n")
        (folder / f"{name}.test.yaml").write_text(CASES.format(name=f"{name} holds", count=0))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("INVMON_")},
        "INVMON_TEST_DSN": database,
        "PYTHONUNBUFFERED": "1",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "monitor.cli", "test", "--watch", "--invariants", str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or []), daemon=True)
    reader.start()
    try:
        wait_for(lambda: "(watching for changes; Ctrl-C stops)\n" in lines, 60, "the first run")
        assert "  ✅ one holds\n" in lines and "  ✅ two holds\n" in lines
        first = len(lines)
        (folder / "two.test.yaml").write_text(CASES.format(name="two fires", count=1))
        wait_for(lambda: lines.count("(watching for changes; Ctrl-C stops)\n") == 2, 60, "a rerun")
        rerun = lines[first:]
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert rerun[:3] == ["\n", "== two\n", "two\n"]
    assert rerun[3].startswith("  ❌ two fires: expected 1 offending row")
    assert not any("one" in line for line in rerun)
