"""Unify's API (seed 002) against Inferplex: the official `openai` SDK pointed at `/v0`, `model@provider`
endpoints, the platform arguments, and `GET /v0/endpoints` (the other `/v0` routes: test_unify_api.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pydantic import SecretStr

from inferplex.canonical import ChatRequest
from inferplex.config import ProviderConfig
from inferplex.dialects.unify import split_endpoint
from inferplex.errors import InvalidRequest
from inferplex.gateway_request import parse_request, tags
from inferplex.providers.base import CallerKey, CallInfo
from inferplex.providers.openai_compat import OpenAICompatible
from tests.conftest import UPSTREAM_KEY
from tests.dialects.conftest import CALLER_KEY, seed_config
from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

USER = [{"role": "user", "content": "Say hello."}]
PLATFORM = {
    "signature": "python",
    "tags": ["team-a", "nightly"],
    "drop_params": True,
    "log_query_body": False,
    "log_response_body": True,
}


@pytest.fixture
def client(seed_gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=seed_gateway.url + "/v0", api_key=seed_gateway.master_key, max_retries=0)


def post(gw: GatewayServer, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(gw.url + "/v0/chat/completions", json=body, headers={**gw.auth, **(headers or {})}, timeout=10)


def assert_openai_error(resp: httpx.Response, status: int, code: str | None = None, param: str | None = None) -> None:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    if code is not None:
        assert body["error"]["code"] == code
    if param is not None:
        assert body["error"]["param"] == param


def test_openai_sdk_with_model_at_provider_and_every_argument(client: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini@openai",
        messages=[{"role": "system", "content": "Be brief."}, *USER],  # type: ignore[list-item]
        max_tokens=50,
        stop=["\n\n"],
        temperature=1,
        frequency_penalty=0.1,
        presence_penalty=0.2,
        logit_bias={"50256": -100},
        logprobs=True,
        top_logprobs=2,
        n=1,
        response_format={"type": "text"},
        seed=7,
        top_p=0.9,
        user="user-42",
        extra_body=PLATFORM,
    )
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.model == "gpt-4o-mini"
    assert completion.choices[0].message.content == "echo: Say hello."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens > 0
    assert raw.http_response.headers["x-inferplex-provider"] == "openai"
    sent = fake_openai.state.last().body
    assert sent["model"] == "gpt-4o-mini"
    for name in ("max_tokens", "stop", "temperature", "frequency_penalty", "presence_penalty", "logit_bias", "seed"):
        assert name in sent, name
    assert sent["top_logprobs"] == 2 and sent["user"] == "user-42"
    for name in (*PLATFORM, "use_custom_keys", "region", "provider"):
        assert name not in sent, name


def test_model_at_provider_reaches_a_native_provider(client: openai.OpenAI, seed_anthropic: FakeAnthropic) -> None:
    completion = client.chat.completions.create(
        model="claude-sonnet-4-6@anthropic",
        messages=USER,
        max_tokens=64,  # type: ignore[arg-type]
    )
    assert completion.choices[0].message.content == "echo: Say hello."
    assert seed_anthropic.last("/v1/messages").body["model"] == "claude-sonnet-4-6"


def test_the_provider_part_picks_the_deployment(client: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini@groq",
        messages=USER,
        extra_body={"region": "us-east1"},  # type: ignore[arg-type]
    )
    assert raw.http_response.headers["x-inferplex-provider"] == "groq"
    assert "region" not in fake_openai.state.last().body


def test_streaming_with_the_sdk(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="gpt-4o-mini@openai",
        messages=USER,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"tags": "a,b"},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: Say hello."
    assert any(c.choices and c.choices[0].finish_reason == "stop" for c in chunks)
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


def test_stream_frames_end_with_done(seed_gateway: GatewayServer) -> None:
    body = {"model": "gpt-4o-mini@openai", "messages": USER, "stream": True}
    with httpx.stream("POST", seed_gateway.url + "/v0/chat/completions", json=body, headers=seed_gateway.auth) as r:
        lines = [line for line in r.iter_lines() if line]
    assert r.headers["content-type"].startswith("text/event-stream")
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)


# ---- use_custom_keys --------------------------------------------------------------------------------------


def test_use_custom_keys_sends_the_callers_key_to_that_provider(
    seed_gateway: GatewayServer, byok_openai: FakeOpenAI
) -> None:
    body = {"model": "byok-model@byok", "messages": USER, "use_custom_keys": True}
    resp = post(seed_gateway, body, {"x-provider-api-key": CALLER_KEY})
    assert resp.status_code == 200, resp.text
    sent = byok_openai.state.last()
    assert sent.headers["Authorization"] == f"Bearer {CALLER_KEY}"
    assert "use_custom_keys" not in sent.body
    assert CALLER_KEY not in resp.text and CALLER_KEY not in str(resp.headers)


def test_without_use_custom_keys_the_header_is_not_used(seed_gateway: GatewayServer, byok_openai: FakeOpenAI) -> None:
    before = len(byok_openai.state.requests)
    resp = post(seed_gateway, {"model": "byok-model@byok", "messages": USER}, {"x-provider-api-key": CALLER_KEY})
    assert resp.status_code == 502  # the byok fake refuses the gateway's own key
    assert len(byok_openai.state.requests) == before


def test_the_callers_key_is_used_only_by_the_provider_it_names(fake_openai: FakeOpenAI) -> None:
    """A fallback to another provider uses that provider's own key, never the caller's."""
    config = ProviderConfig(name="openai", base_url=fake_openai.base_url, api_key=SecretStr(UPSTREAM_KEY))
    adapter = OpenAICompatible(config, None)  # type: ignore[arg-type]
    ours = {"Authorization": f"Bearer {UPSTREAM_KEY}"}
    assert adapter._auth(ours, CallInfo()) == ours
    assert adapter._auth(ours, CallInfo(caller_key=CallerKey("byok", CALLER_KEY))) == ours
    theirs = adapter._auth(ours, CallInfo(caller_key=CallerKey("openai", CALLER_KEY)))
    assert theirs == {"Authorization": f"Bearer {CALLER_KEY}"} and ours["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert CALLER_KEY not in repr(CallInfo(caller_key=CallerKey("openai", CALLER_KEY)))


@pytest.mark.parametrize(
    "body,headers,code",
    [
        ({"model": "byok-model@byok", "use_custom_keys": True}, {}, "missing_provider_key"),
        (
            {"model": "claude-sonnet-4-6@anthropic", "use_custom_keys": True},
            {"x-provider-api-key": "k"},
            "custom_keys_not_supported",
        ),
    ],
)
def test_use_custom_keys_refusals(
    seed_gateway: GatewayServer, body: dict[str, Any], headers: dict[str, str], code: str
) -> None:
    assert_openai_error(post(seed_gateway, {**body, "messages": USER}, headers), 400, code, "use_custom_keys")


# ---- bad endpoints and platform arguments -----------------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt-4o-mini", "@openai", "gpt-4o-mini@", "@", 5])
def test_malformed_model_at_provider_is_a_400(seed_gateway: GatewayServer, model: Any) -> None:
    assert_openai_error(post(seed_gateway, {"model": model, "messages": USER}), 400, "invalid_model", "model")


@pytest.mark.parametrize(
    "model,code",
    [
        ("gpt-4o-mini@nope", "provider_not_found"),
        ("nope@openai", "model_not_found"),
        ("claude-sonnet-4-6@openai", "model_not_found"),
    ],
)
def test_unknown_endpoint_is_openais_404(seed_gateway: GatewayServer, model: str, code: str) -> None:
    assert_openai_error(post(seed_gateway, {"model": model, "messages": USER}), 404, code)


@pytest.mark.parametrize(
    "extra,param",
    [
        ({}, "messages"),
        ({"tags": 5}, "tags"),
        ({"tags": ["a", 1]}, "tags"),
        ({"signature": 3}, "signature"),
        ({"log_query_body": "yes"}, "log_query_body"),
        ({"log_response_body": 0}, "log_response_body"),
        ({"drop_params": "no"}, "drop_params"),
        ({"use_custom_keys": "true"}, "use_custom_keys"),
        ({"temperature": 5}, "temperature"),
    ],
)
def test_bad_arguments_are_a_400_naming_them(seed_gateway: GatewayServer, extra: dict[str, Any], param: str) -> None:
    body: dict[str, Any] = {"model": "gpt-4o-mini@openai", **extra}
    if param != "messages":
        body["messages"] = USER
    assert_openai_error(post(seed_gateway, body), 400, param=param)


def test_missing_model_and_bad_key(seed_gateway: GatewayServer) -> None:
    assert_openai_error(post(seed_gateway, {"messages": USER}), 400, param="model")
    resp = httpx.post(seed_gateway.url + "/v0/chat/completions", json={"model": "x@y", "messages": USER})
    assert_openai_error(resp, 401)


def test_region_narrows_the_deployments(
    seed_gateway: GatewayServer,
    fake_openai: FakeOpenAI,
    seed_anthropic: FakeAnthropic,
    byok_openai: FakeOpenAI,
    tmp_path: Path,
) -> None:
    body = {"model": "gpt-4o-mini@openai", "messages": USER, "region": "eu-west1"}
    assert_openai_error(post(seed_gateway, body), 400, param="region", code="region_not_available")
    # One endpoint (`llama-3.1-8b@groq`) with a deployment in each of two regions, and a strategy that always
    # prefers us-east1: only the narrowing can send a request to eu-west1.
    config = seed_config(fake_openai, seed_anthropic, byok_openai, str(tmp_path))
    llama = next(m for m in config["models"] if m["name"] == "llama-3.1-8b")
    llama["deployments"] = [
        {"provider": "groq", "model": "llama-3.1-8b-instant", "region": "us-east1", "priority": 0},
        {"provider": "groq", "model": "llama-3.1-8b-eu", "region": "eu-west1", "priority": 1},
    ]
    llama["routing"] = {"strategy": "priority"}
    with GatewayServer(config) as gw:
        for region, upstream in [("eu-west1", "llama-3.1-8b-eu"), ("us-east1", "llama-3.1-8b-instant")] * 2:
            r = post(gw, {"model": "llama-3.1-8b@groq", "messages": USER, "region": region})
            assert r.status_code == 200, r.text
            assert r.headers["x-inferplex-deployment"] == f"groq/{upstream}@{region}"
            sent = fake_openai.state.last().body
            assert sent["model"] == upstream and "region" not in sent
        assert post(gw, {"model": "llama-3.1-8b@groq", "messages": USER}).headers["x-inferplex-provider"] == "groq"


# ---- GET /v0/endpoints ------------------------------------------------------------------------------------


def endpoints(gw: GatewayServer, **params: str) -> list[str]:
    resp = httpx.get(gw.url + "/v0/endpoints", params=params, headers=gw.auth, timeout=10)
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert isinstance(data, list) and all(isinstance(e, str) for e in data)
    return data


def test_endpoints_lists_model_at_provider_and_filters(seed_gateway: GatewayServer) -> None:
    everything = endpoints(seed_gateway)
    assert {"gpt-4o-mini@openai", "gpt-4o-mini@groq", "claude-sonnet-4-6@anthropic", "llama-3.1-8b@groq"} <= set(
        everything
    )
    assert sorted(endpoints(seed_gateway, model="gpt-4o-mini")) == ["gpt-4o-mini@groq", "gpt-4o-mini@openai"]
    assert set(endpoints(seed_gateway, provider="groq")) >= {"gpt-4o-mini@groq", "llama-3.1-8b@groq"}
    assert all(e.endswith("@groq") for e in endpoints(seed_gateway, provider="groq"))
    assert endpoints(seed_gateway, model="gpt-4o-mini", provider="openai") == ["gpt-4o-mini@openai"]
    assert endpoints(seed_gateway, model="nope") == []
    for endpoint in everything:
        split_endpoint(endpoint)  # every listed endpoint is one the chat route accepts


def test_endpoints_needs_a_key(seed_gateway: GatewayServer) -> None:
    """Unlike the chat route (whose client is the OpenAI SDK), the catalogue fails as Unify's FastAPI does."""
    resp = httpx.get(seed_gateway.url + "/v0/endpoints")
    assert resp.status_code == 401 and isinstance(resp.json()["detail"], str) and set(resp.json()) == {"detail"}


