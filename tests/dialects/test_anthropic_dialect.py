"""`/v1/messages` driven by the official `anthropic` SDK, in front of an OpenAI-compatible upstream, an
Anthropic upstream and (when installed) the bundled local model."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

WEATHER: Any = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture
def client(native_gateway: GatewayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=native_gateway.url, api_key=native_gateway.master_key, max_retries=0)


@pytest.fixture(params=["gpt-echo", "claude-echo"])
def echo_model(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_buffered_message_on_either_upstream(client: anthropic.Anthropic, echo_model: str) -> None:
    raw = client.messages.with_raw_response.create(
        model=echo_model, max_tokens=100, messages=[{"role": "user", "content": "hello there"}]
    )
    message = raw.parse()
    assert message.type == "message" and message.role == "assistant" and message.model == echo_model
    assert message.id.startswith("msg_")
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "echo: hello there"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.usage.output_tokens == 3
    assert raw.http_response.headers["request-id"].startswith("req_")


def test_streamed_message_on_either_upstream(client: anthropic.Anthropic, echo_model: str) -> None:
    with client.messages.stream(
        model=echo_model, max_tokens=100, messages=[{"role": "user", "content": "stream me please"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "echo: stream me please"
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 4
    assert final.usage.input_tokens > 0


def test_event_grammar_is_exact(native_gateway: GatewayServer) -> None:
    with httpx.stream(
        "POST",
        native_gateway.url + "/v1/messages",
        headers={"x-api-key": native_gateway.master_key},
        json={
            "model": "claude-echo",
            "max_tokens": 50,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        },
    ) as resp:
        body = resp.read().decode()
    names = [line[7:] for line in body.splitlines() if line.startswith("event: ")]
    assert names[:4] == ["message_start", "ping", "content_block_start", "content_block_delta"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert resp.headers["content-type"].startswith("text/event-stream")


def test_system_as_string_and_as_blocks(client: anthropic.Anthropic, fake_anthropic: FakeAnthropic) -> None:
    client.messages.create(
        model="claude-echo", max_tokens=10, system="Be brief.", messages=[{"role": "user", "content": "x"}]
    )
    assert fake_anthropic.last().body["system"] == "Be brief."
    blocks: Any = [
        {"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "More."},
    ]
    client.messages.create(
        model="claude-echo", max_tokens=10, system=blocks, messages=[{"role": "user", "content": "x"}]
    )
    assert fake_anthropic.last().body["system"] == blocks  # cache_control survives the canonical middle


def test_system_blocks_reach_an_openai_upstream(client: anthropic.Anthropic, fake_openai: FakeOpenAI) -> None:
    raw = client.messages.with_raw_response.create(
        model="gpt-echo",
        max_tokens=10,
        messages=[{"role": "user", "content": "x"}],
        system=[{"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}}],
        extra_body={"top_k": 3},
    )
    sent = fake_openai.state.last().body
    assert sent["messages"][0] == {"role": "system", "content": [{"type": "text", "text": "Rules."}]}
    assert sent["max_completion_tokens"] == 10 and "top_k" not in sent
    assert raw.http_response.headers["x-inferplex-dropped-params"] == "cache_control,top_k"


@pytest.mark.parametrize("model", ["claude-tool", "gpt-tool"])
def test_tools_round_trip(client: anthropic.Anthropic, model: str, fake_openai: FakeOpenAI) -> None:
    messages: list[Any] = [{"role": "user", "content": "weather in Paris?"}]
    first = client.messages.create(model=model, max_tokens=100, messages=messages, tools=[WEATHER])
    assert first.stop_reason == "tool_use"
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "get_weather" and call.input == {"city": "Paris"}
    messages += [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]},
    ]
    second = client.messages.create(model=model, max_tokens=100, messages=messages, tools=[WEATHER])
    if model == "claude-tool":
        assert second.stop_reason == "end_turn" and second.content[0].text == "tool said: sunny"  # type: ignore[union-attr]
    else:
        sent = fake_openai.state.last().body["messages"]
        assert sent[1]["tool_calls"][0]["id"] == call.id
        assert sent[2] == {"role": "tool", "tool_call_id": call.id, "content": "sunny"}


def test_forced_tool_streamed(client: anthropic.Anthropic, fake_anthropic: FakeAnthropic) -> None:
    with client.messages.stream(
        model="claude-echo",
        max_tokens=100,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        messages=[{"role": "user", "content": "x"}],
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.type, getattr(b, "input", None)) for b in final.content] == [("tool_use", {"city": "Paris"})]
    assert fake_anthropic.last().body["tool_choice"] == {
        "type": "tool",
        "name": "get_weather",
        "disable_parallel_tool_use": True,
    }


def test_thinking_round_trips_to_an_anthropic_target(
    client: anthropic.Anthropic, fake_anthropic: FakeAnthropic
) -> None:
    thinking: Any = {"type": "enabled", "budget_tokens": 1024}
    first = client.messages.create(
        model="claude-think", max_tokens=2000, thinking=thinking, messages=[{"role": "user", "content": "x"}]
    )
    assert [b.type for b in first.content] == ["thinking", "text"]
    assert first.content[0].signature == "sig-abc"  # type: ignore[union-attr]
    client.messages.create(
        model="claude-think",
        max_tokens=2000,
        thinking=thinking,
        messages=[
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": "y"},
        ],
    )
    sent = fake_anthropic.last().body
    assert sent["thinking"] == thinking
    assert sent["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "Let me think.",
        "signature": "sig-abc",
    }
    with client.messages.stream(
        model="claude-think", max_tokens=2000, thinking=thinking, messages=[{"role": "user", "content": "x"}]
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "thinking" and final.content[0].signature == "sig-abc"


def test_cached_usage_is_reported_the_anthropic_way(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model="claude-cache", max_tokens=10, messages=[{"role": "user", "content": "a b"}])
    assert (
        message.usage.input_tokens,
        message.usage.cache_read_input_tokens,
        message.usage.cache_creation_input_tokens,
    ) == (2, 100, 20)
    with client.messages.stream(
        model="claude-cache", max_tokens=10, messages=[{"role": "user", "content": "a b"}]
    ) as stream:
        final = stream.get_final_message()
    assert (final.usage.input_tokens, final.usage.cache_read_input_tokens) == (2, 100)


def test_stop_sequences_max_tokens_and_images(client: anthropic.Anthropic, fake_anthropic: FakeAnthropic) -> None:
    cut = client.messages.create(model="claude-echo", max_tokens=2, messages=[{"role": "user", "content": "a b c"}])
    assert cut.stop_reason == "max_tokens"
    stopped = client.messages.create(
        model="claude-echo", max_tokens=20, stop_sequences=["b"], messages=[{"role": "user", "content": "a b c"}]
    )
    assert fake_anthropic.last().body["stop_sequences"] == ["b"]
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", "b")
    with client.messages.stream(
        model="claude-echo", max_tokens=20, stop_sequences=["b"], messages=[{"role": "user", "content": "a b c"}]
    ) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "b")
    plain = client.messages.create(
        model="gpt-echo", max_tokens=20, stop_sequences=["zzz"], messages=[{"role": "user", "content": "a"}]
    )
    assert (plain.stop_reason, plain.stop_sequence) == ("end_turn", None)
    image: Any = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    seen = client.messages.create(
        model="claude-vision",
        max_tokens=20,
        messages=[{"role": "user", "content": [image, {"type": "text", "text": "what"}]}],
    )
    assert seen.content[0].text == "echo: what images=1"  # type: ignore[union-attr]
    assert fake_anthropic.last().body["messages"][0]["content"][0] == image


def test_both_auth_styles(native_gateway: GatewayServer) -> None:
    bearer = anthropic.Anthropic(base_url=native_gateway.url, auth_token=native_gateway.master_key, max_retries=0)
    assert bearer.messages.create(model="gpt-echo", max_tokens=5, messages=[{"role": "user", "content": "x"}]).content
    wrong = anthropic.Anthropic(base_url=native_gateway.url, api_key="nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as err:
        wrong.messages.create(model="gpt-echo", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert err.value.body["type"] == "error"  # type: ignore[index]
    assert err.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


def test_errors_in_anthropic_shape(client: anthropic.Anthropic, native_gateway: GatewayServer) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(
            model="no-such-model", max_tokens=5, messages=[{"role": "user", "content": "x"}], stream=True
        )
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    resp = httpx.post(
        native_gateway.url + "/v1/messages",
        headers={"x-api-key": native_gateway.master_key},
        json={"model": "gpt-echo", "messages": [{"role": "user", "content": "x"}]},
    )
    assert resp.status_code == 400 and resp.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in resp.json()["error"]["message"]
    with pytest.raises(anthropic.APIStatusError) as overloaded:
        client.messages.create(model="claude-529", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert overloaded.value.status_code == 529
    assert overloaded.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with pytest.raises(anthropic.RateLimitError) as limited:
        client.messages.create(model="claude-429", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert limited.value.response.headers["retry-after"] == "7"
    unknown = httpx.get(native_gateway.url + "/v1/messages/nope", headers={"x-api-key": native_gateway.master_key})
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", True),
        ("temperature", True),
        ("top_p", True),
        ("top_k", True),
        ("top_k", "5"),
        ("stream", "true"),
        ("stream", 1),
    ],
)
@pytest.mark.parametrize("model", ["gpt-echo", "claude-echo"])
def test_wrong_json_types_are_refused_as_anthropic_refuses_them(
    native_gateway: GatewayServer, model: str, field: str, value: Any
) -> None:
    """Anthropic's API refuses `true` for a number (and a number for a boolean); so does the gateway,
    instead of reading true as 1."""
    body = {"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], field: value}
    resp = httpx.post(native_gateway.url + "/v1/messages", headers={"x-api-key": native_gateway.master_key}, json=body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["type"] == "invalid_request_error" and field in resp.json()["error"]["message"]
    assert client_still_accepts_a_whole_number_temperature(native_gateway, model)


def client_still_accepts_a_whole_number_temperature(gw: GatewayServer, model: str) -> bool:
    body = {"model": model, "max_tokens": 5, "temperature": 1, "messages": [{"role": "user", "content": "x"}]}
    return httpx.post(gw.url + "/v1/messages", headers={"x-api-key": gw.master_key}, json=body).status_code == 200


def test_error_after_the_first_byte_is_an_error_event(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as err:  # the SDK raises on `event: error`
        with client.messages.stream(
            model="claude-midstream", max_tokens=50, messages=[{"role": "user", "content": "x"}]
        ) as stream:
            for _ in stream:
                pass
    assert "Overloaded" in str(err.value)


def test_count_tokens(client: anthropic.Anthropic, fake_anthropic: FakeAnthropic) -> None:
    upstream = client.messages.count_tokens(model="claude-echo", messages=[{"role": "user", "content": "one two"}])
    sent = fake_anthropic.last("/count_tokens").body
    assert upstream.input_tokens == 9 and sent["model"] == "claude-echo-1" and "max_tokens" not in sent
    estimate = client.messages.count_tokens(
        model="gpt-echo", system="s" * 40, tools=[WEATHER], messages=[{"role": "user", "content": "x" * 400}]
    )
    assert 100 < estimate.input_tokens < 200


def test_json_output_through_output_config(client: anthropic.Anthropic) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": False}
    for model in ("claude-echo", "claude-jsontool"):
        message = client.messages.create(
            model=model,
            max_tokens=50,
            messages=[{"role": "user", "content": "x"}],
            extra_body={"output_config": {"format": {"type": "json_schema", "schema": schema}}},
        )
        assert json.loads(message.content[0].text) == {"city": "Paris"}  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def local_gateway() -> Iterator[GatewayServer]:
    if importlib.util.find_spec("inferplex.providers.local") is None or importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("the bundled local model provider is not installed")
    config = {
        "providers": [{"name": "local", "kind": "local"}],
        "models": [{"name": "smollm2-135m", "deployments": [{"provider": "local", "model": "smollm2-135m-instruct"}]}],
    }
    with GatewayServer(config) as server:
        yield server


def test_bundled_local_model(local_gateway: GatewayServer) -> None:
    client = anthropic.Anthropic(base_url=local_gateway.url, api_key=local_gateway.master_key, max_retries=0)
    message = client.messages.create(
        model="smollm2-135m",
        max_tokens=8,
        system="Answer briefly.",
        messages=[{"role": "user", "content": "Say hello."}],
    )
    assert message.content and message.content[0].type == "text" and message.usage.output_tokens > 0
    assert message.stop_reason in ("end_turn", "max_tokens")
    with client.messages.stream(
        model="smollm2-135m", max_tokens=8, messages=[{"role": "user", "content": "Count to three."}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.usage.output_tokens > 0


def test_anthropic_only_features_reach_an_anthropic_target(
    client: anthropic.Anthropic, fake_anthropic: FakeAnthropic, fake_openai: FakeOpenAI
) -> None:
    search: Any = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}
    client.beta.messages.create(
        model="claude-echo",
        max_tokens=20,
        messages=[{"role": "user", "content": "x"}],
        tools=[WEATHER, search],
        betas=["context-1m-2025-08-07"],
        extra_body={"service_tier": "standard_only", "container": "ctr_1"},
    )
    sent = fake_anthropic.last()
    assert sent.body["tools"][1] == search and sent.body["tools"][0]["name"] == "get_weather"
    assert sent.body["service_tier"] == "standard_only" and sent.body["container"] == "ctr_1"
    assert sent.headers["anthropic-beta"] == "context-1m-2025-08-07"
    raw = client.beta.messages.with_raw_response.create(
        model="gpt-echo",
        max_tokens=20,
        messages=[{"role": "user", "content": "x"}],
        tools=[WEATHER, search],
        betas=["context-1m-2025-08-07"],
    )
    assert raw.http_response.headers["x-inferplex-dropped-params"] == "anthropic-beta,server_tools"
    assert [t["function"]["name"] for t in fake_openai.state.last().body["tools"]] == ["get_weather"]


@pytest.mark.parametrize("model", ["gpt-tool", "claude-tool", "gemini-tool", "bedrock-tool"])
def test_streamed_tool_use_from_every_kind_of_upstream(client: anthropic.Anthropic, model: str) -> None:
    with client.messages.stream(
        model=model, max_tokens=100, tools=[WEATHER], messages=[{"role": "user", "content": "weather?"}]
    ) as stream:
        final = stream.get_final_message()
    calls = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and calls[0].name == "get_weather" and calls[0].input == {"city": "Paris"}
    assert final.usage.output_tokens > 0


@pytest.mark.parametrize(("model", "dropped"), [("bedrock-think", None), ("bedrock-llama", "top_k")])
def test_top_k_is_honoured_only_where_the_family_takes_it(
    client: anthropic.Anthropic, model: str, dropped: str | None
) -> None:
    raw = client.messages.with_raw_response.create(
        model=model, max_tokens=20, messages=[{"role": "user", "content": "x"}], extra_body={"top_k": 3}
    )
    assert raw.http_response.headers.get("x-inferplex-dropped-params") == dropped
