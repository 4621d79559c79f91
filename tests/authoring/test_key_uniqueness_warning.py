"""A fixture whose rows repeat a key is a warning in `invmon lint` and `invmon test`: an
incident tracks rows by key, so rows sharing one would count as one."""

from __future__ import annotations

from pathlib import Path

from helpers import cli


def test_a_key_that_is_not_unique_is_a_warning_in_lint_and_in_test(tmp_path: Path) -> None:
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "dup.sql").write_text(
        "-- description: x\n-- key: [id]\nSELECT 1 AS id, v FROM (VALUES (1), (2)) AS t(v)\n"
    )
    (folder / "dup.test.yaml").write_text(
        "cases:\n  - name: twice\n    expect:\n      rows: [{id: 1, v: 1}, {id: 1, v: 2}]\n"
    )
    warning = (
        "'twice': the key (id) is not unique: [1] {} more than once, and an incident tracks "
        "rows by key, so those rows would count as one (the count and the CSV keep them all)"
    )
    linted = cli("lint", str(folder))
    assert linted.returncode == 0
    assert f"dup.test.yaml:2: warning: {warning.format('is expected')}" in linted.stdout
    tested = cli("test", "--invariants", str(folder))
    assert "✅ twice" in tested.stdout
    assert f"warning: {warning.format('was returned')}" in tested.stdout