# ---- pure pieces ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,expected",
    [(None, []), ("a,b", ["a", "b"]), (" a , ,b ", ["a", "b"]), (["x", "y z"], ["x", "y z"]), ("", [])],
)
def test_tags_table(value: Any, expected: list[str]) -> None:
    assert tags(value) == expected


def test_platform_options_defaults_and_values() -> None:
    # The log flags are options only when sent: omitted, the operator's settings decide (docs/dialects.md).
    body = {"model": "m@p", "messages": USER}
    plain = parse_request(ChatRequest, dict(body)).options
    assert (plain.signature, plain.log_query_body, plain.log_response_body, plain.tags) == (None, None, None, [])
    sent = parse_request(ChatRequest, {**body, **PLATFORM, "tags": "team-a, nightly"})
    options = sent.options
    assert (options.signature, options.log_query_body, options.log_response_body) == ("python", False, True)
    assert options.tags == ["team-a", "nightly"]  # normalised, for the usage log
    assert not set(PLATFORM) & set(sent.wire())  # and never forwarded
    with pytest.raises(InvalidRequest):
        parse_request(ChatRequest, {**body, "log_query_body": "no"})


def test_drop_params_is_honoured(seed_gateway: GatewayServer, seed_anthropic: FakeAnthropic) -> None:
    """Anthropic has no `seed`: dropped and named by default, a 400 naming it with drop_params false."""
    body = {"model": "claude-sonnet-4-6@anthropic", "messages": USER, "seed": 7}
    resp = post(seed_gateway, body)
    assert resp.status_code == 200, resp.text
    assert "seed" in resp.headers["x-inferplex-dropped-params"].split(",")
    assert "seed" not in seed_anthropic.last("/v1/messages").body
    assert_openai_error(post(seed_gateway, {**body, "drop_params": False}), 400, param="seed")
