"""The Python half of deploy/check-kit.sh: what is awkward in bash, one subcommand each.

  validate FILE…         rendered kustomize output, every document against Kubernetes' schemas
  pip-config OUT         the host's effective pip settings as a pip.conf, and the paths they name
  image-command WHAT     from `buildah inspect --type image` on stdin: the argv of the image's
                         ENTRYPOINT+CMD (run), HEALTHCHECK (healthcheck) or its USER (user)
  seed SERVER NAME       a database NAME on SERVER with the demo schema and its planted rows
  drop SERVER NAME       that database dropped
  probe URL              a running daemon: /readyz 200 by a deadline, /healthz 200,
                         (--planted) every shipped invariant's count the seed planted, and
                         (--version) the version invmon_build_info says it was built as

deploy/container/check-without-engine.sh uses `probe` too, from the venv it installs, so the
module imports nothing at the top beyond the standard library: each subcommand imports what
it needs (kubernetes-validate is a dev dependency, not in that venv).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
K8S_VERSION = "1.30.0"  # the version tests/deploy/test_deploy_kit.py validates the sources against
# The Prometheus operator's kinds are CRDs: Kubernetes' schemas do not know them.
OPERATOR_API = "monitoring.coreos.com/v1"


class KitError(Exception):
    """A check failed; the message says what and where."""


def validate(paths: Sequence[Path]) -> list[str]:
    """One line per rendered file; KitError listing every invalid document."""
    import kubernetes_validate  # type: ignore[import-untyped]
    import yaml

    problems: list[str] = []
    lines: list[str] = []
    for path in paths:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
        if not docs:
            problems.append(f"{path}: rendered nothing")
        for doc in docs:
            where = f"{path}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            try:
                kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                if doc.get("apiVersion") != OPERATOR_API:
                    problems.append(f"{where}: no schema for {doc.get('apiVersion')}")
            except kubernetes_validate.ValidationError as exc:
                problems.append(f"{where}: {exc.message} at {'.'.join(map(str, exc.path))}")
        lines.append(f"{path}: {len(docs)} resources valid")
    if problems:
        raise KitError("invalid rendered manifests:\n  " + "\n  ".join(problems))
    return lines


def effective_pip_settings(listing: str, environ: dict[str, str]) -> dict[str, dict[str, str]]:
    """`pip config list` output as sections of a pip.conf, with pip's precedence.

    pip lets PIP_* variables (the `:env:` entries) override every file's section, so they
    go into [global] and replace the key wherever else it is set. A CA bundle or proxy that
    pip takes from the environment rather than its config is made explicit too: the build
    has neither the host's environment nor its site configuration.
    """
    sections: dict[str, dict[str, str]] = {}
    overrides: dict[str, str] = {}
    for line in listing.splitlines():
        name, sep, quoted = line.partition("=")
        section, dot, key = name.rpartition(".")
        if not (sep and dot):
            raise KitError(f"unexpected line from `pip config list`: {line!r}")
        value = str(ast.literal_eval(quoted))  # pip prints each value as a Python literal
        if section == ":env:":
            overrides[key] = value
        else:
            sections.setdefault(section, {})[key] = value
    for key, value in overrides.items():
        for settings in sections.values():
            settings.pop(key, None)
        sections.setdefault("global", {})[key] = value
    global_ = sections.setdefault("global", {})
    for key, variables in (
        ("cert", ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")),
        ("proxy", ("https_proxy", "HTTPS_PROXY")),
    ):
        found = next((environ[v] for v in variables if environ.get(v)), None)
        if found and not any(key in s for s in sections.values()):
            global_[key] = found
    return sections


def local_paths(sections: dict[str, dict[str, str]]) -> list[str]:
    """The host files and folders the settings name, for read-only mounts in the build.

    A file:// index named `simple` is mounted with its parent: PEP 503 pages there usually
    link their files relatively, outside the `simple` folder itself.
    """
    found: set[str] = set()
    for settings in sections.values():
        for key, value in settings.items():
            for token in value.split():
                url = urllib.parse.urlparse(token)
                if url.scheme == "file":
                    path = Path(urllib.parse.unquote(url.path))
                elif token.startswith("/"):
                    path = Path(token)
                else:
                    continue
                if key.endswith("index-url") and path.name == "simple":
                    path = path.parent
                if path.exists():
                    found.add(str(path))
    for name in found:
        if ":" in name or "," in name:
            raise KitError(f"cannot mount {name!r} into the build: ':' and ',' separate -v")
    # A folder inside another mounted one is mounted already.
    return sorted(p for p in found if not any(Path(p).is_relative_to(q) and p != q for q in found))


def pip_conf(sections: dict[str, dict[str, str]]) -> str:
    out = []
    for section, settings in sections.items():
        if settings:
            out.append(f"[{section}]")
            out += [f"{key} = {value}" for key, value in settings.items()]
    return "\n".join(out) + "\n"


def image_command(image: dict[str, Any], what: str) -> list[str]:
    config = (image.get("Docker") or {}).get("config") or {}
    if what == "run":
        argv = list(config.get("Entrypoint") or []) + list(config.get("Cmd") or [])
    elif what == "user":
        argv = [config.get("User") or ""]
        if argv[0] in ("", "root", "0", "0:0"):
            raise KitError("the image runs as root")
    else:
        test = list((config.get("Healthcheck") or {}).get("Test") or [])
        if test[:1] == ["CMD"]:
            argv = test[1:]
        elif test[:1] == ["CMD-SHELL"]:
            argv = ["/bin/sh", "-c", *test[1:]]
        else:
            raise KitError(f"the image has no HEALTHCHECK to run (Test: {test}); built as OCI?")
    if not argv:
        raise KitError(f"the image has no {what} command")
    return argv


def seed(server: str, name: str) -> str:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    demo = ROOT / "deploy" / "demo"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo(server, dbname=name)
    with psycopg.connect(dsn) as conn:
        for script in ("schema.sql", "seed.sql"):
            conn.execute((demo / script).read_bytes())
    # The daemon reads it as deployed: as the least-privilege role the shipped script makes
    # (invmon refuses a role that could write unless told otherwise), named after the
    # database so parallel runs leave each other alone.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET invmon.role = {}").format(sql.Literal(name)))
        conn.execute(sql.SQL("SET invmon.effects_group = {}").format(sql.Literal(f"{name}_fx")))
        conn.execute(sql.SQL("SET invmon.monitors_group = {}").format(sql.Literal(f"{name}_mon")))
        conn.execute((ROOT / "deploy" / "readonly-role.sql").read_bytes())
    return make_conninfo(dsn, user=name)


def drop(server: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(server, autocommit=True) as admin:
        statement = "DROP DATABASE IF EXISTS {} WITH (FORCE)"
        admin.execute(sql.SQL(statement).format(sql.Identifier(name)))
        # They owned nothing outside the database just dropped; the role first, as it is a
        # member of the other two.
        for role in (name, f"{name}_fx", f"{name}_mon"):
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def planted_counts(path: Path) -> dict[str, int]:
    """deploy/demo/planted.yaml as invariant -> offending rows (its `expect:` format)."""
    import yaml

    counts = {}
    for name, expect in yaml.safe_load(path.read_text(encoding="utf-8")).items():
        given = [len(expect[k]) for k in ("keys", "rows") if k in expect]
        counts[name] = int(expect.get("count", given[0] if given else 0))
    return counts


def offending_rows(metrics: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        sample.labels["invariant"]: sample.value
        for family in text_string_to_metric_families(metrics)
        if family.name == "invmon_offending_rows"
        for sample in family.samples
    }


def build_info(metrics: str) -> dict[str, str]:
    """The labels of invmon_build_info (version, commit, store_schema); {} when absent."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(metrics):
        if family.name == "invmon_build_info":
            return {k: v for sample in family.samples for k, v in sample.labels.items()}
    return {}


