"""Where routing meets billing: a request that needed several attempts is charged once, and a stream whose
upstream died after the first byte is billed for what it produced."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.accounts.conftest import Admin, billing_config
from tests.accounts.test_billing_http import assert_reconciles
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer, free_port


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    config = billing_config(fake_openai, tmp_path_factory.mktemp("billing-routing"))
    config["providers"].append(
        {"name": "dead", "base_url": f"http://127.0.0.1:{free_port()}/v1", "api_key": "env:FAKE_UPSTREAM_KEY"}
    )
    config["models"] += [
        {
            "name": "failover-priced",
            "deployments": [
                {"provider": "dead", "model": "gpt-echo", "priority": 0},
                {"provider": "fake", "model": "gpt-echo", "priority": 1},
            ],
            "routing": {"strategy": "priority"},
            "max_output": 100,
            "pricing": {"input": "0", "output": "3"},
        },
        {
            "name": "dying-priced",
            "deployments": [{"provider": "fake", "model": "die-midstream"}],
            "max_output": 1000,
            "pricing": {"input": "0", "output": "4"},
        },
    ]
    with GatewayServer(config) as gw:
        yield gw


def wait_for_ledger(admin: Admin, account_id: str, rows: int) -> list[dict[str, object]]:
    deadline = time.monotonic() + 10
    while len(entries := admin.ledger(account_id)) < rows and time.monotonic() < deadline:
        time.sleep(0.05)
    return entries


def test_a_request_served_after_a_failover_is_charged_exactly_once(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=10_000)
    r = httpx.post(
        server.base_url + "/chat/completions",
        json={"model": "failover-priced", "messages": [{"role": "user", "content": "hello"}]},
        headers={"Authorization": f"Bearer {created['key']}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-inferplex-attempts"] == "2" and r.headers["x-inferplex-provider"] == "fake"
    tokens = r.json()["usage"]["completion_tokens"]
    assert r.json()["cost"]["micros"] == 3 * tokens
    entries = wait_for_ledger(admin, created["account_id"], 3)
    kinds = sorted(str(e["kind"]) for e in entries)
    assert kinds == ["reserve", "settle", "topup"], entries
    assert assert_reconciles(admin, created["account_id"]) == 10_000 - 3 * tokens


def test_a_stream_whose_upstream_dies_is_closed_properly_and_billed_for_what_it_produced(
    server: GatewayServer, admin: Admin
) -> None:
    created = admin.create_key(credits_micros=100_000)
    with httpx.stream(
        "POST",
        server.base_url + "/chat/completions",
        json={"model": "dying-priced", "messages": [{"role": "user", "content": "hi"}], "stream": True},
        headers={"Authorization": f"Bearer {created['key']}"},
        timeout=30,
    ) as r:
        assert r.status_code == 200
        frames = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]" and "error" in json.loads(frames[-2])
    produced = "".join(
        (json.loads(f)["choices"][0]["delta"].get("content") or "") for f in frames[:-2] if '"choices"' in f
    )
    assert produced == "partial answer "
    entries = wait_for_ledger(admin, created["account_id"], 3)
    billed = 100_000 - assert_reconciles(admin, created["account_id"])
    # 4 micro-USD per output token, estimated at a token per 4 characters produced (rounded up): 4 x 4.
    assert billed == 16, entries
    assert admin.usage(key_id=created["id"])[0]["estimated"] == 1
