"""What is Anthropic's own, end to end: the official `openai` SDK -> gateway -> a fake Anthropic that validates.

Its headers and system prompt, role merging, tool_use/tool_result shapes, images, JSON schema (native or by a
forced tool), thinking and reasoning_effort, cached-input usage, its refusal, its error bodies, and the
parameters it cannot take. What every kind owes a caller (streaming, an unknown finish reason, 429, overload,
a mid-stream failure, hang-up on chat completions, drop_params, n) is in test_contract.py.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.gateway_server import GatewayServer

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]
PIXEL = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.fixture
def client(native_gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=native_gateway.base_url, api_key=native_gateway.master_key, max_retries=0)


def test_buffered_chat_headers_and_system_prompt(client: openai.OpenAI, fake_anthropic: FakeAnthropic) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="claude-echo",
        temperature=0.3,
        top_p=0.9,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello world"}],
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "echo: hello world"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "claude-echo"
    assert raw.http_response.headers["x-inferplex-provider"] == "claude"
    sent = fake_anthropic.last("/v1/messages")
    assert sent.headers["x-api-key"] == "sk-ant-fake" and sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.body == {
        "model": "claude-echo-1",
        "max_tokens": 4096,
        "system": "Be brief.",
        "temperature": 0.3,
        "top_p": 0.9,
        "messages": [{"role": "user", "content": "hello world"}],
    }


def test_streamed_chat_with_usage(client: openai.OpenAI) -> None:
    """The usage is message_delta's count (message_start says 1 output token), not one or the sum."""
    stream = client.chat.completions.create(
        model="claude-echo",
        messages=[{"role": "user", "content": "a streamed answer please"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: a streamed answer please"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5


def test_multi_turn_merges_roles_and_keeps_alternation(client: openai.OpenAI, fake_anthropic: FakeAnthropic) -> None:
    completion = client.chat.completions.create(
        model="claude-echo",
        messages=[
            {"role": "developer", "content": "rules"},
            {"role": "user", "content": "first"},
            {"role": "user", "content": "second"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "third"},
        ],
    )
    assert completion.choices[0].message.content == "echo: third"
    roles = [m["role"] for m in fake_anthropic.last("/v1/messages").body["messages"]]
    assert roles == ["user", "assistant", "user"]


def test_auto_tool_call_then_tool_result(client: openai.OpenAI, fake_anthropic: FakeAnthropic) -> None:
    messages: list[Any] = [{"role": "user", "content": "weather in Paris?"}]
    first = client.chat.completions.create(model="claude-tool", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = client.chat.completions.create(model="claude-tool", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "tool said: sunny"
    sent = fake_anthropic.last("/v1/messages").body["messages"]
    assert sent[2]["content"] == [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]


def test_forced_tool_and_parallel_calls(client: openai.OpenAI, fake_anthropic: FakeAnthropic) -> None:
    forced = client.chat.completions.create(
        model="claude-echo",
        messages=[{"role": "user", "content": "time?"}],
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    assert forced.choices[0].message.tool_calls[0].function.name == "get_time"  # type: ignore[index]
    assert fake_anthropic.last().body["tool_choice"] == {"type": "tool", "name": "get_time"}
    both = client.chat.completions.create(
        model="claude-parallel", messages=[{"role": "user", "content": "x"}], tools=TOOLS
    )
    assert [c.function.name for c in both.choices[0].message.tool_calls or ()] == ["get_weather", "get_time"]
    one = client.chat.completions.create(
        model="claude-parallel", messages=[{"role": "user", "content": "x"}], tools=TOOLS, parallel_tool_calls=False
    )
    assert len(one.choices[0].message.tool_calls or ()) == 1
    assert fake_anthropic.last().body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


def test_streamed_parallel_tool_argument_deltas(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="claude-parallel", messages=[{"role": "user", "content": "x"}], tools=TOOLS, stream=True
    )
    calls: dict[int, dict[str, str]] = {}
    pieces = 0
    for chunk in stream:
        for tc in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
            entry = calls.setdefault(tc.index, {"name": "", "args": ""})
            entry["name"] += tc.function.name or "" if tc.function else ""
            entry["args"] += tc.function.arguments or "" if tc.function else ""
            pieces += 1
    assert {i: (c["name"], json.loads(c["args"])) for i, c in calls.items()} == {
        0: ("get_weather", {"city": "Paris"}),
        1: ("get_time", {"city": "Paris"}),
    }
    assert pieces > 4  # arguments arrived as several deltas, not one


def test_images_on_a_vision_model_and_dropped_elsewhere(client: openai.OpenAI, fake_anthropic: FakeAnthropic) -> None:
    content: Any = [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": PIXEL}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
    ]
    seen = client.chat.completions.create(model="claude-vision", messages=[{"role": "user", "content": content}])
    assert seen.choices[0].message.content == "echo: what is this images=2"
    sources = [
        b["source"]["type"] for b in fake_anthropic.last().body["messages"][0]["content"] if b["type"] == "image"
    ]
    assert sources == ["base64", "url"]
    raw = client.chat.completions.with_raw_response.create(
        model="claude-echo", messages=[{"role": "user", "content": content}]
    )
    assert raw.parse().choices[0].message.content == "echo: what is this"
    assert raw.http_response.headers["x-inferplex-dropped-params"] == "image_url"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="claude-echo", messages=[{"role": "user", "content": content}], extra_body={"drop_params": False}
        )
    assert "image_url" in err.value.message


def test_json_schema_native_and_by_forced_tool(client: openai.OpenAI, fake_anthropic: FakeAnthropic) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "json_forecast", "schema": schema, "strict": True}}
    native = client.chat.completions.create(
        model="claude-echo", messages=[{"role": "user", "content": "x"}], response_format=fmt
    )
    assert json.loads(native.choices[0].message.content or "") == {"city": "Paris", "days": 3}
    assert fake_anthropic.last().body["output_config"]["format"]["schema"] == schema
    emulated = client.chat.completions.create(
        model="claude-jsontool", messages=[{"role": "user", "content": "x"}], response_format=fmt
    )
    assert json.loads(emulated.choices[0].message.content or "") == {"city": "Paris", "days": 3}
    assert emulated.choices[0].finish_reason == "stop" and not emulated.choices[0].message.tool_calls
    sent = fake_anthropic.last().body
    assert sent["tool_choice"] == {"type": "tool", "name": "json_forecast"} and "output_config" not in sent
    stream = client.chat.completions.create(
        model="claude-jsontool", messages=[{"role": "user", "content": "x"}], response_format=fmt, stream=True
    )
    chunks = [c for c in stream if c.choices]
    assert json.loads("".join(c.choices[0].delta.content or "" for c in chunks)) == {"city": "Paris", "days": 3}
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_stop_and_max_tokens(client: openai.OpenAI, fake_anthropic: FakeAnthropic) -> None:
    stopped = client.chat.completions.create(
        model="claude-echo", messages=[{"role": "user", "content": "one two"}], stop=["two"]
    )
    assert stopped.choices[0].message.content == "echo: one " and stopped.choices[0].finish_reason == "stop"
    cut = client.chat.completions.create(
        model="claude-echo", messages=[{"role": "user", "content": "a b c d"}], max_tokens=2
    )
    assert cut.choices[0].finish_reason == "length" and fake_anthropic.last().body["max_tokens"] == 2
    client.chat.completions.create(model="claude-limited", messages=[{"role": "user", "content": "a"}])
    assert fake_anthropic.last().body["max_tokens"] == 7  # the model's configured max_output


def test_usage_counts_cached_input(client: openai.OpenAI) -> None:
    done = client.chat.completions.create(model="claude-cache", messages=[{"role": "user", "content": "hi there"}])
    usage = done.usage
    assert usage is not None and usage.prompt_tokens == 2 + 100 + 20
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 100
    assert (usage.model_extra or {})["cache_creation_input_tokens"] == 20
    last = list(
        client.chat.completions.create(
            model="claude-cache",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )[-1]
    assert last.usage is not None and last.usage.prompt_tokens == 121


def test_reasoning_content_and_refusal(client: openai.OpenAI) -> None:
    thought = client.chat.completions.create(model="claude-think", messages=[{"role": "user", "content": "x"}])
    assert (thought.choices[0].message.model_extra or {})["reasoning_content"] == "Let me think."
    refused = client.chat.completions.create(model="claude-refusal", messages=[{"role": "user", "content": "x"}])
    assert refused.choices[0].finish_reason == "content_filter"


def test_n_by_parallel_calls_counts_every_call(client: openai.OpenAI) -> None:
    """Anthropic has no `n`: the answer's usage is the sum of the n calls' (the choices are in the contract)."""
    done = client.chat.completions.create(model="claude-echo", messages=[{"role": "user", "content": "hi"}], n=3)
    assert done.usage is not None and done.usage.completion_tokens == 6
    chunks = list(
        client.chat.completions.create(
            model="claude-echo",
            messages=[{"role": "user", "content": "hi"}],
            n=2,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_unsupported_params_are_dropped_and_named_or_refused(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="claude-echo", messages=[{"role": "user", "content": "hi"}], logprobs=True, seed=3, presence_penalty=0.5
    )
    assert raw.http_response.headers["x-inferplex-dropped-params"] == "logprobs,presence_penalty,seed"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="claude-echo", messages=[{"role": "user", "content": "hi"}], seed=3, extra_body={"drop_params": False}
        )
    assert err.value.body["param"] == "seed"  # type: ignore[index]
    tools = client.chat.completions.with_raw_response.create(
        model="claude-notools", messages=[{"role": "user", "content": "hi"}], tools=TOOLS
    )
    assert tools.http_response.headers["x-inferplex-dropped-params"] == "tools"
    assert tools.parse().choices[0].message.content == "echo: hi"


def test_streaming_is_emulated_for_a_model_without_it(client: openai.OpenAI, fake_anthropic: FakeAnthropic) -> None:
    chunks = list(
        client.chat.completions.create(
            model="claude-nostream", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "echo: hi"
    assert "stream" not in fake_anthropic.last().body


def test_provider_errors_keep_their_message(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as overloaded:
        client.chat.completions.create(model="claude-529", messages=[{"role": "user", "content": "x"}])
    assert overloaded.value.body["message"] == "Overloaded"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="claude-400", messages=[{"role": "user", "content": "x"}])
    assert bad.value.body["message"] == "fake failure 400"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as rejected:  # Anthropic's own rule, its own words
        client.chat.completions.create(model="claude-echo", messages=[{"role": "assistant", "content": "hi"}])
    assert "first message must use the" in rejected.value.message


def test_an_error_event_mid_stream_keeps_anthropics_message(native_gateway: GatewayServer) -> None:
    with httpx.stream(
        "POST",
        native_gateway.base_url + "/chat/completions",
        headers=native_gateway.auth,
        json={"model": "claude-midstream", "stream": True, "messages": [{"role": "user", "content": "x"}]},
    ) as resp:
        body = resp.read().decode()
    events = [line[6:] for line in body.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["message"] == "Overloaded" and error["code"] == "upstream_overloaded"


def test_a_caller_hanging_up_on_messages_cancels_the_upstream(
    native_gateway: GatewayServer, fake_anthropic: FakeAnthropic
) -> None:
    """Anthropic's own dialect in front of it; chat completions is in the contract."""
    before = len(fake_anthropic.disconnects)
    body = {"model": "claude-slow", "stream": True, "max_tokens": 100, "messages": [{"role": "user", "content": "x"}]}
    with httpx.stream("POST", native_gateway.url + "/v1/messages", headers=native_gateway.auth, json=body) as resp:
        for line in resp.iter_lines():
            if "tick" in line:
                break
    left = time.monotonic()
    deadline = left + 3
    while len(fake_anthropic.disconnects) == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(fake_anthropic.disconnects) > before, "the upstream request was not cancelled"
    assert fake_anthropic.disconnects[-1] - left < 1.0


def test_reasoning_effort_and_openai_only_options(client: openai.OpenAI, fake_anthropic: FakeAnthropic) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="claude-think",
        messages=[{"role": "user", "content": "x"}],
        reasoning_effort="medium",
        max_completion_tokens=50,
        store=False,
        extra_body={"modalities": ["text", "audio"]},
    )
    assert (raw.parse().choices[0].message.model_extra or {})["reasoning_content"] == "Let me think."
    sent = fake_anthropic.last().body
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 8192} and sent["max_tokens"] == 8242
    assert raw.http_response.headers["x-inferplex-dropped-params"] == "modalities"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="claude-echo", messages=[{"role": "user", "content": "x"}], extra_body={"reasoning_effort": "max"}
        )
    assert err.value.body["param"] == "reasoning_effort"  # type: ignore[index]
