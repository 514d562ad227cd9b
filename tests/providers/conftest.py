"""Fakes for every native provider and one gateway in front of all of them, on real sockets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import UPSTREAM_KEY
from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.azure_upstream import FakeAzure
from tests.fakes.bedrock_upstream import FakeBedrock
from tests.fakes.gemini_upstream import FakeGemini
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

ANTHROPIC_KEY = "sk-ant-fake"
GEMINI_KEY = "gm-fake"
AZURE_KEY = "az-fake"
GEMINI = [
    "gemini-echo",
    "gemini-tool",
    "gemini-tool-parallel",
    "gemini-safety",
    "gemini-blocked",
    "gemini-think",
    "gemini-cache",
    "gemini-future",
    "gemini-error-503",
    "gemini-error-400",
    "gemini-error-429",
    "gemini-tool-sig",
]

# public model name -> upstream model id on the Anthropic fake (the id picks the fake's behaviour)
CLAUDE = {
    "claude-echo": "claude-echo-1",
    "claude-tool": "claude-tool-1",
    "claude-parallel": "claude-tool-parallel-1",
    "claude-think": "claude-think-1",
    "claude-cache": "claude-cache-1",
    "claude-refusal": "claude-refusal-1",
    "claude-future": "claude-future-1",
    "claude-529": "claude-error-529",
    "claude-429": "claude-error-429",
    "claude-400": "claude-error-400",
    "claude-midstream": "claude-midstream-1",
    "claude-slow": "claude-slow-1",
}


@pytest.fixture(scope="session")
def fake_anthropic() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic(ANTHROPIC_KEY).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def fake_gemini() -> Iterator[FakeGemini]:
    fake = FakeGemini(GEMINI_KEY).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def fake_azure() -> Iterator[FakeAzure]:
    fake = FakeAzure(AZURE_KEY).start()
    yield fake
    fake.stop()


# public model name -> Bedrock model id on the fake (Anthropic, Meta and Mistral families)
BEDROCK = {
    "bedrock-claude": "anthropic.claude-3-5-sonnet-20240620-v1:0",
    "bedrock-tool": "us.anthropic.claude-tool-parallel-v1:0",
    "bedrock-think": "anthropic.claude-think-v1:0",
    "bedrock-cache": "anthropic.claude-cache-v1:0",
    "bedrock-llama": "meta.llama3-1-70b-instruct-v1:0",
    "bedrock-mistral": "mistral.mistral-large-2407-v1:0",
    "bedrock-guardrail": "anthropic.claude-guardrail-v1:0",
    "bedrock-future": "anthropic.claude-future-v1:0",
    "bedrock-throttle": "anthropic.claude-throttle-v1:0",
    "bedrock-midstream": "anthropic.claude-midstream-v1:0",
}


@pytest.fixture(scope="session")
def fake_bedrock() -> Iterator[FakeBedrock]:
    fake = FakeBedrock("AKIDFAKE", "fake-secret", "us-east-1").start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session", autouse=True)
def _native_keys() -> Iterator[None]:
    mp = pytest.MonkeyPatch()
    mp.setenv("FAKE_ANTHROPIC_KEY", ANTHROPIC_KEY)
    mp.setenv("FAKE_GEMINI_KEY", GEMINI_KEY)
    mp.setenv("FAKE_AZURE_KEY", AZURE_KEY)
    mp.setenv("FAKE_BEDROCK_API_KEY", "ABSKQmVkcm9ja0FQSUtleS1mYWtl")
    mp.setenv("AWS_ACCESS_KEY_ID", "AKIDFAKE")
    mp.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret")
    mp.delenv("AWS_SESSION_TOKEN", raising=False)
    mp.delenv("AWS_PROFILE", raising=False)
    yield
    mp.undo()


def every_kind(
    openai: FakeOpenAI, anthropic: FakeAnthropic, gemini: FakeGemini, azure: FakeAzure, bedrock: FakeBedrock
) -> list[dict[str, Any]]:
    """One provider of each kind on its fake (and the bundled local model), named as the suites address them."""
    return [
        {"name": "oa", "kind": "openai", "base_url": openai.base_url, "api_key": "env:FAKE_UPSTREAM_KEY"},
        {"name": "az", "kind": "azure", "base_url": azure.url, "api_key": "env:FAKE_AZURE_KEY"},
        {"name": "claude", "kind": "anthropic", "base_url": anthropic.url, "api_key": "env:FAKE_ANTHROPIC_KEY"},
        {"name": "gem", "kind": "gemini", "base_url": gemini.url + "/v1beta", "api_key": "env:FAKE_GEMINI_KEY"},
        {"name": "br", "kind": "bedrock", "base_url": bedrock.url, "options": {"region": "us-east-1"}},
        {"name": "local", "kind": "local"},
    ]


def _model(name: str, provider: str, upstream: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "deployments": [{"provider": provider, "model": upstream}], **extra}


def native_config(
    anthropic: FakeAnthropic, openai_fake: FakeOpenAI, gemini: FakeGemini, azure: FakeAzure, bedrock: FakeBedrock
) -> dict[str, Any]:
    models = [_model(n, "claude", u) for n, u in CLAUDE.items()]
    models += [_model(n, "gemini", n, capabilities={"vision": True}) for n in GEMINI]
    models += [
        _model("claude-vision", "claude", "claude-echo-1", capabilities={"vision": True}),
        _model("claude-limited", "claude", "claude-echo-1", max_output=7),
        _model("claude-notools", "claude", "claude-tool-1", capabilities={"tools": False}),
        _model("claude-nostream", "claude", "claude-echo-1", capabilities={"streaming": False}),
        _model("claude-jsontool", "claude-tooljson", "claude-tool-1"),
        *[_model(n, "bedrock", u, capabilities={"vision": n == "bedrock-claude"}) for n, u in BEDROCK.items()],
        _model("bedrock-bearer", "bedrock-apikey", BEDROCK["bedrock-claude"]),
        _model("bedrock-wrong-region", "bedrock-eu", BEDROCK["bedrock-claude"]),
        _model("gpt-echo", "openai-fake", "gpt-echo"),
        _model("azure-echo", "azure", "gpt4o-prod"),
        _model("azure-filtered", "azure", "filtered"),
        _model("azure-prompt-filtered", "azure", "prompt-filtered"),
        _model("azure-missing", "azure", "missing"),
        _model("azure-text", "azure", "gpt4o-prod", capabilities={"tools": False, "streaming": False}),
        _model("gpt-tool", "openai-fake", "tool-model"),
    ]
    return {
        "server": {"max_body_bytes": 1024 * 1024},
        "providers": [
            {
                "name": "claude",
                "kind": "anthropic",
                "base_url": anthropic.url,
                "api_key": "env:FAKE_ANTHROPIC_KEY",
                "timeouts": {"connect": 2, "read": 5},
            },
            {
                "name": "claude-tooljson",
                "kind": "anthropic",
                "base_url": anthropic.url + "/v1",
                "api_key": "env:FAKE_ANTHROPIC_KEY",
                "options": {"json_schema": "tool"},
            },
            {
                "name": "gemini",
                "kind": "gemini",
                "base_url": gemini.url + "/v1beta",
                "api_key": "env:FAKE_GEMINI_KEY",
                "timeouts": {"connect": 2, "read": 5},
            },
            {
                "name": "azure",
                "kind": "azure",
                "base_url": azure.url,
                "api_key": "env:FAKE_AZURE_KEY",
                "options": {"api_version": "2024-10-21"},
            },
            {
                "name": "bedrock",
                "kind": "bedrock",
                "base_url": bedrock.url,
                "options": {"region": "us-east-1"},
                "timeouts": {"connect": 2, "read": 5},
            },
            {
                "name": "bedrock-apikey",
                "kind": "bedrock",
                "base_url": bedrock.url,
                "api_key": "env:FAKE_BEDROCK_API_KEY",
                "options": {"region": "us-east-1"},
            },
            {"name": "bedrock-eu", "kind": "bedrock", "base_url": bedrock.url, "options": {"region": "eu-west-1"}},
            {
                "name": "openai-fake",
                "kind": "openai",
                "base_url": openai_fake.base_url,
                "api_key": "env:FAKE_UPSTREAM_KEY",
            },
        ],
        "models": models,
    }


@pytest.fixture(scope="session")
def native_gateway(
    fake_anthropic: FakeAnthropic,
    fake_openai: FakeOpenAI,
    fake_gemini: FakeGemini,
    fake_azure: FakeAzure,
    fake_bedrock: FakeBedrock,
) -> Iterator[GatewayServer]:
    assert UPSTREAM_KEY
    with GatewayServer(native_config(fake_anthropic, fake_openai, fake_gemini, fake_azure, fake_bedrock)) as server:
        yield server
