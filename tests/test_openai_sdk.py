"""The OpenAI dialect driven by the official `openai` SDK, in front of a fake upstream that validates."""

from __future__ import annotations

import base64
import struct

import httpx
import openai
import pytest

from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


@pytest.fixture
def client(gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=gateway.master_key, max_retries=0)


@pytest.fixture
def aclient(gateway: GatewayServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gateway.base_url, api_key=gateway.master_key, max_retries=0)


def test_buffered_chat_has_openai_shape_and_timings(client: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="echo-model", messages=[{"role": "user", "content": "hello world"}], temperature=0.2
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "echo: hello world"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "echo-model"
    assert completion.usage is not None and completion.usage.total_tokens == 5
    body = raw.http_response.json()
    choice = body["choices"][0]
    assert set(choice) >= {"index", "message", "finish_reason", "logprobs"}
    assert set(choice["message"]) >= {"role", "content", "refusal"}
    timings = body["timings"]
    assert timings["total_ms"] >= timings["upstream_ms"] > 0
    assert "gateway_ms" in timings and timings["tokens_per_second"] > 0
    headers = raw.http_response.headers
    assert headers["x-inferplex-provider"] == "fake"
    assert headers["x-inferplex-model"] == "gpt-echo"
    assert headers["x-inferplex-request-id"].startswith("req_")
    sent = fake_openai.state.last()
    assert sent.body["model"] == "gpt-echo"
    assert sent.body["temperature"] == 0.2
    assert sent.headers["Authorization"] == "Bearer sk-fake-upstream"


def test_every_documented_request_field_and_unknown_fields_pass_through(
    client: openai.OpenAI, fake_openai: FakeOpenAI
) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "w",
                "parameters": {"type": "object", "properties": {}},
                "strict": True,
            },
        }
    ]
    client.chat.completions.create(
        model="echo-model",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": "really brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                ],
                "name": "ann",
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "user", "content": "thanks"},
        ],
        max_completion_tokens=50,
        max_tokens=40,
        top_p=0.9,
        stop=["\n\n", "END"],
        n=1,
        seed=7,
        tools=tools,
        tool_choice="auto",
        parallel_tool_calls=False,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object"}, "strict": True},
        },
        logprobs=True,
        top_logprobs=2,
        logit_bias={"50256": -100},
        frequency_penalty=0.5,
        presence_penalty=-0.5,
        user="u-1",
        metadata={"team": "a"},
        service_tier="auto",
        extra_body={"some_vendor_field": {"nested": [1, 2]}, "top_k": 40},
    )
    sent = fake_openai.state.last().body
    assert sent["some_vendor_field"] == {"nested": [1, 2]} and sent["top_k"] == 40
    assert sent["tools"] == tools and sent["parallel_tool_calls"] is False
    assert sent["messages"][1]["role"] == "developer"
    assert sent["messages"][2]["content"][1]["image_url"]["url"] == "https://x/y.png"
    assert sent["logit_bias"] == {"50256": -100} and sent["stop"] == ["\n\n", "END"]
    assert sent["response_format"]["json_schema"]["strict"] is True
    assert sent["metadata"] == {"team": "a"} and sent["service_tier"] == "auto"


