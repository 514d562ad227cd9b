"""Table tests of the outbound Anthropic translators: canonical request -> Messages body, answer -> canonical."""

from __future__ import annotations

from typing import Any

import pytest

from inferplex.canonical import ChatRequest
from inferplex.errors import InvalidRequest
from inferplex.providers.failures import ProviderFailure
from inferplex.translate import openai_to_anthropic as tr

USER = {"role": "user", "content": "hi"}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def body(**request: Any) -> dict[str, Any]:
    request.setdefault("model", "m")
    request.setdefault("messages", [USER])
    return tr.build_request(ChatRequest.model_validate(request), "claude-x", 4096, stream=False)


REQUEST_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "minimal: default max_tokens, string content kept",
        {},
        {"model": "claude-x", "max_tokens": 4096, "messages": [{"role": "user", "content": "hi"}]},
    ),
    (
        "system and developer become top-level system blocks",
        {"messages": [{"role": "system", "content": "a"}, {"role": "developer", "content": "b"}, USER]},
        {"system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ),
    (
        "a single system string stays a string",
        {"messages": [{"role": "system", "content": "be brief"}, USER]},
        {"system": "be brief"},
    ),
    (
        "consecutive user turns are merged",
        {"messages": [USER, {"role": "user", "content": "again"}]},
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "again"}]}
            ]
        },
    ),
    (
        "max_completion_tokens wins; stop becomes stop_sequences; sampling passes",
        {"max_completion_tokens": 9, "stop": "END", "temperature": 0.5, "top_p": 0.9},
        {"max_tokens": 9, "stop_sequences": ["END"], "temperature": 0.5, "top_p": 0.9},
    ),
    ("user becomes metadata.user_id", {"user": "u-1"}, {"metadata": {"user_id": "u-1"}}),
    (
        "top_k and thinking pass through",
        {"top_k": 5, "thinking": {"type": "enabled", "budget_tokens": 1024}},
        {"top_k": 5, "thinking": {"type": "enabled", "budget_tokens": 1024}},
    ),
    (
        "tools get input_schema; auto choice",
        {"tools": [TOOL], "tool_choice": "auto"},
        {"tools": [{"name": "get_weather", "input_schema": {"type": "object"}}], "tool_choice": {"type": "auto"}},
    ),
    ("required -> any", {"tools": [TOOL], "tool_choice": "required"}, {"tool_choice": {"type": "any"}}),
    ("none -> none", {"tools": [TOOL], "tool_choice": "none"}, {"tool_choice": {"type": "none"}}),
    (
        "named -> tool",
        {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {"tool_choice": {"type": "tool", "name": "get_weather"}},
    ),
    (
        "parallel_tool_calls false -> disable_parallel_tool_use",
        {"tools": [TOOL], "parallel_tool_calls": False},
        {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
    ),
    (
        "tool without parameters gets an empty object schema",
        {"tools": [{"type": "function", "function": {"name": "now", "description": "time"}}]},
        {"tools": [{"name": "now", "input_schema": {"type": "object", "properties": {}}, "description": "time"}]},
    ),
    (
        "cache_control on tools passes",
        {"tools": [{**TOOL, "cache_control": {"type": "ephemeral"}}]},
        {
            "tools": [
                {"name": "get_weather", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}
            ]
        },
    ),
    (
        "json_schema -> output_config.format",
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}},
        {"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
    ),
    (
        "reasoning_effort -> thinking budget added to max_tokens",
        {"reasoning_effort": "low", "max_tokens": 100},
        {"thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 2148},
    ),
]


@pytest.mark.parametrize(("name", "request_", "expected"), REQUEST_CASES, ids=[c[0] for c in REQUEST_CASES])
def test_build_request(name: str, request_: dict[str, Any], expected: dict[str, Any]) -> None:
    out = body(**request_)
    for key, value in expected.items():
        assert out[key] == value, key


def test_images_tool_calls_and_results_become_blocks() -> None:
    out = body(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "image_url", "image_url": {"url": "https://x/cat.jpg"}},
                ],
            },
            {
                "role": "assistant",
                "content": "calling",
                "tool_calls": [
                    {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
                    {"id": "t2", "type": "function", "function": {"name": "g", "arguments": ""}},
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "one"},
            {"role": "tool", "tool_call_id": "t2", "content": [{"type": "text", "text": "two"}]},
            {"role": "user", "content": "thanks"},
        ]
    )
    user, assistant, results = out["messages"]
    assert user["content"] == [
        {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
        {"type": "image", "source": {"type": "url", "url": "https://x/cat.jpg"}},
    ]
    assert assistant["content"] == [
        {"type": "text", "text": "calling"},
        {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
        {"type": "tool_use", "id": "t2", "name": "g", "input": {}},
    ]
    assert results == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "one"},
            {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "two"}]},
            {"type": "text", "text": "thanks"},
        ],
    }


