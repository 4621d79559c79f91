"""Which config and invariant files a pytest session asserts: read once, with every reason
they cannot be used said in one message naming the file (never a traceback)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from monitor.config import Config, ConfigError, load_config
from monitor.execution.check import load_selected
from monitor.invariants.selection import NothingSelected
from monitor.pytest_plugin.checks import Project
from monitor.text import counted, printable


class ProjectError(Exception):
    """The session's invariants cannot be read; the message says where and why."""


def read_project(
    rootdir: Path,
    config_file: Path | None = None,
    invariants: Path | None = None,
    selectors: Sequence[str] = (),
) -> Project:
    """The config (`config_file`, else invmon.yaml in `rootdir` when there is one, else the
    defaults), the invariants folder (`invariants`, else the config's), and the selected
    files loaded and fenced as `invmon check` loads them."""
    default = rootdir / "invmon.yaml"
    path = config_file if config_file is not None else (default if default.exists() else None)
    try:
        config = load_config(path) if path is not None else Config()
    except ConfigError as exc:
        raise ProjectError(f"invmon: {exc}") from None
    directory = invariants if invariants is not None else config.invariants
    if not directory.is_absolute() and path is None:
        directory = rootdir / directory  # the config's own paths are already from its folder
    if not directory.is_dir():
        # The loader's own words name `invmon`'s flag; here the session's are the way in.
        raise ProjectError(
            f"invmon: invariants folder not found: {printable(str(directory))}; pass "
            "--invmon-invariants DIR or set invmon_invariants in pytest's ini file"
        )
    try:
        loaded = load_selected(config, directory, tuple(selectors))
    except NothingSelected as exc:
        raise ProjectError(f"invmon: {exc}") from None
    if not loaded.invariants and not loaded.problems:
        raise ProjectError(f"invmon: no invariant files in {printable(str(directory))}")
    errors = [p for p in loaded.problems if p.level == "error"]
    if errors:
        listed = "\n".join(f"  {p}" for p in sorted(errors))
        raise ProjectError(
            f"invmon: {counted(len(errors), 'problem')} in the invariant files; none is asserted "
            f"until they are fixed (`invmon lint` says the same):\n{listed}"
        )
    return Project(config, directory, loaded, config.redact.redaction())
