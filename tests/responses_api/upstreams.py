"""One gateway in front of a fake upstream of every provider kind, for the Responses API conformance tests.

Models are named `<kind>-<behaviour>` (`anthropic-tool`, `gemini-think`, ...); each points at the upstream
id that makes that kind's fake behave so (`ROWS`, None where the kind's fake cannot). The fakes are the
session ones of tests/conftest.py and tests/providers/conftest.py (they validate what the gateway sends);
a test module imports the fixtures from here (`gateway`, `fakes`, and the fakes they are built on).

Every tool-calling fake calls the first tool with `{"city": "Paris"}`, and once the conversation ends with
the tool's answer says `tool said: <the answer>`: an agent's loop ends, and its last answer proves the
fake received the tool's output. `tool_output_sent(kind, fakes)` reads that output back from what the fake
recorded, in the provider's own shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import fake_openai
from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.azure_upstream import FakeAzure
from tests.fakes.bedrock_upstream import FakeBedrock
from tests.fakes.gemini_upstream import FakeGemini
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.providers.conftest import _native_keys, every_kind, fake_anthropic, fake_azure, fake_bedrock, fake_gemini

# the fixtures this module's own are built on, re-exported: a test module imports them with `gateway_fixture`
# (pytest finds a fixture in the test module's namespace)
__all__ = [
    "LONG_INPUT",
    "ROWS",
    "TIME_TOOL",
    "WEATHER_TOOL",
    "Fakes",
    "_native_keys",
    "fake_anthropic",
    "fake_azure",
    "fake_bedrock",
    "fake_gemini",
    "fake_openai",
    "fakes_fixture",
    "gateway_fixture",
    "kinds",
    "model",
    "tool_output_sent",
]

# `native`: the OpenAI fake again, on a provider that speaks Responses (`options.responses_api`), so the request
# passes through (responses_api/native.py) and the stream is the upstream's own, relayed
KINDS = ("openai", "native", "azure", "anthropic", "gemini", "bedrock", "local")
PROVIDER = {
    "openai": "oa",
    "native": "oa-native",
    "azure": "az",
    "anthropic": "claude",
    "gemini": "gem",
    "bedrock": "br",
    "local": "local",
}
LOCAL_CHAT = "smollm2-135m-instruct"
_BR = "anthropic.claude-{}-v1:0"

# behaviour -> kind -> the upstream id that makes that kind's fake do it
ROWS: dict[str, dict[str, str | None]] = {
    "text": {
        "openai": "gpt-echo",
        "native": "gpt-echo",
        "azure": "gpt4o-prod",
        "anthropic": "claude-echo-1",
        "gemini": "gemini-echo",
        "bedrock": _BR.format("3-5-sonnet"),
        "local": LOCAL_CHAT,
    },
    # a tool call, then (after the tool's answer) `tool said: ...`; Azure's fake has no tools
    "tool": {
        "openai": "agent-tool",
        "native": "tool-native",
        "anthropic": "claude-tool-1",
        "gemini": "gemini-tool",
        "bedrock": _BR.format("tool"),
    },
    # a thinking model's call, signed: the signature must come back with the call in the next turn
    "signed-tool": {"gemini": "gemini-tool-sig"},
    # usage with cache reads and writes (Anthropic: 100 read, 20 written; Gemini: 50 cached; Bedrock: 40 and 10)
    "cache": {"anthropic": "claude-cache-1", "gemini": "gemini-cache", "bedrock": _BR.format("cache")},
    # two calls in one answer (two tools offered)
    "parallel": {
        "anthropic": "claude-tool-parallel-1",
        "gemini": "gemini-tool-parallel",
        "bedrock": "us.anthropic.claude-tool-parallel-v1:0",
    },
    # reasoning before the text
    "think": {
        "native": "reason-native",
        "anthropic": "claude-think-1",
        "gemini": "gemini-think",
        "bedrock": _BR.format("think"),
    },
    # reasoning before a tool call
    "think-tool": {
        "anthropic": "claude-think-tool-1",
        "gemini": "gemini-think-tool",
        "bedrock": _BR.format("think-tool"),
    },
    # the answer stopped by the provider's filter (finish_reason content_filter, a refusal)
    "filtered": {"azure": "filtered", "anthropic": "claude-refusal-1"},
    # the answer cut by max_output_tokens (`truncated` in the tests sends a long input and a small limit)
    "truncated": {
        "openai": "gpt-echo",
        "native": "gpt-echo",
        "anthropic": "claude-echo-1",
        "gemini": "gemini-echo",
        "bedrock": _BR.format("3-5-sonnet"),
    },
    # the upstream refuses the call (overloaded / a server error) before any output
    "error": {
        "openai": "error-500",
        "native": "error-500",
        "azure": "error-503",
        "anthropic": "claude-error-529",
        "gemini": "gemini-error-503",
        "bedrock": _BR.format("overloaded"),
    },
    # the upstream streams "tick " every 50 ms for 30 s (what a cancel interrupts)
    "slow": {"openai": "slow-stream", "anthropic": "claude-slow-1", "gemini": "gemini-slow"},
    # the upstream fails after some text
    "midstream": {
        "openai": "die-midstream",
        "native": "die-midstream",
        "azure": "midstream",
        "anthropic": "claude-midstream-1",
        "gemini": "gemini-midstream",
        "bedrock": _BR.format("midstream"),
    },
}


def kinds(behaviour: str) -> list[str]:
    return [k for k in KINDS if ROWS[behaviour].get(k)]


def model(kind: str, behaviour: str) -> str:
    return f"{kind}-{behaviour}"


@dataclass
class Fakes:
    openai: FakeOpenAI
    anthropic: FakeAnthropic
    gemini: FakeGemini
    bedrock: FakeBedrock


@pytest.fixture(scope="module", name="fakes")
def fakes_fixture(
    fake_openai: FakeOpenAI, fake_anthropic: FakeAnthropic, fake_gemini: FakeGemini, fake_bedrock: FakeBedrock
) -> Fakes:
    return Fakes(fake_openai, fake_anthropic, fake_gemini, fake_bedrock)


@pytest.fixture(scope="module", name="gateway")
def gateway_fixture(
    fake_openai: FakeOpenAI,
    fake_anthropic: FakeAnthropic,
    fake_gemini: FakeGemini,
    fake_azure: FakeAzure,
    fake_bedrock: FakeBedrock,
) -> Iterator[GatewayServer]:
    providers = every_kind(fake_openai, fake_anthropic, fake_gemini, fake_azure, fake_bedrock)
    native = {**providers[0], "name": "oa-native", "options": {"responses_api": True}}
    providers.insert(1, native)
    models: list[dict[str, Any]] = []
    for behaviour, by_kind in ROWS.items():
        for kind, upstream in by_kind.items():
            if upstream:
                models.append(
                    {
                        "name": model(kind, behaviour),
                        "deployments": [{"provider": PROVIDER[kind], "model": upstream}],
                        "routing": {"retries": 0},
                        "context_window": 32768,
                        "pricing": {"input": "1", "output": "2"},
                    }
                )
    with GatewayServer({"providers": providers, "models": models}) as server:
        yield server


def tool_output_sent(kind: str, fakes: Fakes) -> tuple[str, str]:
    """(the id or name the last request's tool result answers, its text), read from what `kind`'s fake got
    last, in the provider's own shape."""
    if kind == "openai":
        last = fakes.openai.state.last().body["messages"][-1]
        assert last["role"] == "tool", last
        content = last["content"]
        text = content if isinstance(content, str) else "".join(p["text"] for p in content)
        return last["tool_call_id"], text
    if kind == "native":
        item = fakes.openai.state.last("/responses").body["input"][-1]
        assert item["type"] == "function_call_output", item
        return item["call_id"], item["output"]
    if kind == "anthropic":
        message = fakes.anthropic.last("/v1/messages").body["messages"][-1]
        block = next(b for b in message["content"] if b["type"] == "tool_result")
        content = block["content"]
        text = content if isinstance(content, str) else "".join(p["text"] for p in content)
        return block["tool_use_id"], text
    if kind == "gemini":
        content = fakes.gemini.last().body["contents"][-1]
        part = next(p["functionResponse"] for p in content["parts"] if "functionResponse" in p)
        return part["name"], str(part["response"].get("content"))
    if kind == "bedrock":
        message = fakes.bedrock.last().body["messages"][-1]
        result = next(b["toolResult"] for b in message["content"] if "toolResult" in b)
        return result["toolUseId"], "".join(c.get("text", "") for c in result["content"])
    raise AssertionError(f"no tool-calling fake for {kind}")


# the tool every test offers, as the Responses API takes it (flat, not nested under `function` as on chat)
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TIME_TOOL: dict[str, Any] = {**WEATHER_TOOL, "name": "get_time", "description": "The time in a city."}
LONG_INPUT = " ".join(f"word{i}" for i in range(40))