def test_thinking_blocks_are_sent_back_first() -> None:
    thinking = {"type": "thinking", "thinking": "hm", "signature": "s"}
    out = body(messages=[USER, {"role": "assistant", "content": "ok", "thinking_blocks": [thinking]}, USER])
    assert out["messages"][1]["content"] == [thinking, {"type": "text", "text": "ok"}]


@pytest.mark.parametrize(
    "bad",
    [
        {
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "t", "type": "function", "function": {"name": "f", "arguments": "{not json"}}
                    ],
                },
            ]
        },
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png,raw"}}]}
            ]
        },
    ],
)
def test_untranslatable_input_is_a_400(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        body(**bad)


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("pause_turn", "stop"),
        ("model_context_window_exceeded", "length"),
        ("a_reason_from_the_future", "stop"),
        (None, "stop"),
        (42, "stop"),
    ],
)
def test_finish_reasons(stop: Any, finish: str) -> None:
    assert tr.finish_reason(stop) == finish


def test_completion_with_every_block_kind_and_cached_usage() -> None:
    data = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "stop_reason": "tool_use",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "redacted_thinking", "data": "xx"},
            {"type": "text", "text": "a"},
            {"type": "text", "text": "b"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
            {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}},
            {"type": "block_from_the_future"},
        ],
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 20,
        },
    }
    out = tr.to_completion(data, "public")
    message = out["choices"][0]["message"]
    assert out["model"] == "public" and out["choices"][0]["finish_reason"] == "tool_calls"
    assert message["content"] == "ab" and message["reasoning_content"] == "hm"
    assert [b["type"] for b in message["thinking_blocks"]] == ["thinking", "redacted_thinking"]
    assert message["tool_calls"] == [
        {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    ]
    assert out["usage"] == {
        "prompt_tokens": 130,
        "completion_tokens": 5,
        "total_tokens": 135,
        "prompt_tokens_details": {"cached_tokens": 100},
        "cache_creation_input_tokens": 20,
    }


def test_completion_without_content_is_a_provider_failure() -> None:
    with pytest.raises(ProviderFailure) as info:
        tr.to_completion({"type": "message"}, "m")
    assert info.value.kind == "api_error"


def _events(*events: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    stream = tr.AnthropicStream("public")
    out: list[dict[str, Any]] = []
    for name, data in events:
        out += stream.feed(name, {"type": name, **data})
    return out


START = (
    "message_start",
    {"message": {"id": "msg_9", "usage": {"input_tokens": 7, "output_tokens": 1, "cache_read_input_tokens": 3}}},
)


def test_stream_text_tools_and_usage() -> None:
    chunks = _events(
        START,
        ("ping", {}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
        ("content_block_stop", {"index": 0}),
        ("content_block_start", {"index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "f"}}),
        ("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"a"'}}),
        ("content_block_start", {"index": 2, "content_block": {"type": "tool_use", "id": "t2", "name": "g"}}),
        ("content_block_delta", {"index": 2, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
        ("message_delta", {"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        ("message_stop", {}),
    )
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1] == {"content": "Hi"}
    assert deltas[2]["tool_calls"][0] == {
        "index": 0,
        "id": "t1",
        "type": "function",
        "function": {"name": "f", "arguments": ""},
    }
    assert deltas[3]["tool_calls"] == [{"index": 0, "function": {"arguments": '{"a"'}}]
    assert deltas[4]["tool_calls"][0]["index"] == 1 and deltas[5]["tool_calls"][0]["index"] == 1
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 10
    assert chunks[-1]["usage"]["prompt_tokens_details"] == {"cached_tokens": 3}
    assert chunks[-1]["usage"]["completion_tokens"] == 9 and chunks[0]["id"] == "msg_9"


def test_stream_thinking_and_unknown_events_never_crash() -> None:
    chunks = _events(
        START,
        ("content_block_start", {"index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "signature_delta", "signature": "s"}}),
        ("content_block_start", {"index": 1, "content_block": {"type": "mystery"}}),
        ("content_block_delta", {"index": 1, "delta": {"type": "mystery_delta", "x": 1}}),
        ("event_from_the_future", {"x": 1}),
        ("message_delta", {"delta": {"stop_reason": "new_reason"}, "usage": {"output_tokens": 1}}),
    )
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert {"reasoning_content": "hm"} in deltas and {"reasoning_signature": "s"} in deltas
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("kind", ["overloaded_error", "rate_limit_error", "error_from_the_future"])
def test_stream_error_events_report_the_providers_type(kind: str) -> None:
    """What each type means is the adapter's `ErrorMap` (tests/providers/test_failures.py)."""
    stream = tr.AnthropicStream("m")
    with pytest.raises(ProviderFailure) as info:
        stream.feed("error", {"type": "error", "error": {"type": kind, "message": "provider says no"}})
    assert (info.value.kind, str(info.value)) == (kind, "provider says no")
