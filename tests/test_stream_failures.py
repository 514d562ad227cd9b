"""A stream whose upstream dies after the first byte: ledger, usage log and response agree.

The rule (docs/accounts.md, "Streams that fail mid-way"): the caller pays for what it received, the prompt
and the output delivered before the failure, both counted by the gateway at 4 characters a token (not the
reservation's deliberate over-estimate of the prompt); if no output was delivered, nothing. The usage row
records the failure (its status, and the error in `response_body`), the same cost the ledger took, and the
error the caller received says what was charged.

Prices here: 2 micro-USD per input token, 5 per output token, so a wrong prompt count shows in the cost.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.accounts.conftest import Admin, billing_config
from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

PROMPT = "one two three four five six seven eight nine ten"  # 48 characters: 12 tokens at 4 a token
PRICES = {"input": "2", "output": "5"}
CREDITS = 100_000


def tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    anthropic = FakeAnthropic("sk-ant-failures").start()
    mp = pytest.MonkeyPatch()
    mp.setenv("FAILURES_ANTHROPIC_KEY", "sk-ant-failures")
    config = billing_config(fake_openai, tmp_path_factory.mktemp("stream-failures"))
    config["providers"].append(
        {"name": "claude", "kind": "anthropic", "base_url": anthropic.url, "api_key": "env:FAILURES_ANTHROPIC_KEY"}
    )
    for name, provider, upstream in [
        ("dying-openai", "fake", "die-midstream"),
        ("dying-early", "fake", "die-after-role"),
        ("dying-claude", "claude", "claude-midstream-1"),
        ("garbled", "fake", "garbled-midstream"),
    ]:
        deployment = {"provider": provider, "model": upstream}
        config["models"].append({"name": name, "deployments": [deployment], "max_output": 200, "pricing": PRICES})
    try:
        with GatewayServer(config) as gw:
            yield gw
    finally:
        mp.undo()
        anthropic.stop()


@pytest.fixture
def admin(server: GatewayServer) -> Iterator[Admin]:
    a = Admin(server.url, server.master_key)
    yield a
    a.close()


def _stream(server: GatewayServer, path: str, key: str, body: dict[str, Any]) -> list[str]:
    """The `data:` payloads of a streamed answer (SSE), which must start with 200."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream("POST", server.url + path, json=body, headers=headers, timeout=30) as r:
        assert r.status_code == 200, r.read()
        return [line[6:] for line in r.iter_lines() if line.startswith("data: ")]


def _usage_row(admin: Admin, key_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while not (rows := admin.usage(key_id=key_id)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(rows) == 1, rows
    return rows[0]


def _books(admin: Admin, account_id: str) -> tuple[int, list[dict[str, Any]]]:
    """(what the account was charged, its ledger), after checking the balance is the ledger's sum."""
    balance: int = admin.account(account_id)["balance_micros"]
    ledger = admin.ledger(account_id)
    assert balance == sum(e["amount_micros"] for e in ledger)
    return CREDITS - balance, ledger


def test_openai_route_charges_what_was_delivered(server: GatewayServer, admin: Admin) -> None:
    key = admin.create_key(credits_micros=CREDITS)
    body = {"model": "dying-openai", "messages": [{"role": "user", "content": PROMPT}], "stream": True}
    frames = _stream(server, "/v1/chat/completions", key["key"], body)
    assert frames[-1] == "[DONE]"
    error = json.loads(frames[-2])["error"]
    delivered = "".join(
        c["delta"].get("content") or "" for f in frames[:-2] for c in json.loads(f).get("choices") or ()
    )
    assert delivered == "partial answer "
    cost = 2 * tokens(PROMPT) + 5 * tokens(delivered)  # 12 prompt + 4 output tokens: 44
    charged, ledger = _books(admin, key["account_id"])
    assert charged == cost, ledger
    assert f"{cost} micro-USD" in error["message"]
    row = _usage_row(admin, key["id"])
    assert row["status"] == 502 and row["cost_micros"] == cost
    assert (row["prompt_tokens"], row["completion_tokens"], row["estimated"]) == (tokens(PROMPT), tokens(delivered), 1)
    assert row["response_body"]["error"]["code"] == error["code"]
    assert row["response_body"]["error"]["message"] == error["message"]


def test_anthropic_route_charges_what_was_delivered(server: GatewayServer, admin: Admin) -> None:
    key = admin.create_key(credits_micros=CREDITS)
    body = {"model": "dying-claude", "max_tokens": 50, "messages": [{"role": "user", "content": PROMPT}]}
    frames = [json.loads(f) for f in _stream(server, "/v1/messages", key["key"], {**body, "stream": True})]
    assert frames[-1]["type"] == "error"
    error = frames[-1]["error"]
    delivered = "".join(f["delta"].get("text") or "" for f in frames if f["type"] == "content_block_delta")
    assert delivered == f"echo: {PROMPT}"
    cost = 2 * tokens(PROMPT) + 5 * tokens(delivered)
    charged, ledger = _books(admin, key["account_id"])
    assert charged == cost, ledger
    assert f"{cost} micro-USD" in error["message"]
    row = _usage_row(admin, key["id"])
    assert row["status"] == 503 and row["cost_micros"] == cost  # Anthropic's overloaded_error (529 to the caller)
    assert (row["prompt_tokens"], row["completion_tokens"], row["estimated"]) == (tokens(PROMPT), tokens(delivered), 1)
    assert row["response_body"]["error"]["message"] == error["message"]


def test_nothing_delivered_costs_nothing(server: GatewayServer, admin: Admin) -> None:
    key = admin.create_key(credits_micros=CREDITS)
    body = {"model": "dying-early", "messages": [{"role": "user", "content": PROMPT}], "stream": True}
    frames = _stream(server, "/v1/chat/completions", key["key"], body)
    error = json.loads(frames[-2])["error"]
    assert frames[-1] == "[DONE]" and "0 micro-USD" in error["message"]
    charged, ledger = _books(admin, key["account_id"])
    assert charged == 0, ledger
    row = _usage_row(admin, key["id"])
    assert (row["status"], row["cost_micros"], row["completion_tokens"]) == (502, 0, 0)
    assert row["response_body"]["error"]["message"] == error["message"]


def test_a_defect_mid_stream_is_settled_as_a_failure_too(server: GatewayServer, admin: Admin) -> None:
    """A chunk the gateway cannot handle (here `choices` that is not a list) is its own failure (500), not a
    provider's, and is billed and logged by the same rule."""
    key = admin.create_key(credits_micros=CREDITS)
    body = {"model": "garbled", "messages": [{"role": "user", "content": PROMPT}], "stream": True}
    frames = _stream(server, "/v1/chat/completions", key["key"], body)
    error = json.loads(frames[-2])["error"]
    assert frames[-1] == "[DONE]" and error["code"] == "internal_error"
    cost = 2 * tokens(PROMPT) + 5 * tokens("partial answer ")
    charged, ledger = _books(admin, key["account_id"])
    assert charged == cost, ledger
    assert f"{cost} micro-USD" in error["message"]
    row = _usage_row(admin, key["id"])
    assert (row["status"], row["cost_micros"]) == (500, cost)
    assert row["response_body"]["error"]["message"] == error["message"]
