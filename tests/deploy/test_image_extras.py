"""The shipped image supports every kind of source: its build makes wheels for invmon with
the `s3` extra (boto3) and installs them, and the engine-free copy of that build does the
same, so an invariant with an S3 source runs in the image as it does in `[dev]`."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTAINER = ROOT / "deploy" / "container"


def stages() -> list[str]:
    text = (CONTAINER / "Dockerfile").read_text(encoding="utf-8")
    return re.split(r"^FROM ", text, flags=re.M)[1:]


def runs(stage: str) -> list[str]:
    """Each RUN of a stage, its continuation lines joined."""
    joined = re.sub(r"\s*\\\n\s*", " ", stage)
    return [line for line in joined.splitlines() if line.startswith("RUN ")]


def test_the_s3_extra_is_what_the_image_adds() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    assert [r.split(">")[0] for r in extras["s3"]] == ["boto3"]


def test_the_image_builds_and_installs_invmon_with_the_s3_extra() -> None:
    build, image = stages()
    [wheel] = [r for r in runs(build) if " pip wheel " in r]
    assert wheel.endswith(" pip wheel --no-cache-dir --wheel-dir /wheels '.[s3]'")
    [install] = [r for r in runs(image) if " pip install " in r]
    assert install == (
        "RUN set -- /wheels/invariant_monitor-*.whl && pip install --no-cache-dir --no-index "
        '--find-links=/wheels "$1[s3]" && rm -rf /wheels'
    )


def test_the_engine_free_build_installs_the_extra_too_and_the_kit_checks_the_image() -> None:
    script = (CONTAINER / "check-without-engine.sh").read_text(encoding="utf-8")
    assert '--wheel-dir "$work/wheels" "$work/context[s3]"\n' in script
    assert 'set -- "$work"/wheels/invariant_monitor-*.whl\n' in script
    assert '    "$1[s3]"\n' in script
    assert "\"$work/venv/bin/python\" -c 'import boto3, botocore' ||" in script
    kit = (ROOT / "deploy" / "check-kit.sh").read_text(encoding="utf-8")
    assert "-- python -c 'import boto3, botocore' ||" in kit
