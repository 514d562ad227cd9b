"""The exact cache through HTTP with the official SDKs: a repeated request is answered from the cache, for
the caller who stored it and no one else, and only complete answers are stored."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import httpx
import orjson

from tests.accounts.conftest import Admin
from tests.cache.conftest import chat, client, sse_frames, unique, upstream_calls
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


def test_a_repeated_chat_request_is_a_hit(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique()
    sdk = client(server)
    first = sdk.chat.completions.with_raw_response.create(model="priced", messages=[{"role": "user", "content": text}])
    second = sdk.chat.completions.with_raw_response.create(model="priced", messages=[{"role": "user", "content": text}])
    assert upstream_calls(fake_openai, text) == 1
    assert first.headers["x-inferplex-cache"] == "miss" and second.headers["x-inferplex-cache"] == "hit"
    assert first.headers["x-inferplex-cache-entry"] == second.headers["x-inferplex-cache-entry"]
    a, b = first.parse(), second.parse()
    assert a.choices[0].message.content == b.choices[0].message.content == f"echo: {text}"
    assert a.id == b.id and a.usage == b.usage and b.choices[0].finish_reason == "stop"
    timings = orjson.loads(second.http_response.content)["timings"]
    assert timings["cache"] == "hit" and timings["cache_ms"] >= 0 and timings["upstream_ms"] == 0
    assert orjson.loads(first.http_response.content)["timings"]["cache"] == "miss"


def test_a_repeated_embedding_request_is_a_hit(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique("embed")
    sdk = client(server)
    first = sdk.embeddings.with_raw_response.create(model="embed-model", input=[text, "two"])
    second = sdk.embeddings.with_raw_response.create(model="embed-model", input=[text, "two"])
    assert upstream_calls(fake_openai, text) == 1
    assert (first.headers["x-inferplex-cache"], second.headers["x-inferplex-cache"]) == ("miss", "hit")
    a, b = first.parse(), second.parse()
    assert [d.embedding for d in a.data] == [d.embedding for d in b.data] and a.usage == b.usage
    assert orjson.loads(second.http_response.content)["timings"]["cache"] == "hit"
    other = sdk.embeddings.with_raw_response.create(model="embed-model", input=[text])
    assert other.headers["x-inferplex-cache"] == "miss"  # another input is another entry


def test_field_order_and_default_values_make_the_same_entry(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique()
    messages = [{"role": "user", "content": text}]
    r1 = httpx.post(
        server.base_url + "/chat/completions",
        content=orjson.dumps({"model": "priced", "messages": messages}),
        headers={**server_auth(server), "content-type": "application/json"},
        timeout=30,
    )
    r2 = httpx.post(
        server.base_url + "/chat/completions",
        content=orjson.dumps(
            {"messages": messages, "temperature": 1, "n": 1, "top_p": 1.0, "presence_penalty": 0, "model": "priced"}
        ),
        headers={**server_auth(server), "content-type": "application/json"},
        timeout=30,
    )
    r3 = chat(server, text, user="someone-else", frequency_penalty=0)
    assert [r.headers["x-inferplex-cache"] for r in (r1, r2, r3)] == ["miss", "hit", "hit"]
    assert len({r.headers["x-inferplex-cache-entry"] for r in (r1, r2, r3)}) == 1
    r4 = chat(server, text, temperature=0.2)  # a value that changes the answer is another entry
    assert r4.headers["x-inferplex-cache"] == "miss"
    assert upstream_calls(fake_openai, text) == 2


def server_auth(server: GatewayServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.master_key}"}


def _frames_without_gateway_values(frames: list[str]) -> list[Any]:
    """The SSE payloads with what is measured per request (timings, cost) taken out."""
    out: list[Any] = []
    for frame in frames:
        if frame == "[DONE]":
            out.append(frame)
            continue
        data = orjson.loads(frame)
        data.pop("timings", None)
        data.pop("cost", None)
        out.append(data)
    return out


def test_a_stream_is_replayed_with_the_same_framing(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique("stream these words")
    for usage in (True, False):
        extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if usage else {}
        r1, miss = sse_frames(server, text, **extra)
        r2, hit = sse_frames(server, text, **extra)
        assert r2.headers["x-inferplex-cache"] == "hit" and r2.headers["content-type"].startswith("text/event-stream")
        assert len(miss) == len(hit) and miss[-1] == hit[-1] == "[DONE]"
        assert _frames_without_gateway_values(miss) == _frames_without_gateway_values(hit)
        last = orjson.loads(hit[-2])
        assert last["timings"]["cache"] == "hit"
        if usage:
            assert last["usage"]["completion_tokens"] == 5 and last["choices"] == []
        else:
            assert all("usage" not in orjson.loads(f) for f in hit[:-1])
    # one upstream call: include_usage does not change the entry, the gateway always asks the upstream for usage
    assert r1.headers["x-inferplex-cache"] == "hit" and upstream_calls(fake_openai, text) == 1


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def test_a_streamed_tool_call_is_replayed_with_the_same_framing(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique("weather in Paris")
    extra: dict[str, Any] = {"model": "tool-model", "tools": [WEATHER], "stream_options": {"include_usage": True}}
    _, miss = sse_frames(server, text, **extra)
    r, hit = sse_frames(server, text, **extra)
    assert r.headers["x-inferplex-cache"] == "hit"
    assert _frames_without_gateway_values(miss) == _frames_without_gateway_values(hit)
    calls = [orjson.loads(f)["choices"][0]["delta"].get("tool_calls") for f in hit[:-1] if orjson.loads(f)["choices"]]
    assert "".join(c[0]["function"].get("arguments", "") for c in calls if c) == '{"city": "Paris"}'
    assert upstream_calls(fake_openai, text) == 1


def test_a_streamed_and_a_buffered_request_are_separate_entries(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique()
    sse_frames(server, text)
    assert chat(server, text).headers["x-inferplex-cache"] == "miss"
    assert upstream_calls(fake_openai, text) == 2


def test_the_openai_sdk_reads_a_replayed_stream(server: GatewayServer) -> None:
    text = unique("sdk stream")
    sdk = client(server)
    for expected in ("miss", "hit"):
        with sdk.chat.completions.with_streaming_response.create(
            model="priced",
            messages=[{"role": "user", "content": text}],
            stream=True,
            stream_options={"include_usage": True},
        ) as raw:
            assert raw.headers["x-inferplex-cache"] == expected
            chunks = list(raw.parse())
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert content == f"echo: {text}"
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_anthropic_messages_stream_is_replayed(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique("anthropic words")
    sdk = anthropic.Anthropic(base_url=server.url, api_key=server.master_key, max_retries=0)
    events: list[list[Any]] = []
    for expected in ("miss", "hit"):
        with sdk.messages.with_streaming_response.create(
            model="priced", max_tokens=100, messages=[{"role": "user", "content": text}], stream=True
        ) as raw:
            assert raw.headers["x-inferplex-cache"] == expected
            got = [e.model_dump(exclude={"message": {"id"}}) for e in raw.parse()]
        events.append(got)
    assert events[0] == events[1]
    assert [e["type"] for e in events[1]][-2:] == ["message_delta", "message_stop"]
    assert events[1][-2]["delta"]["stop_reason"] == "end_turn" and events[1][-2]["usage"]["output_tokens"] == 4
    assert upstream_calls(fake_openai, text) == 1
    message = sdk.messages.with_raw_response.create(
        model="priced", max_tokens=100, messages=[{"role": "user", "content": text}]
    )
    assert message.headers["x-inferplex-cache"] == "miss"  # buffered: its own entry
    again = sdk.messages.with_raw_response.create(
        model="priced", max_tokens=100, messages=[{"role": "user", "content": text}]
    )
    assert again.headers["x-inferplex-cache"] == "hit"
    assert again.parse().content[0].text == f"echo: {text}"  # type: ignore[union-attr]


def test_two_accounts_never_share_an_entry(server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI) -> None:
    text = unique()
    one, two = admin.create_key(credits_micros=100_000), admin.create_key(credits_micros=100_000)
    assert one["account_id"] != two["account_id"]
    r1, r2 = chat(server, text, one["key"]), chat(server, text, two["key"])
    assert (r1.headers["x-inferplex-cache"], r2.headers["x-inferplex-cache"]) == ("miss", "miss")
    assert r1.headers["x-inferplex-cache-entry"] != r2.headers["x-inferplex-cache-entry"]
    assert upstream_calls(fake_openai, text) == 2
    # another key of the first account shares its entries (scope: account, the default)
    sibling = admin.create_key(account_id=one["account_id"])
    assert chat(server, text, sibling["key"]).headers["x-inferplex-cache"] == "hit"
    # and the master key (scope "open") shares none of them
    assert chat(server, text).headers["x-inferplex-cache"] == "miss"
    assert upstream_calls(fake_openai, text) == 3


def test_a_namespace_narrows_the_scope(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique()
    plain = chat(server, text)
    spaced = chat(server, text, headers={"x-inferplex-cache": "namespace=team-a"})
    again = chat(server, text, cache={"namespace": "team-a"})  # LiteLLM's body spelling, the same namespace
    other = chat(server, text, headers={"x-inferplex-cache": "namespace=team-b"})
    assert [r.headers["x-inferplex-cache"] for r in (plain, spaced, again, other)] == ["miss", "miss", "hit", "miss"]
    assert upstream_calls(fake_openai, text) == 3
    assert "cache" not in fake_openai.state.last().body  # the gateway's key never reaches the upstream


def test_a_shared_model_shares_one_entry_between_accounts(server: GatewayServer, admin: Admin) -> None:
    text = unique()
    one, two = admin.create_key(credits_micros=100_000), admin.create_key(credits_micros=100_000)
    assert chat(server, text, one["key"], model="faq").headers["x-inferplex-cache"] == "miss"
    assert chat(server, text, two["key"], model="faq").headers["x-inferplex-cache"] == "hit"


def test_a_model_opted_out_is_never_cached(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique()
    for _ in range(2):
        r = chat(server, text, model="uncached", headers={"x-inferplex-cache": "bogus"})  # control is not read
        assert r.status_code == 200 and "x-inferplex-cache" not in r.headers
        assert "cache" not in r.json()["timings"]
    assert upstream_calls(fake_openai, text) == 2


def test_no_store_stores_nothing(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique()
    r1 = chat(server, text, headers={"Cache-Control": "no-store"})
    r2 = chat(server, text, cache={"no-store": True})
    r3 = chat(server, text)
    assert [r.headers["x-inferplex-cache"] for r in (r1, r2, r3)] == ["miss", "miss", "miss"]
    assert upstream_calls(fake_openai, text) == 3
    assert chat(server, text).headers["x-inferplex-cache"] == "hit"  # the plain request stored it


def test_no_cache_reads_nothing_but_stores(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique()
    assert chat(server, text).headers["x-inferplex-cache"] == "miss"
    fresh = chat(server, text, headers={"Cache-Control": "no-cache"})
    assert fresh.headers["x-inferplex-cache"] == "bypass" and fresh.json()["timings"]["cache"] == "bypass"
    assert upstream_calls(fake_openai, text) == 2
    # what no-cache fetched replaced the entry: the next hit is its answer (same text here, a new `created`)
    assert chat(server, text).headers["x-inferplex-cache"] == "hit"
    assert upstream_calls(fake_openai, text) == 2
    cold = unique()
    assert chat(server, cold, cache={"no-cache": True}).headers["x-inferplex-cache"] == "bypass"
    assert chat(server, cold).headers["x-inferplex-cache"] == "hit"


def test_bypass_neither_reads_nor_stores(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique()
    r1 = chat(server, text, headers={"x-inferplex-cache": "bypass"})
    r2 = chat(server, text, cache={"use-cache": False})
    assert [r.headers["x-inferplex-cache"] for r in (r1, r2)] == ["bypass", "bypass"]
    assert "x-inferplex-cache-entry" not in r1.headers
    assert chat(server, text).headers["x-inferplex-cache"] == "miss"
    assert chat(server, text, headers={"x-inferplex-cache": "bypass"}).headers["x-inferplex-cache"] == "bypass"
    assert upstream_calls(fake_openai, text) == 4


def test_max_age_accepts_only_younger_entries(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique()
    chat(server, text)
    assert chat(server, text, headers={"Cache-Control": "max-age=60"}).headers["x-inferplex-cache"] == "hit"
    time.sleep(1.1)
    assert chat(server, text, headers={"Cache-Control": "max-age=1"}).headers["x-inferplex-cache"] == "miss"
    assert chat(server, text, cache={"s-maxage": 0}).headers["x-inferplex-cache"] == "miss"
    assert upstream_calls(fake_openai, text) == 3


def test_entries_expire_after_their_ttl(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text, other = unique(), unique()
    chat(server, text, model="short-lived")  # the model's ttl_s: 1
    chat(server, other, cache={"ttl": 1})  # the request's own ttl
    assert chat(server, text, model="short-lived").headers["x-inferplex-cache"] == "hit"
    assert chat(server, other).headers["x-inferplex-cache"] == "hit"
    time.sleep(1.2)
    assert chat(server, text, model="short-lived").headers["x-inferplex-cache"] == "miss"
    assert chat(server, other).headers["x-inferplex-cache"] == "miss"
    assert upstream_calls(fake_openai, text) == 2 and upstream_calls(fake_openai, other) == 2


def test_an_answer_cut_at_the_asked_length_is_stored(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique("a b c d e f")
    r1 = chat(server, text, max_tokens=2)
    assert r1.json()["choices"][0]["finish_reason"] == "length"
    r2 = chat(server, text, max_tokens=2)
    assert r2.headers["x-inferplex-cache"] == "hit" and r2.json()["choices"][0]["finish_reason"] == "length"
    _, frames = sse_frames(server, text, max_completion_tokens=2)
    r3, again = sse_frames(server, text, max_completion_tokens=2)
    assert r3.headers["x-inferplex-cache"] == "hit" and len(frames) == len(again)
    assert upstream_calls(fake_openai, text) == 2


def test_a_stream_the_caller_abandons_is_not_stored(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique()
    body = {"model": "slow-cached", "stream": True, "messages": [{"role": "user", "content": text}]}
    for expected in ("miss", "miss"):
        with httpx.stream(
            "POST", server.base_url + "/chat/completions", json=body, headers=server_auth(server), timeout=30
        ) as r:
            assert r.headers["x-inferplex-cache"] == expected
            for n, _ in enumerate(r.iter_lines()):
                if n > 6:
                    break  # hang up mid-stream
    assert upstream_calls(fake_openai, text) == 2


def test_an_upstream_error_is_not_stored(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique()
    failed = chat(server, text, model="error-400")
    calls = upstream_calls(fake_openai, text)
    assert failed.status_code == 400 and calls >= 1
    again = chat(server, text, model="error-400")
    assert again.status_code == 400 and upstream_calls(fake_openai, text) == 2 * calls
    # a stream that fails mid-way is not stored either
    cut = unique()
    _, frames = sse_frames(server, cut, model="die-midstream")
    assert any('"error"' in f for f in frames)
    r, frames = sse_frames(server, cut, model="die-midstream")
    assert r.headers["x-inferplex-cache"] == "miss" and any('"error"' in f for f in frames)


def test_the_responses_api_is_answered_from_the_cache(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique()
    sdk = client(server)
    buffered = [sdk.responses.with_raw_response.create(model="priced", input=text, store=False) for _ in range(2)]
    assert [r.headers["x-inferplex-cache"] for r in buffered] == ["miss", "hit"]
    first, second = (r.parse() for r in buffered)
    assert first.output_text == second.output_text == f"echo: {text}"
    assert first.id != second.id  # each response is the gateway's own, with its own id
    streamed = []
    for _ in range(2):
        with sdk.responses.with_streaming_response.create(model="priced", input=text, stream=True) as raw:
            streamed.append((raw.headers["x-inferplex-cache"], [e.type for e in raw.parse()][-1]))
    assert streamed == [("miss", "response.completed"), ("hit", "response.completed")]
    assert upstream_calls(fake_openai, text) == 2


def test_the_anthropic_body_cache_object_is_honoured_and_never_sent_upstream(
    server: GatewayServer, fake_openai: FakeOpenAI
) -> None:
    text = unique("anthropic control")
    sdk = anthropic.Anthropic(base_url=server.url, api_key=server.master_key, max_retries=0)
    messages: Any = [{"role": "user", "content": text}]
    for _ in range(2):  # no-store: neither is stored, both go upstream
        raw = sdk.messages.with_raw_response.create(
            model="priced", max_tokens=100, messages=messages, extra_body={"cache": {"no-store": True}}
        )
        assert raw.headers["x-inferplex-cache"] == "miss"
    assert upstream_calls(fake_openai, text) == 2
    assert "cache" not in fake_openai.state.last().body
    bad = httpx.post(
        server.url + "/v1/messages",
        headers={"x-api-key": server.master_key, "anthropic-version": "2023-06-01"},
        json={"model": "priced", "max_tokens": 10, "messages": messages, "cache": {"ttl": "soon"}},
    )
    assert bad.status_code == 400 and bad.json()["type"] == "error"
    assert bad.json()["error"]["type"] == "invalid_request_error" and "cache.ttl" in bad.json()["error"]["message"]
