"""What is the bundled local models' own, through HTTP with the official OpenAI SDK: the default config, no key.

The chat template's tokens counted, streams token by token that match a buffered call, exact max_tokens and
stop, seeds, the context window, grammar-constrained tool calls and JSON, embeddings, the event loop kept
free, hang-up stopping the generation, and queueing. What every kind owes a caller (buffered, streamed with
usage last, drop_params, n) is in test_contract.py.

These run the real SmolLM2-135M (llama.cpp) and all-MiniLM-L6-v2 shipped by `make test`'s install, so they
need no network. Generations are kept short so that the whole file stays well under a minute and a half.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from inferplex.defaults import DEFAULT_CHAT_MODEL, DEFAULT_CONFIG, DEFAULT_EMBEDDING_MODEL
from tests.gateway_server import GatewayServer

CHAT = DEFAULT_CHAT_MODEL
EMBED = DEFAULT_EMBEDDING_MODEL
STORY: Any = [{"role": "user", "content": "Write a long story about a dragon who lives in a castle."}]
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def local_gateway() -> Iterator[GatewayServer]:
    with GatewayServer(DEFAULT_CONFIG) as server:
        yield server


@pytest.fixture(scope="module")
def client(local_gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=local_gateway.base_url, api_key=local_gateway.master_key, max_retries=0)


def test_chat_buffered_counts_the_chat_template(client: openai.OpenAI) -> None:
    """Three words of prompt, but the template's default system prompt is counted too."""
    r = client.chat.completions.create(
        model=CHAT, messages=[{"role": "user", "content": "Say hello."}], max_tokens=16, seed=1
    )
    assert r.model == CHAT
    assert r.usage is not None and r.usage.prompt_tokens > 10 and 0 < r.usage.completion_tokens <= 16


def test_stream_matches_buffered_and_reports_usage(client: openai.OpenAI) -> None:
    args: Any = {"model": CHAT, "messages": STORY, "max_tokens": 12, "seed": 11, "temperature": 0.8}
    buffered = client.chat.completions.create(**args)
    chunks = list(client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == buffered.choices[0].message.content
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 3  # token by token
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [buffered.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == buffered.usage.completion_tokens


def test_max_tokens_gives_length_and_exact_count(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model=CHAT, messages=STORY, max_tokens=7, temperature=0)
    assert r.choices[0].finish_reason == "length"
    assert r.usage is not None and r.usage.completion_tokens == 7
    r = client.chat.completions.create(model=CHAT, messages=STORY, max_completion_tokens=5, temperature=0)
    assert r.choices[0].finish_reason == "length" and r.usage is not None and r.usage.completion_tokens == 5


def test_stop_sequence_is_honoured(client: openai.OpenAI) -> None:
    args: Any = {"model": CHAT, "messages": STORY, "max_tokens": 24, "temperature": 0}
    full = client.chat.completions.create(**args).choices[0].message.content or ""
    words = full.split()
    assert len(words) > 4, full
    stop = words[3]
    cut = client.chat.completions.create(**args, stop=[stop, "zzzz-never"])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == full[: full.index(stop)]


def test_same_seed_same_text(client: openai.OpenAI) -> None:
    args: Any = {"model": CHAT, "messages": STORY, "max_tokens": 16, "temperature": 1.0, "seed": 1234}
    a = client.chat.completions.create(**args).choices[0].message.content
    b = client.chat.completions.create(**args).choices[0].message.content
    assert a == b


def test_context_overflow_is_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "hello " * 9000}])
    body: Any = err.value.body
    assert err.value.status_code == 400
    assert body["code"] == "context_length_exceeded" and body["param"] == "messages"
    assert "8192" in body["message"]


