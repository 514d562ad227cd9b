"""deploy/helm/inferplex, rendered by Helm (`helm lint`, `helm template`: no cluster needed) and checked against
Kubernetes' published schemas (kubernetes-validate, strict: an unknown field fails), then against the gateway
itself: the config it renders passes `inferplex config check` with only the environment the pods get, and the
probe paths are routes the gateway serves. Not run here: `helm install` into a cluster (none runs here), so the
hooks' ordering and the pods' start are checked only as rendered."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from inferplex.config import parse_config
from tests.deploy import files
from tests.deploy.tools import Tools
from tests.gateway_server import GatewayServer


def render(tools: Tools, *sets: str) -> list[dict[str, Any]]:
    args = [str(tools.helm), "template", "rel", str(files.CHART)]
    for s in sets:
        args += ["--set", s]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def find(docs: list[dict[str, Any]], kind: str, name: str = "rel-inferplex") -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def config_of(obj: dict[str, Any]) -> dict[str, Any]:
    data = obj.get("data") or obj["stringData"]
    parsed: dict[str, Any] = yaml.safe_load(data["config.yaml"])
    return parsed


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The environment a pod's container gets, with every secret's key standing in for its value."""
    env: dict[str, str] = {}
    for item in container["env"]:
        ref = item.get("valueFrom", {}).get("secretKeyRef")
        env[item["name"]] = f"test-{ref['key']}" if ref else item["value"]
    return env


@pytest.fixture(scope="module")
def docs(deploy_tools: Tools) -> list[dict[str, Any]]:
    return render(deploy_tools)


