"""What is Gemini's own, end to end: the official `openai` SDK -> gateway -> a fake Gemini that validates.

Its key header, systemInstruction and generationConfig, `alt=sse`, function calls and thought signatures,
inline images, JSON schema, safety finishes, cached-input usage, thoughts, its error bodies and what it
cannot take. What every kind owes a caller (streaming, an unknown finish reason, 429, overload, a mid-stream
failure, hang-up, drop_params, n) is in test_contract.py.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.fakes.gemini_upstream import FakeGemini
from tests.gateway_server import GatewayServer

TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {"type": "function", "function": {"name": "get_time"}},
]


@pytest.fixture
def client(native_gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=native_gateway.base_url, api_key=native_gateway.master_key, max_retries=0)


def test_buffered_and_streamed(client: openai.OpenAI, fake_gemini: FakeGemini) -> None:
    done = client.chat.completions.create(
        model="gemini-echo",
        max_tokens=50,
        temperature=0.1,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello world"}],
    )
    assert done.choices[0].message.content == "echo: hello world" and done.choices[0].finish_reason == "stop"
    sent = fake_gemini.last(":generateContent")
    assert sent.headers["x-goog-api-key"] == "gm-fake"
    assert sent.body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert sent.body["generationConfig"] == {"temperature": 0.1, "maxOutputTokens": 50}
    chunks = list(
        client.chat.completions.create(
            model="gemini-echo",
            messages=[{"role": "user", "content": "a b c"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: a b c"
    assert fake_gemini.last(":streamGenerateContent").query == {"alt": "sse"}
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_tools_multi_turn_and_parallel(client: openai.OpenAI, fake_gemini: FakeGemini) -> None:
    messages: list[Any] = [{"role": "user", "content": "weather?"}]
    first = client.chat.completions.create(model="gemini-tool", messages=messages, tools=TOOLS)
    call = (first.choices[0].message.tool_calls or [])[0]
    assert first.choices[0].finish_reason == "tool_calls" and json.loads(call.function.arguments) == {"city": "Paris"}
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = client.chat.completions.create(model="gemini-tool", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "tool said: sunny"
    forced = client.chat.completions.create(
        model="gemini-echo",
        messages=[{"role": "user", "content": "x"}],
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    assert (forced.choices[0].message.tool_calls or [])[0].function.name == "get_time"
    stream = client.chat.completions.create(
        model="gemini-tool-parallel", messages=[{"role": "user", "content": "x"}], tools=TOOLS, stream=True
    )
    calls = [tc for c in stream if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert [(tc.index, tc.function.name) for tc in calls if tc.function] == [(0, "get_weather"), (1, "get_time")]
    raw = client.chat.completions.with_raw_response.create(
        model="gemini-tool", messages=[{"role": "user", "content": "x"}], tools=TOOLS, parallel_tool_calls=False
    )
    assert raw.http_response.headers["x-inferplex-dropped-params"] == "parallel_tool_calls"


def test_thought_signatures_survive_the_round_trip(client: openai.OpenAI, fake_gemini: FakeGemini) -> None:
    messages: list[Any] = [{"role": "user", "content": "weather?"}]
    first = client.chat.completions.create(model="gemini-tool-sig", messages=messages, tools=TOOLS)
    call = (first.choices[0].message.tool_calls or [])[0]
    assert (call.model_extra or {})["extra_content"] == {"google": {"thought_signature": "c2lnbmF0dXJl"}}
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = client.chat.completions.create(model="gemini-tool-sig", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "tool said: sunny"
    assert fake_gemini.last().body["contents"][1]["parts"][0]["thoughtSignature"] == "c2lnbmF0dXJl"
    # a call that lost its signature (or that another provider made) goes with Google's placeholder
    unsigned: list[Any] = [
        {**m, "tool_calls": [{**c, "extra_content": None} for c in m["tool_calls"]]} if "tool_calls" in m else m
        for m in messages
    ]
    third = client.chat.completions.create(model="gemini-tool-sig", messages=unsigned, tools=TOOLS)
    assert third.choices[0].message.content == "tool said: sunny"
    assert fake_gemini.last().body["contents"][1]["parts"][0]["thoughtSignature"] == "skip_thought_signature_validator"
    # a signature Gemini did not make is refused, as Gemini refuses it
    forged: list[Any] = [
        {
            **m,
            "tool_calls": [
                {**c, "extra_content": {"google": {"thought_signature": "Zm9yZ2Vk"}}} for c in m["tool_calls"]
            ],
        }
        if "tool_calls" in m
        else m
        for m in messages
    ]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="gemini-tool-sig", messages=forged, tools=TOOLS)
    assert "thought signature" in err.value.body["message"]  # type: ignore[index]


def test_images_and_json_schema(client: openai.OpenAI, fake_gemini: FakeGemini) -> None:
    content: Any = [
        {"type": "text", "text": "what"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    client.chat.completions.create(model="gemini-echo", messages=[{"role": "user", "content": content}])
    assert fake_gemini.last().body["contents"][0]["parts"][1] == {
        "inlineData": {"mimeType": "image/png", "data": "AAAA"}
    }
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": False}
    done = client.chat.completions.create(
        model="gemini-echo",
        messages=[{"role": "user", "content": "x"}],
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
    )
    assert json.loads(done.choices[0].message.content or "") == {"city": "Paris"}


def test_safety_cache_and_reasoning(client: openai.OpenAI) -> None:
    assert (
        client.chat.completions.create(model="gemini-safety", messages=[{"role": "user", "content": "x"}])
        .choices[0]
        .finish_reason
        == "content_filter"
    )
    assert (
        client.chat.completions.create(model="gemini-blocked", messages=[{"role": "user", "content": "x"}])
        .choices[0]
        .finish_reason
        == "content_filter"
    )
    chunks = list(
        client.chat.completions.create(model="gemini-safety", messages=[{"role": "user", "content": "x"}], stream=True)
    )
    assert chunks[-1].choices[0].finish_reason == "content_filter"
    cached = client.chat.completions.create(model="gemini-cache", messages=[{"role": "user", "content": "x"}])
    assert cached.usage is not None and cached.usage.prompt_tokens_details is not None
    assert cached.usage.prompt_tokens == 51 and cached.usage.prompt_tokens_details.cached_tokens == 50
    thought = client.chat.completions.create(model="gemini-think", messages=[{"role": "user", "content": "x"}])
    assert (thought.choices[0].message.model_extra or {})["reasoning_content"] == "Thinking it over."


def test_errors_keep_geminis_message(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as overloaded:
        client.chat.completions.create(model="gemini-error-503", messages=[{"role": "user", "content": "x"}])
    assert overloaded.value.body["message"] == "The model is overloaded. Please try again later."  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model="gemini-error-400", messages=[{"role": "user", "content": "x"}], stream=True
        )
    assert bad.value.body["message"] == "fake 400"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="gemini-echo",
            messages=[{"role": "user", "content": "x"}],
            logprobs=True,
            extra_body={"drop_params": False},
        )