def test_tool_call_has_valid_arguments(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=CHAT,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL],
        tool_choice="required",
        max_tokens=64,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    call: Any = (choice.message.tool_calls or [])[0]
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert isinstance(json.loads(call.function.arguments)["city"], str)
    # Streamed, the call arrives as a tool_calls delta.
    chunks = list(
        client.chat.completions.create(
            model=CHAT,
            messages=[{"role": "user", "content": "Weather in Rome?"}],
            tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=64,
            stream=True,
        )
    )
    deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert len(deltas) == 1 and deltas[0].function is not None
    assert isinstance(json.loads(deltas[0].function.arguments or "")["city"], str)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_json_schema_output_is_valid(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model=CHAT,
        messages=[{"role": "user", "content": "Invent a person."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
        max_tokens=64,
        seed=3,
    )
    data = json.loads(r.choices[0].message.content or "")
    assert set(data) == {"name", "age"} and isinstance(data["name"], str) and isinstance(data["age"], int)


def _cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_embeddings_rank_paraphrase_first(client: openai.OpenAI) -> None:
    texts = ["A man is playing a guitar.", "Someone plays an acoustic guitar.", "The stock market fell sharply today."]
    r = client.embeddings.create(model=EMBED, input=texts, encoding_format="float")
    vectors = [d.embedding for d in sorted(r.data, key=lambda d: d.index)]
    assert [len(v) for v in vectors] == [384, 384, 384]
    assert abs(float(np.linalg.norm(vectors[0])) - 1.0) < 1e-4
    assert _cos(vectors[0], vectors[1]) > _cos(vectors[0], vectors[2]) + 0.2
    assert r.usage.prompt_tokens == r.usage.total_tokens > 10


def test_embeddings_base64_equals_float(local_gateway: GatewayServer) -> None:
    body = {"model": EMBED, "input": ["hello world", "bonjour"]}
    url = local_gateway.base_url + "/embeddings"
    floats = httpx.post(url, json={**body, "encoding_format": "float"}, headers=local_gateway.auth).json()
    packed = httpx.post(url, json={**body, "encoding_format": "base64"}, headers=local_gateway.auth).json()
    for f, p in zip(floats["data"], packed["data"], strict=True):
        decoded = np.frombuffer(base64.b64decode(p["embedding"]), dtype="<f4")
        assert np.array_equal(decoded, np.asarray(f["embedding"], dtype=np.float32))
    tokens = httpx.post(url, json={"model": EMBED, "input": [[1, 2, 3]]}, headers=local_gateway.auth)
    assert tokens.status_code == 400 and tokens.json()["error"]["param"] == "input"


def test_event_loop_stays_responsive_and_disconnect_stops(client: openai.OpenAI, local_gateway: GatewayServer) -> None:
    started = threading.Event()
    stream = client.chat.completions.create(model=CHAT, messages=STORY, max_tokens=2000, stream=True, temperature=0)

    def consume() -> None:
        for i, _ in enumerate(stream):
            started.set()
            if i > 60:
                break

    reader = threading.Thread(target=consume)
    reader.start()
    assert started.wait(30)
    latencies = []
    with httpx.Client() as http:
        http.get(local_gateway.url + "/health")  # connection set up outside the measurement
        for _ in range(10):
            t0 = time.perf_counter()
            assert http.get(local_gateway.url + "/health").status_code == 200
            latencies.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.02)
    reader.join(60)
    stream.close()  # the client leaves after ~60 of 2000 tokens
    assert max(latencies) < 50, latencies
    # The abandoned generation stops at its next token, so the next request hardly waits for the model.
    t0 = time.perf_counter()
    r = client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert r.choices[0].message.content is not None
    assert time.perf_counter() - t0 < 5


def test_waiting_for_the_model_is_reported_as_queued(local_gateway: GatewayServer) -> None:
    body = {"model": CHAT, "messages": STORY, "max_tokens": 24, "temperature": 0}
    results: dict[str, httpx.Response] = {}

    def call(name: str) -> None:
        results[name] = httpx.post(
            local_gateway.base_url + "/chat/completions", json=body, headers=local_gateway.auth, timeout=120
        )

    first = threading.Thread(target=call, args=("first",))
    first.start()
    time.sleep(0.05)
    call("second")
    first.join(30)
    assert results["first"].status_code == results["second"].status_code == 200
    queued = float(results["second"].headers["x-inferplex-queued-ms"])
    assert queued > 20
    timings = results["second"].json()["timings"]
    assert timings["queued_ms"] == pytest.approx(queued, abs=0.01)
    assert timings["total_ms"] >= timings["queued_ms"] + timings["upstream_ms"]
