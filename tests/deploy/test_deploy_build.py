"""The image's build follows pyproject: its first stage copies exactly the folders setuptools
builds the wheel from, so a package mapped to a new folder cannot be left out again (the
build failed on examples/live once). And the pure parts of deploy/tools/check_kit.py, the helper
of deploy/check-kit.sh, which CI runs to build, render and run what is shipped."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "container" / "Dockerfile"


def load_kit() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_kit", ROOT / "deploy" / "tools" / "check_kit.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kit = load_kit()


def folders_setuptools_reads() -> set[str]:
    """pyproject.toml, the readme, and each package's folder: its own package-dir entry,
    else its nearest mapped parent's folder plus the rest of its name, else its dotted
    name from the root. Folders inside another one are copied with it."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = pyproject["tool"]["setuptools"]
    mapped: dict[str, str] = setuptools.get("package-dir", {})
    readme = pyproject["project"]["readme"]
    assert isinstance(readme, str), "a readme table names its file differently: read it here"
    needed = {"pyproject.toml", readme}
    for package in setuptools["packages"]:
        parts = package.split(".")
        for cut in range(len(parts), -1, -1):
            prefix = ".".join(parts[:cut])
            if prefix in mapped or cut == 0:
                needed.add("/".join(p for p in (mapped.get(prefix, ""), *parts[cut:]) if p))
                break
    return {f for f in needed if not any(f.startswith(g + "/") for g in needed)}


def build_stage_copies() -> set[str]:
    """The sources of every COPY between the first FROM and the second."""
    stages = re.split(r"^FROM ", DOCKERFILE.read_text(encoding="utf-8"), flags=re.M)
    assert len(stages) == 3, "two stages: build, then the image"
    sources: set[str] = set()
    for line in stages[1].splitlines():
        if line.startswith("COPY "):
            *given, _destination = [w for w in line.split()[1:] if not w.startswith("--")]
            sources.update(given)
    return sources


def test_the_build_stage_copies_exactly_the_folders_the_wheel_is_built_from() -> None:
    needed = folders_setuptools_reads()
    assert "examples/live" in needed  # monitor.live_examples: the folder once left out
    assert build_stage_copies() == needed
    for source in needed:
        assert (ROOT / source).exists(), source


def test_both_stages_start_from_base_which_is_python_slim_unless_a_builder_says() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert text.index("ARG BASE=python:3.11-slim-bookworm\n") < text.index("\nFROM ")
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["${BASE}", "${BASE}"]


def test_it_gives_pip_variables_precedence_and_names_the_files_to_mount(
    tmp_path: Path,
) -> None:
    index = tmp_path / "mirror" / "simple"
    index.mkdir(parents=True)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    bundle = tmp_path / "ca.pem"
    bundle.write_text("certificates")
    listing = (
        "global.find-links='/nowhere'\n"
        "install.find-links='/nowhere'\n"
        f"global.extra-index-url='file://{index} https://pypi.example/simple'\n"
        f":env:.find-links='{wheels}'\n"
    )
    sections = kit.effective_pip_settings(listing, {"REQUESTS_CA_BUNDLE": str(bundle)})
    assert sections == {
        "global": {
            "extra-index-url": f"file://{index} https://pypi.example/simple",
            "find-links": str(wheels),  # the variable wins over every file's setting
            "cert": str(bundle),  # what pip took from the environment, made explicit
        },
        "install": {},
    }
    # The simple index with its parent, where its pages' relative links lead.
    assert kit.local_paths(sections) == sorted(map(str, (index.parent, wheels, bundle)))
    assert kit.pip_conf(sections).splitlines()[0] == "[global]"
    assert "[install]" not in kit.pip_conf(sections)


def test_it_refuses_a_line_pip_config_list_would_not_print() -> None:
    with pytest.raises(kit.KitError, match="unexpected line"):
        kit.effective_pip_settings("no equals sign here", {})


def image(config: dict[str, Any]) -> dict[str, Any]:
    return {"Docker": {"config": config}}


def test_it_runs_the_images_own_entrypoint_cmd_healthcheck_and_user() -> None:
    built = image(
        {
            "Entrypoint": ["invmon"],
            "Cmd": ["run", "--config", "/etc/invmon/invmon.yaml"],
            "Healthcheck": {"Test": ["CMD", "python", "-c", "pass"]},
            "User": "10001:10001",
        }
    )
    assert kit.image_command(built, "run") == [
        "invmon",
        "run",
        "--config",
        "/etc/invmon/invmon.yaml",
    ]
    assert kit.image_command(built, "healthcheck") == ["python", "-c", "pass"]
    assert kit.image_command(built, "user") == ["10001:10001"]
    shell = image({"Healthcheck": {"Test": ["CMD-SHELL", "true"]}})
    assert kit.image_command(shell, "healthcheck") == ["/bin/sh", "-c", "true"]
    with pytest.raises(kit.KitError, match="no HEALTHCHECK"):
        kit.image_command(image({}), "healthcheck")  # as an OCI-format build leaves it
    with pytest.raises(kit.KitError, match="root"):
        kit.image_command(image({"User": ""}), "user")


def test_the_planted_counts_are_the_seeds() -> None:
    counts = kit.planted_counts(ROOT / "deploy" / "demo" / "planted.yaml")
    assert counts == {
        "balance_ledger_drift": 3,
        "duplicate_settled_refunds": 2,
        "expired_lease_jobs": 2,
        "orphaned_receipts": 4,
    }


def test_it_reads_the_offending_rows_from_the_metrics_page() -> None:
    page = (
        "# HELP invmon_offending_rows Rows the last run returned.\n"
        "# TYPE invmon_offending_rows gauge\n"
        'invmon_offending_rows{invariant="a",target="default"} 3.0\n'
        'invmon_other{invariant="b"} 1.0\n'
    )
    assert kit.offending_rows(page) == {"a": 3.0}
