"""The command lines the deployment files run are ones the `inferplex` CLI accepts and that do what the file
expects: the replicas' `serve` (compose's and the chart's) starts, turns ready, and drains to exit 0 on SIGTERM;
the migration step (compose's `migrate`, the chart's Job) migrates. Each is run as written, as a real process,
with the shipped config adapted only where this machine differs (SQLite in a temporary data directory instead
of the PostgreSQL and Redis hosts, a free port on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.deploy import files
from tests.deploy.test_compose import compose_config
from tests.deploy.test_helm import find, render
from tests.deploy.tools import Tools
from tests.gateway_server import free_port

SECRETS = {
    "INFERPLEX_MASTER_KEY": "ipx-deploy-test-master",
    "INFERPLEX_TOKEN_SECRET": "deploy-test-token-secret",
    "INFERPLEX_MEDIA_SIGNING_KEY": "deploy-test-media-signing-key",
    "PGPASSWORD": "unused",
}


@pytest.fixture(scope="module")
def commands(deploy_tools: Tools) -> dict[str, list[str]]:
    """Each place's command line, as the file writes it."""
    done = compose_config(deploy_tools, files.DEPLOY / "env.example")
    assert done.returncode == 0, done.stderr
    services = json.loads(done.stdout)["services"]
    docs = render(deploy_tools)
    return {
        "compose gateway": services["gateway-1"]["command"],
        "compose migrate": services["migrate"]["command"],
        "chart gateway": find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"],
        "chart job": find(docs, "Job", "rel-inferplex-migrate")["spec"]["template"]["spec"]["containers"][0]["args"],
    }


def _local_config(tmp_path: Path) -> tuple[Path, int]:
    """deploy/config/inferplex.yaml with this machine's stores and a free port."""
    config: dict[str, Any] = yaml.safe_load((files.DEPLOY / "config" / "inferplex.yaml").read_text())
    port = free_port()
    config["server"].update(host="127.0.0.1", port=port, data_dir=str(tmp_path / "data"), drain_delay_s=0.5)
    config["storage"] = {}
    config["routing"] = {}
    config["accounts"]["trusted_proxies"] = []
    config["media"]["dir"] = str(tmp_path / "media")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, port


def _run(args: list[str], config: Path, **kwargs: Any) -> subprocess.Popen[str]:
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "INFERPLEX_CONFIG": str(config)}
    return subprocess.Popen(
        [sys.executable, "-m", "inferplex", *args],
        env={**env, **SECRETS},
        cwd=config.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def test_the_migration_step_migrates(commands: dict[str, list[str]], tmp_path: Path) -> None:
    assert commands["compose migrate"] == commands["chart job"]
    config, _ = _local_config(tmp_path)
    process = _run(commands["chart job"], config)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0, out
    assert "newest schema" in out
    assert (tmp_path / "data" / "inferplex.db").exists()


def test_the_replicas_command_serves_then_drains_to_exit_0_on_sigterm(
    commands: dict[str, list[str]], tmp_path: Path
) -> None:
    # compose's and the chart's are one command line (with the chart's default `workers: 1`), run once here
    assert commands["compose gateway"] == commands["chart gateway"]
    config, port = _local_config(tmp_path)
    process = _run(commands["chart gateway"], config)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, process.communicate()[0]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "not ready within 90 s"
            time.sleep(0.2)
        models = httpx.get(
            f"http://127.0.0.1:{port}/v1/models",
            headers={"Authorization": f"Bearer {SECRETS['INFERPLEX_MASTER_KEY']}"},
            timeout=10,
        )
        assert models.status_code == 200
        assert {m["id"] for m in models.json()["data"]} == {"smollm2-135m", "minilm-l6"}
        process.send_signal(signal.SIGTERM)
        assert httpx.get(f"http://127.0.0.1:{port}/health/ready", timeout=2).status_code == 503
        out, _ = process.communicate(timeout=60)
        assert process.returncode == 0, out
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
