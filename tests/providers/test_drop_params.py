"""`drop_params` means the same on every provider: what a target cannot honour is dropped and named in
`x-inferplex-dropped-params`, or, with `drop_params: false`, refused with a 400 naming the parameter.

Before issue 20 a vendor profile's drops (Groq's `logit_bias`) and the local model's unsupported list were
dropped even with `drop_params: false`; now they go through `capabilities.plan` like the native adapters'.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from inferplex.defaults import DEFAULT_CHAT_MODEL, DEFAULT_CONFIG
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

MSG = [{"role": "user", "content": "Say hi"}]


@pytest.fixture(scope="module")
def groq(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    config = {
        "providers": [
            {"name": "groq", "kind": "openai", "base_url": fake_openai.base_url, "api_key": "env:FAKE_UPSTREAM_KEY"}
        ],
        "models": [{"name": "g", "deployments": [{"provider": "groq", "model": "gpt-echo"}]}],
    }
    with GatewayServer(config) as server:
        yield server


@pytest.fixture(scope="module")
def local() -> Iterator[GatewayServer]:
    with GatewayServer(DEFAULT_CONFIG) as server:
        yield server


def _post(gw: GatewayServer, **body: Any) -> httpx.Response:
    return httpx.post(gw.base_url + "/chat/completions", json=body, headers=gw.auth, timeout=60)


@pytest.mark.parametrize("stream", [False, True])
def test_a_vendor_profile_drop_is_refused_with_drop_params_false(groq: GatewayServer, stream: bool) -> None:
    resp = _post(groq, model="g", messages=MSG, logit_bias={"1": 5}, drop_params=False, stream=stream)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == "logit_bias" and "drop_params: true" in error["message"]


def test_a_vendor_profile_drop_is_named_by_default(groq: GatewayServer, fake_openai: FakeOpenAI) -> None:
    resp = _post(groq, model="g", messages=MSG, logit_bias={"1": 5}, user="u1")
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-inferplex-dropped-params"] == "logit_bias"
    sent = fake_openai.state.last().body
    assert "logit_bias" not in sent and sent["user"] == "u1"


def test_a_value_that_asks_for_nothing_is_dropped_even_with_drop_params_false(
    groq: GatewayServer, fake_openai: FakeOpenAI
) -> None:
    """`store: false` asks for nothing: Groq rejects the field, so it is still removed (and named)."""
    resp = _post(groq, model="g", messages=MSG, store=False, drop_params=False)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-inferplex-dropped-params"] == "store"
    assert "store" not in fake_openai.state.last().body


def test_the_local_models_unsupported_parameters_are_refused_with_drop_params_false(local: GatewayServer) -> None:
    resp = _post(local, model=DEFAULT_CHAT_MODEL, messages=MSG, logit_bias={"1": 5}, drop_params=False, max_tokens=1)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == "logit_bias"


def test_the_local_models_unsupported_parameters_are_named_by_default(local: GatewayServer) -> None:
    resp = _post(local, model=DEFAULT_CHAT_MODEL, messages=MSG, logprobs=True, top_logprobs=2, max_tokens=1)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-inferplex-dropped-params"] == "logprobs,top_logprobs"


# Anthropic's own details (thinking, top_k, cache_control): declared per provider, decided by the plan too.
THINKING = {"type": "enabled", "budget_tokens": 1024}
CACHED = [{"role": "user", "content": [{"type": "text", "text": "Say hi", "cache_control": {"type": "ephemeral"}}]}]


@pytest.mark.parametrize(
    ("model", "extra", "param"),
    [
        ("gemini-echo", {"thinking": THINKING}, "thinking"),
        ("gemini-echo", {"messages": CACHED}, "cache_control"),
        ("bedrock-llama", {"top_k": 5}, "top_k"),
    ],
)
def test_anthropic_details_a_target_cannot_honour_are_named_or_refused(
    native_gateway: GatewayServer, model: str, extra: dict[str, Any], param: str
) -> None:
    body = {"model": model, "messages": MSG, **extra}
    named = _post(native_gateway, **body)
    assert named.status_code == 200, named.text
    assert param in named.headers["x-inferplex-dropped-params"].split(",")
    refused = _post(native_gateway, **body, drop_params=False)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == param


def test_anthropic_details_the_anthropic_family_honours_are_not_named(native_gateway: GatewayServer) -> None:
    resp = _post(native_gateway, model="bedrock-claude", messages=CACHED, top_k=5, drop_params=False)
    assert resp.status_code == 200, resp.text
    assert "x-inferplex-dropped-params" not in resp.headers