def test_stream_without_include_usage_hides_usage_chunk_but_upstream_was_asked(
    client: openai.OpenAI, fake_openai: FakeOpenAI
) -> None:
    chunks = list(
        client.chat.completions.create(
            model="echo-model", messages=[{"role": "user", "content": "one two three"}], stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: one two three"
    assert all(c.choices for c in chunks), "the usage-only chunk must be stripped"
    assert all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert fake_openai.state.last().body["stream_options"] == {"include_usage": True}


def test_stream_with_include_usage_ends_with_usage_chunk_and_timings(gateway: GatewayServer) -> None:
    with httpx.stream(
        "POST",
        gateway.base_url + "/chat/completions",
        headers=gateway.auth,
        json={
            "model": "echo-model",
            "messages": [{"role": "user", "content": "a b"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["x-inferplex-provider"] == "fake"
        lines = [line for line in resp.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    import json

    last = json.loads(lines[-2][6:])
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 3
    assert last["timings"]["ttft_ms"] > 0 and last["timings"]["total_ms"] >= last["timings"]["ttft_ms"]


async def test_async_client_buffered_and_streamed(aclient: openai.AsyncOpenAI) -> None:
    done = await aclient.chat.completions.create(model="echo-model", messages=[{"role": "user", "content": "hi"}])
    assert done.choices[0].message.content == "echo: hi"
    stream = await aclient.chat.completions.create(
        model="echo-model",
        messages=[{"role": "user", "content": "hi there"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    parts, usage = [], None
    async for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
        if chunk.usage:
            usage = chunk.usage
    assert "".join(parts) == "echo: hi there"
    assert usage is not None and usage.completion_tokens == 3


def test_tool_call_buffered_and_streamed_argument_deltas(client: openai.OpenAI) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    done = client.chat.completions.create(
        model="tool-model", messages=[{"role": "user", "content": "weather?"}], tools=tools, tool_choice="required"
    )
    call = done.choices[0].message.tool_calls[0]
    assert done.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and call.function.arguments == '{"city": "Paris"}'
    args = ""
    with client.chat.completions.stream(
        model="tool-model", messages=[{"role": "user", "content": "weather?"}], tools=tools
    ) as stream:
        for event in stream:
            if event.type == "tool_calls.function.arguments.delta":
                args += event.arguments_delta
        final = stream.get_final_completion()
    assert args == '{"city": "Paris"}'
    assert final.choices[0].message.tool_calls[0].function.arguments == '{"city": "Paris"}'


def test_embeddings_float_and_base64(client: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    floats = client.embeddings.create(model="embed-model", input=["abc", "hello"], encoding_format="float")
    assert [d.embedding for d in floats.data] == [[3.0, 0.0, 0.5], [5.0, 1.0, 0.5]]
    assert floats.model == "embed-model"
    assert fake_openai.state.last("/embeddings").body["model"] == "text-embedding-fake"
    raw = client.embeddings.with_raw_response.create(
        model="embed-model", input="abc", encoding_format="base64"
    ).http_response.json()
    decoded = struct.unpack("<3f", base64.b64decode(raw["data"][0]["embedding"]))
    assert list(decoded) == [3.0, 0.0, 0.5]
    # The SDK's default asks for base64 and decodes it itself: the result must equal the float one.
    default = client.embeddings.create(model="embed-model", input="abc")
    assert default.data[0].embedding == [3.0, 0.0, 0.5]


@pytest.mark.parametrize(
    "model,extra",
    [
        ("echo-model@fake", {}),
        ("fake/echo-model", {}),
        ("echo-model", {"provider": "fake"}),
        ("gpt-echo", {"provider": "fake"}),
    ],
)
def test_model_addressing_styles(
    client: openai.OpenAI, fake_openai: FakeOpenAI, model: str, extra: dict[str, str]
) -> None:
    done = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], extra_body=extra)
    assert done.choices[0].message.content == "echo: x"
    sent = fake_openai.state.last().body
    assert sent["model"] == "gpt-echo" and "provider" not in sent


def test_models_list_and_get(client: openai.OpenAI, gateway: GatewayServer) -> None:
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert "echo-model" in ids and "embed-model" in ids
    card = httpx.get(gateway.base_url + "/models/echo-model", headers=gateway.auth).json()
    assert card["object"] == "model" and card["owned_by"] == "fake"
    assert card["context_window"] == 8192 and card["pricing"]["input"] == "0.15"
    assert {"display_name", "description", "capabilities"} <= set(card)
    assert client.models.retrieve("echo-model").id == "echo-model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")


def test_endpoints_list(gateway: GatewayServer) -> None:
    rows = httpx.get(gateway.base_url + "/endpoints", headers=gateway.auth).json()["data"]
    echo = next(r for r in rows if r["id"] == "echo-model@fake")
    assert echo["pricing"]["output"] == "0.60" and echo["upstream_model"] == "gpt-echo"
    filtered = httpx.get(gateway.base_url + "/endpoints?model=embed-model", headers=gateway.auth).json()["data"]
    assert [r["id"] for r in filtered] == ["embed-model@fake"]


def test_health_needs_no_key(gateway: GatewayServer) -> None:
    assert httpx.get(gateway.url + "/health").json() == {"status": "ok"}


IMAGE_MESSAGE = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
        ],
    }
]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def test_text_only_model_drops_images_and_tools_and_names_them(client: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="text-only", messages=IMAGE_MESSAGE, tools=TOOLS)
    assert raw.http_response.headers["x-inferplex-dropped-params"] == "image_url,tools"
    sent = fake_openai.state.last().body
    assert sent["messages"][0]["content"] == [{"type": "text", "text": "what is this"}]
    assert "tools" not in sent
    assert raw.parse().choices[0].message.content == "echo: what is this"


def test_text_only_model_refuses_when_drop_params_is_false(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="text-only", messages=IMAGE_MESSAGE, extra_body={"drop_params": False})
    assert caught.value.body["param"] == "image_url"  # type: ignore[index]