def expected_version(given: str) -> str:
    """The version a build was given (INVMON_VERSION), or, given none, the one setuptools-scm
    falls back to for sources without git metadata: pyproject's fallback_version."""
    if given:
        return given
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return str(pyproject["tool"]["setuptools_scm"]["fallback_version"])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=4) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return 0, ""  # not listening yet


def alive(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def probe(
    base: str,
    deadline_s: float,
    planted: Path | None,
    pid: int | None,
    version: str | None = None,
) -> list[str]:
    """Poll until ready and (with `planted`) every planted count is served, or fail; with
    `version` (empty: pyproject's fallback), invmon_build_info must say that version."""
    deadline = time.monotonic() + deadline_s
    want = planted_counts(planted) if planted else {}
    last = "nothing answered"
    while time.monotonic() < deadline:
        if not alive(pid):
            raise KitError(f"the daemon exited before it was ready ({last})")
        ready, _ = get(f"{base}/readyz")
        status, metrics = get(f"{base}/metrics")
        served = offending_rows(metrics) if status == 200 else {}
        last = f"/readyz {ready}, /metrics {status}, offending rows {served}"
        # The counts appear as each invariant's first run ends; all are due at start.
        if ready == 200 and all(served.get(name) == n for name, n in want.items()):
            health, _ = get(f"{base}/healthz")
            if health != 200:
                raise KitError(f"/healthz answered {health} while /readyz answered 200")
            rows = ", ".join(f"{name} {int(n)}" for name, n in sorted(served.items()))
            built = build_info(metrics)
            if version is not None and built.get("version") != expected_version(version):
                raise KitError(
                    f"invmon_build_info says {built or 'nothing'}, not the version "
                    f"{expected_version(version)!r} the build was given"
                )
            about = ", ".join(f"{k} {v}" for k, v in built.items())
            return [
                "/healthz 200, /readyz 200",
                f"invmon_offending_rows: {rows}",
                f"invmon_build_info: {about}",
            ]
        time.sleep(0.25)  # the poll's interval; the deadline bounds the wait
    raise KitError(f"not ready with the planted counts {want} in {deadline_s:.0f} s: {last}")


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("validate").add_argument("files", nargs="+", type=Path)
    sub.add_parser("pip-config").add_argument("out", type=Path)
    sub.add_parser("image-command").add_argument("what", choices=["run", "healthcheck", "user"])
    for name in ("seed", "drop"):
        command = sub.add_parser(name)
        command.add_argument("server")
        command.add_argument("name")
    ask = sub.add_parser("probe")
    ask.add_argument("url")
    ask.add_argument("--deadline", type=float, default=60.0, help="seconds (default 60)")
    ask.add_argument("--planted", type=Path, help="deploy/demo/planted.yaml: assert its counts")
    ask.add_argument("--pid", type=int, help="fail as soon as this process has exited")
    ask.add_argument(
        "--version", help="the version the build was given (empty: pyproject's fallback)"
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        if args.command == "validate":
            print("\n".join(validate(args.files)))
        elif args.command == "pip-config":
            import subprocess

            listing = subprocess.run(
                [sys.executable, "-m", "pip", "config", "list"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            sections = effective_pip_settings(listing, dict(os.environ))
            args.out.write_text(pip_conf(sections), encoding="utf-8")
            print("\n".join(local_paths(sections)))
        elif args.command == "image-command":
            image = json.load(sys.stdin)
            sys.stdout.write("\0".join(image_command(image, args.what)) + "\0")
        elif args.command == "seed":
            print(seed(args.server, args.name))
        elif args.command == "drop":
            drop(args.server, args.name)
        else:
            print("\n".join(probe(args.url, args.deadline, args.planted, args.pid, args.version)))
    except KitError as exc:
        print(f"{parser.prog} {args.command}: {exc}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:  # the checks' own dependencies, imported lazily
        print(
            f"{parser.prog} {args.command}: needs {exc.name}: pip install -e '.[dev]'",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
