"""What is Bedrock's own, end to end: the official `openai` SDK -> gateway -> a fake Bedrock that verifies SigV4.

Each model family on Converse (and a bearer API key), SigV4 over an encoded model id and the region, tool
shapes, JSON schema by a forced tool, images, reasoning, top_k, cached-input usage, guardrails, its error
messages, the Anthropic dialect in front of it, and what Llama cannot take. What every kind owes a caller
(streaming, an unknown stop reason, 429, overload, a mid-stream failure, hang-up, drop_params, n) is in
test_contract.py.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.fakes.bedrock_upstream import FakeBedrock
from tests.gateway_server import GatewayServer

TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]


@pytest.fixture
def client(native_gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=native_gateway.base_url, api_key=native_gateway.master_key, max_retries=0)


@pytest.mark.parametrize("model", ["bedrock-claude", "bedrock-llama", "bedrock-mistral", "bedrock-bearer"])
def test_every_family_buffered_and_streamed(client: openai.OpenAI, fake_bedrock: FakeBedrock, model: str) -> None:
    done = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello world"}],
        max_tokens=20,
    )
    assert done.choices[0].message.content == "echo: hello world" and done.choices[0].finish_reason == "stop"
    sent = fake_bedrock.last("/converse")
    assert sent.body["system"] == [{"text": "Be brief."}] and sent.body["inferenceConfig"] == {"maxTokens": 20}
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "a b"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: a b"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 5
    assert fake_bedrock.last("/converse-stream").body["inferenceConfig"] == {"maxTokens": 4096}


def test_signature_covers_an_encoded_model_id(fake_bedrock: FakeBedrock, client: openai.OpenAI) -> None:
    client.chat.completions.create(model="bedrock-tool", messages=[{"role": "user", "content": "x"}], tools=TOOLS)
    sent = fake_bedrock.last("/converse")
    assert sent.path == "/model/us.anthropic.claude-tool-parallel-v1:0/converse"
    assert sent.headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDFAKE/")
    with pytest.raises(openai.APIStatusError) as wrong:
        client.chat.completions.create(model="bedrock-wrong-region", messages=[{"role": "user", "content": "x"}])
    assert wrong.value.status_code == 502 and "region" in wrong.value.body["message"]  # type: ignore[index]


def test_tools_parallel_streamed_and_results(client: openai.OpenAI, fake_bedrock: FakeBedrock) -> None:
    stream = client.chat.completions.create(
        model="bedrock-tool", messages=[{"role": "user", "content": "x"}], tools=TOOLS, stream=True
    )
    calls: dict[int, list[str]] = {}
    for chunk in stream:
        for tc in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
            entry = calls.setdefault(tc.index, ["", ""])
            entry[0] += (tc.function.name or "") if tc.function else ""
            entry[1] += (tc.function.arguments or "") if tc.function else ""
    assert {i: (n, json.loads(a)) for i, (n, a) in calls.items()} == {
        0: ("get_weather", {"city": "Paris"}),
        1: ("get_time", {"city": "Paris"}),
    }
    first = client.chat.completions.create(
        model="bedrock-tool", messages=[{"role": "user", "content": "x"}], tools=TOOLS
    )
    message = first.choices[0].message
    follow: Any = [
        {"role": "user", "content": "x"},
        message.model_dump(exclude_none=True),
        *[{"role": "tool", "tool_call_id": c.id, "content": "sunny"} for c in message.tool_calls or ()],
    ]
    second = client.chat.completions.create(model="bedrock-tool", messages=follow, tools=TOOLS)
    assert second.choices[0].message.content == "tool said: sunny"
    results = fake_bedrock.last("/converse").body["messages"][2]["content"]
    assert [r["toolResult"]["status"] for r in results] == ["success", "success"]


def test_json_schema_by_forced_tool_and_n(client: openai.OpenAI, fake_bedrock: FakeBedrock) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "forecast", "schema": schema}}
    done = client.chat.completions.create(
        model="bedrock-claude", messages=[{"role": "user", "content": "x"}], response_format=fmt, n=2
    )
    assert [json.loads(c.message.content or "") for c in done.choices] == [{"city": "Paris", "days": 3}] * 2
    assert fake_bedrock.last().body["toolConfig"]["toolChoice"] == {"tool": {"name": "forecast"}}


def test_images_reasoning_cache_and_guardrail(client: openai.OpenAI, fake_bedrock: FakeBedrock) -> None:
    content: Any = [
        {"type": "text", "text": "what"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    client.chat.completions.create(model="bedrock-claude", messages=[{"role": "user", "content": content}])
    assert fake_bedrock.last().body["messages"][0]["content"][1] == {
        "image": {"format": "png", "source": {"bytes": "AAAA"}}
    }
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="bedrock-claude",
            messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}
            ],
        )
    thought = client.chat.completions.create(
        model="bedrock-think", messages=[{"role": "user", "content": "x"}], extra_body={"top_k": 5}
    )
    assert (thought.choices[0].message.model_extra or {})["reasoning_content"] == "Pondering."
    assert fake_bedrock.last().body["additionalModelRequestFields"] == {"top_k": 5}
    cached = client.chat.completions.create(model="bedrock-cache", messages=[{"role": "user", "content": "x"}])
    assert cached.usage is not None and cached.usage.prompt_tokens == 51
    assert cached.usage.prompt_tokens_details is not None and cached.usage.prompt_tokens_details.cached_tokens == 40
    guard = client.chat.completions.create(model="bedrock-guardrail", messages=[{"role": "user", "content": "x"}])
    assert guard.choices[0].finish_reason == "content_filter"


def test_errors_keep_bedrocks_message(client: openai.OpenAI, native_gateway: GatewayServer) -> None:
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="bedrock-throttle", messages=[{"role": "user", "content": "x"}])
    assert limited.value.body["message"] == "Too many requests, please wait before trying again."  # type: ignore[index]
    with httpx.stream(
        "POST",
        native_gateway.base_url + "/chat/completions",
        headers=native_gateway.auth,
        json={"model": "bedrock-midstream", "stream": True, "messages": [{"role": "user", "content": "x"}]},
    ) as resp:
        body = resp.read().decode()
    events = [line[6:] for line in body.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and json.loads(events[-2])["error"]["message"] == "Model stream failed."


def test_anthropic_dialect_in_front_of_bedrock(native_gateway: GatewayServer) -> None:
    client = anthropic.Anthropic(base_url=native_gateway.url, api_key=native_gateway.master_key, max_retries=0)
    with client.messages.stream(model="bedrock-think", max_tokens=50, messages=[{"role": "user", "content": "x"}]) as s:
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].signature == "sig-b"  # type: ignore[union-attr]


def test_unsupported_options_are_named(client: openai.OpenAI, fake_bedrock: FakeBedrock) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="bedrock-llama", messages=[{"role": "user", "content": "x"}], reasoning_effort="high", seed=4
    )
    assert raw.http_response.headers["x-inferplex-dropped-params"] == "reasoning_effort,seed"
    assert set(fake_bedrock.last().body) == {"messages", "inferenceConfig"}
