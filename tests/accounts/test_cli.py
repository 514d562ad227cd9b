"""Administration from the shell: `inferplex keys|credits|usage|db` against the server's own database, and
`inferplex config check` refusing a model with no price."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.accounts.conftest import billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferplex", *args], capture_output=True, text=True, timeout=60, env=dict(os.environ)
    )


def cli_json(*args: str) -> Any:
    out = cli(*args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_keys_credits_and_usage_from_the_cli(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    config = billing_config(fake_openai, tmp_path)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    conf = ("--config", str(path))
    created = cli_json("keys", "create", "--name", "ci", "--credits", "20", "--rpm", "60", "--models", "pri*", *conf)
    assert created["key"].startswith("ipx-") and created["allowed_models"] == ["pri*"] and created["rpm"] == 60
    balance = cli_json("credits", "balance", created["account_id"], *conf)
    assert balance["balance_micros"] == 20_000_000
    assert cli_json("credits", "add", created["account_id"], "0.5", *conf)["balance_micros"] == 20_500_000

    with GatewayServer(config) as gw:  # the server reads the same database the CLI wrote
        auth = {"Authorization": f"Bearer {created['key']}"}
        body = {"model": "priced", "messages": [{"role": "user", "content": "a b"}], "max_tokens": 2}
        assert httpx.post(gw.base_url + "/chat/completions", json=body, headers=auth).status_code == 200
        body["model"] = "echo-model"
        r = httpx.post(gw.base_url + "/chat/completions", json=body, headers=auth)
        assert r.status_code == 403 and r.json()["error"]["code"] == "model_not_allowed"

    by_model = cli_json("usage", "--by", "model", *conf)
    priced = next(g for g in by_model if g["group"] == "priced")
    assert priced["requests"] == 1 and priced["cost_micros"] == 6
    ledger = cli_json("credits", "ledger", created["account_id"], *conf)
    assert sum(e["amount_micros"] for e in ledger) == 20_500_000 - 6
    listed = cli_json("keys", "list", *conf)
    assert [k["id"] for k in listed] == [created["id"]] and "key" not in listed[0]
    rotated = cli_json("keys", "rotate", created["id"], *conf)
    assert rotated["key"] != created["key"]
    assert cli_json("keys", "revoke", created["id"], *conf)["revoked_at"] is not None


def test_config_check_refuses_a_model_with_no_price(tmp_path: Path) -> None:
    config = {
        "providers": [{"name": "p", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"}],
        "models": [
            {"name": "priced", "deployments": [{"provider": "p", "model": "a"}], "pricing": {"input": 1, "output": 2}},
            {"name": "free", "deployments": [{"provider": "p", "model": "b"}], "pricing": {"free": True}},
            {"name": "per-deployment", "deployments": [{"provider": "p", "model": "c", "pricing": {"input": 1}}]},
        ],
    }
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(config))
    assert cli("config", "check", str(path)).returncode == 0
    config["models"].append({"name": "nobody-priced-me", "deployments": [{"provider": "p", "model": "d"}]})
    path.write_text(yaml.safe_dump(config))
    out = cli("config", "check", str(path))
    assert out.returncode == 2
    assert "models[3].pricing: model 'nobody-priced-me' has no price" in out.stderr
    assert "pricing.free: true" in out.stderr


def test_a_key_changed_by_the_cli_while_the_gateway_serves_it_changes_at_once(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """The gateway keeps key records between changes; the CLI writes the SQLite file from another process,
    and its change must still apply to the very next request."""
    config = billing_config(fake_openai, tmp_path)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    conf = ("--config", str(path))
    key = cli_json("keys", "create", "--name", "a", "--credits", "1", *conf)
    with GatewayServer(config) as gw:
        auth = {"Authorization": f"Bearer {key['key']}"}
        assert [httpx.get(gw.base_url + "/models", headers=auth).status_code for _ in range(3)] == [200] * 3
        rotated = cli_json("keys", "rotate", key["id"], *conf)
        assert httpx.get(gw.base_url + "/models", headers=auth).status_code == 401
        auth = {"Authorization": f"Bearer {rotated['key']}"}
        assert [httpx.get(gw.base_url + "/models", headers=auth).status_code for _ in range(3)] == [200] * 3
        cli_json("keys", "revoke", key["id"], *conf)
        r = httpx.get(gw.base_url + "/models", headers=auth)
        assert r.status_code == 401 and r.json()["error"]["code"] == "revoked_api_key"


def test_a_revocation_by_the_cli_stops_every_request_sent_after_it_under_load(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """Under concurrent load the gateway reads SQLite's key-change count once per pass of its event loop,
    not once per request; a request sent after the CLI returned must still never see the old key."""
    config = billing_config(fake_openai, tmp_path)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    conf = ("--config", str(path))
    key = cli_json("keys", "create", "--name", "a", "--credits", "100", *conf)
    body = {"model": "priced", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    seen: list[tuple[float, int]] = []
    stop = threading.Event()

    def caller() -> None:
        with httpx.Client(base_url=gw.base_url, headers={"Authorization": f"Bearer {key['key']}"}) as client:
            while not stop.is_set():
                sent = time.monotonic()
                status = client.post("/chat/completions", json=body).status_code
                seen.append((sent, status))

    with GatewayServer(config) as gw:
        callers = [threading.Thread(target=caller) for _ in range(8)]
        for c in callers:
            c.start()
        time.sleep(0.5)
        cli_json("keys", "revoke", key["id"], *conf)
        revoked = time.monotonic()
        time.sleep(0.5)
        stop.set()
        for c in callers:
            c.join()
    before = [status for sent, status in seen if sent < revoked]
    after = [status for sent, status in seen if sent > revoked]
    assert before.count(200) > 8 and after, (len(before), len(after))
    assert set(after) == {401}