@pytest.fixture(scope="module")
def gateway(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = find(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


def test_helm_lint_passes(deploy_tools: Tools) -> None:
    done = subprocess.run(
        [deploy_tools.helm, "lint", "--strict", files.CHART], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_rendered_object_matches_the_kubernetes_schema(deploy_tools: Tools, tmp_path: Path) -> None:
    other = ("configInSecret=true", "podDisruptionBudget.enabled=false", "metrics.enabled=true")
    for sets, name in (((), "default"), (other, "other")):
        rendered = tmp_path / f"{name}.yaml"
        rendered.write_text(yaml.safe_dump_all(render(deploy_tools, *sets)))
        done = subprocess.run(
            [deploy_tools.kubernetes_validate, "--strict", "--quiet", "-k", "1.33.0", rendered],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    # the validator is live: a misspelt field fails
    bad = tmp_path / "bad.yaml"
    deployment = find(render(deploy_tools), "Deployment")
    deployment["spec"]["replica"] = 3
    bad.write_text(yaml.safe_dump(deployment))
    done = subprocess.run(
        [deploy_tools.kubernetes_validate, "--strict", "--quiet", "-k", "1.33.0", bad],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0


def test_the_rendered_config_passes_config_check_with_only_the_pods_environment(
    docs: list[dict[str, Any]], gateway: dict[str, Any], tmp_path: Path
) -> None:
    """Each `env:` reference in the config is set in the pod (else every pod would crash at start), and the
    Job that migrates reads the same config with the same environment."""
    container = gateway["containers"][0]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config_of(find(docs, "ConfigMap"))))
    env = {"PATH": os.environ["PATH"], **container_env(container)}
    done = subprocess.run(
        [sys.executable, "-m", "inferplex", "config", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    job = find(docs, "Job", "rel-inferplex-migrate")["spec"]["template"]["spec"]
    assert config_of(find(docs, "ConfigMap", "rel-inferplex-migrate")) == config_of(find(docs, "ConfigMap"))
    assert job["containers"][0]["env"] == container["env"]


@pytest.fixture(scope="module")
def served(docs: list[dict[str, Any]], gateway: dict[str, Any]) -> Iterator[GatewayServer]:
    """The gateway with the chart's config, its stores swapped for a local SQLite file (no cluster here)."""
    config = config_of(find(docs, "ConfigMap"))
    config["server"] = {k: v for k, v in config["server"].items() if k not in ("data_dir", "host", "port")}
    config["storage"] = {}
    config["routing"] = {}
    saved = dict(os.environ)
    os.environ.update(container_env(gateway["containers"][0]))
    try:
        with GatewayServer(config, master_key=os.environ["INFERPLEX_MASTER_KEY"]) as server:
            yield server
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_the_probes_ask_routes_the_gateway_serves_on_the_port_the_config_listens_on(
    docs: list[dict[str, Any]], gateway: dict[str, Any], served: GatewayServer
) -> None:
    container = gateway["containers"][0]
    config = config_of(find(docs, "ConfigMap"))
    (port,) = container["ports"]
    assert port["containerPort"] == config["server"]["port"] and config["server"]["host"] == "0.0.0.0"
    service = find(docs, "Service")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == [port["name"]]
    probes = {name: container[name]["httpGet"] for name in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"]["path"] == "/health"
    assert probes["readinessProbe"]["path"] == "/health/ready"
    document = httpx.get(served.url + "/openapi.json", timeout=10).json()
    for probe in probes.values():
        assert probe["port"] == port["name"]
        assert "get" in document["paths"][probe["path"]]
        answer = httpx.get(served.url + probe["path"], timeout=10)  # no key: a kubelet has none
        assert answer.status_code == 200, (probe["path"], answer.text)


def test_a_pod_is_given_the_time_its_drain_takes_and_both_follow_the_values(deploy_tools: Tools) -> None:
    for sets in ((), ("drain.delaySeconds=20", "drain.graceSeconds=120")):
        docs = render(deploy_tools, *sets)
        server = config_of(find(docs, "ConfigMap"))["server"]
        grace = find(docs, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace >= server["drain_delay_s"] + server["drain_s"] + 1
    assert (server["drain_delay_s"], server["drain_s"]) == (20, 120)


def test_the_service_and_disruption_budget_select_the_gateways_and_not_the_migration_job(
    docs: list[dict[str, Any]],
) -> None:
    deployment = find(docs, "Deployment")
    pods = deployment["spec"]["template"]["metadata"]["labels"]
    job_pods = find(docs, "Job", "rel-inferplex-migrate")["spec"]["template"]["metadata"]["labels"]
    for selector in (
        find(docs, "Service")["spec"]["selector"],
        find(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"],
    ):
        assert selector.items() <= pods.items()
        assert not selector.items() <= job_pods.items()
    assert find(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_migrations_run_as_a_hook_job_before_install_and_upgrade_with_its_config_made_first(
    docs: list[dict[str, Any]],
) -> None:
    job = find(docs, "Job", "rel-inferplex-migrate")
    hook_config = find(docs, "ConfigMap", "rel-inferplex-migrate")
    for obj in (job, hook_config):
        assert obj["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    weight = int(hook_config["metadata"]["annotations"]["helm.sh/hook-weight"])
    assert weight < int(job["metadata"]["annotations"]["helm.sh/hook-weight"])
    spec = job["spec"]["template"]["spec"]
    assert spec["containers"][0]["args"] == ["db", "upgrade"]
    assert spec["restartPolicy"] == "Never"
    assert spec["volumes"][0]["configMap"]["name"] == "rel-inferplex-migrate"


def test_config_in_a_secret_moves_every_reader_to_the_secret(deploy_tools: Tools) -> None:
    docs = render(deploy_tools, "configInSecret=true")
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    secret = find(docs, "Secret")
    assert config_of(secret)["server"]["master_key"] == "env:INFERPLEX_MASTER_KEY"
    for spec in (
        find(docs, "Deployment")["spec"]["template"]["spec"],
        find(docs, "Job", "rel-inferplex-migrate")["spec"]["template"]["spec"],
    ):
        assert "secret" in spec["volumes"][0]


def test_the_secrets_are_references_never_values(docs: list[dict[str, Any]], gateway: dict[str, Any]) -> None:
    config = config_of(find(docs, "ConfigMap"))
    for field in (config["server"]["master_key"], config["accounts"]["token_secret"], config["media"]["signing_key"]):
        assert field.startswith("env:")
    secret_env = [e for e in gateway["containers"][0]["env"] if "valueFrom" in e]
    assert {e["name"] for e in secret_env} >= {"INFERPLEX_MASTER_KEY", "PGPASSWORD"}


def test_metrics_on_a_port_of_their_own_reach_config_container_and_annotations(
    deploy_tools: Tools, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = render(deploy_tools, "metrics.enabled=true", "metrics.port=9555")
    config = config_of(find(docs, "ConfigMap"))
    assert config["observability"]["metrics"]["listen"] == "0.0.0.0:9555"
    pod = find(docs, "Deployment")["spec"]["template"]
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert ports["metrics"] == 9555
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "9555"
    for name, value in container_env(pod["spec"]["containers"][0]).items():
        monkeypatch.setenv(name, value)
    parse_config(config)
    # with more workers the port serves the whole pod's series (worker 0 merges its siblings'): allowed
    pod = find(render(deploy_tools, "metrics.enabled=true", "workers=2"), "Deployment")["spec"]["template"]
    assert pod["spec"]["containers"][0]["args"] == ["serve", "--workers", "2"]
