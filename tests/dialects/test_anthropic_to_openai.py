"""Table tests of the inbound Anthropic translators: Messages request -> canonical, canonical -> Message/events."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from inferplex.canonical import ChatRequest, parse
from inferplex.dialects.anthropic import translate as tr
from inferplex.dialects.anthropic.wire import CountTokensRequest, MessagesRequest
from inferplex.errors import InvalidRequest

USER = {"role": "user", "content": "hi"}


def canonical(**body: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    body = {"model": "m", "max_tokens": 10, "messages": [USER], **body}
    return tr.to_canonical(MessagesRequest.model_validate(body))


CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("minimal", {}, {"model": "m", "messages": [USER], "max_completion_tokens": 10}),
    ("system string", {"system": "rules"}, {"messages": [{"role": "system", "content": "rules"}, USER]}),
    (
        "sampling and stops",
        {"temperature": 0.5, "top_p": 0.9, "stop_sequences": ["X"]},
        {"temperature": 0.5, "top_p": 0.9, "stop": ["X"]},
    ),
    ("metadata.user_id -> user", {"metadata": {"user_id": "u"}}, {"user": "u"}),
    ("stream asks for usage", {"stream": True}, {"stream": True, "stream_options": {"include_usage": True}}),
    (
        "tools and choice any",
        {"tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"}},
        {
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "tool_choice": "required",
        },
    ),
    (
        "named tool, no parallel",
        {
            "tools": [{"name": "f", "input_schema": {}}],
            "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": True},
        },
        {"tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": False},
    ),
    (
        "output_config -> json_schema",
        {"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": {"type": "object"}, "strict": True},
            }
        },
    ),
]


@pytest.mark.parametrize(("name", "body", "expected"), CASES, ids=[c[0] for c in CASES])
def test_to_canonical(name: str, body: dict[str, Any], expected: dict[str, Any]) -> None:
    full, raw = canonical(**body)
    for key, value in expected.items():
        assert full[key] == value, key
        assert raw[key] == value, key
    parse(ChatRequest, full)  # always a valid canonical request


def test_blocks_tool_results_and_anthropic_only_details() -> None:
    thinking = {"type": "thinking", "thinking": "hm", "signature": "s"}
    full, raw = canonical(
        system=[{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}],
        top_k=3,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}},
                    {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    thinking,
                    {"type": "text", "text": "calling"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": True},
                    {"type": "text", "text": "and?"},
                ],
            },
        ],
    )
    system, user, assistant, tool, after = full["messages"]
    assert system["content"] == [{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}]
    assert user["content"][1:] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
        {"type": "text", "text": "doc"},
    ]
    assert assistant == {
        "role": "assistant",
        "content": "calling",
        "reasoning_content": "hm",
        "thinking_blocks": [thinking],
        "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}],
    }
    assert tool == {"role": "tool", "tool_call_id": "t1", "content": "ok", "is_error": True}
    assert after == {"role": "user", "content": [{"type": "text", "text": "and?"}]}
    assert full["top_k"] == 3 and full["thinking"]["budget_tokens"] == 1024
    assert "top_k" not in raw and "thinking" not in raw and b"cache_control" not in orjson.dumps(raw)
    assert "thinking_blocks" not in raw["messages"][2] and "is_error" not in raw["messages"][3]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "messages": [USER]}, "max_tokens"),
        ({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
        (
            {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "hologram"}]}]},
            "messages[0].content",
        ),
        ({"model": "m", "max_tokens": 5, "temperature": 1.5, "messages": [USER]}, "temperature"),
    ],
)
def test_wire_schema_rejects_what_anthropic_rejects(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse(MessagesRequest, body)
    assert (err.value.param or "").startswith(param)


def test_count_tokens_request_needs_no_max_tokens() -> None:
    full, _ = tr.to_canonical(CountTokensRequest.model_validate({"model": "m", "messages": [USER]}))
    assert "max_completion_tokens" not in full


@pytest.mark.parametrize(
    ("finish", "matched", "stop"),
    [
        ("stop", None, "end_turn"),
        ("length", None, "max_tokens"),
        ("tool_calls", None, "tool_use"),
        ("content_filter", None, "refusal"),
        ("function_call", None, "tool_use"),
        ("stop", "END", "stop_sequence"),
        ("a_new_reason", None, "end_turn"),
        (None, None, "end_turn"),
    ],
)
def test_stop_reasons(finish: Any, matched: Any, stop: str) -> None:
    assert tr.stop_reason(finish, matched) == stop


def test_to_message() -> None:
    completion = {
        "id": "chatcmpl-1",
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "content": "hi",
                    "reasoning_content": "hm",
                    "tool_calls": [
                        {"id": "c1", "function": {"name": "f", "arguments": '{"a": 1}'}},
                        {"id": "c2", "function": {"name": "g", "arguments": "not json"}},
                    ],
                },
            }
        ],
        "usage": {
            "prompt_tokens": 130,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 100},
            "cache_creation_input_tokens": 20,
        },
    }
    out = tr.to_message(completion, "pub")
    assert out["id"].startswith("msg_") and out["model"] == "pub" and out["stop_reason"] == "tool_use"
    assert out["content"] == [
        {"type": "thinking", "thinking": "hm", "signature": ""},
        {"type": "text", "text": "hi"},
        {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}},
        {"type": "tool_use", "id": "c2", "name": "g", "input": {"arguments": "not json"}},
    ]
    assert out["usage"] == {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_creation_input_tokens": 20,
        "cache_read_input_tokens": 100,
    }


def _events(frames: list[bytes]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for frame in frames:
        head, data = frame.decode().strip().split("\n")
        out.append((head.removeprefix("event: "), orjson.loads(data.removeprefix("data: "))))
    return out


def _chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


def test_stream_writer_grammar() -> None:
    writer = tr.MessageStreamWriter("pub", 12)
    frames = writer.feed(_chunk({"role": "assistant", "content": ""}))
    frames += writer.feed(_chunk({"reasoning_content": "hm"}))
    frames += writer.feed(_chunk({"reasoning_signature": "sig"}))
    frames += writer.feed(_chunk({"content": "Hi"}))
    frames += writer.feed(_chunk({"content": " there"}))
    frames += writer.feed(
        _chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": ""}}]})
    )
    frames += writer.feed(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}))
    frames += writer.feed(
        _chunk({"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "g", "arguments": "{}"}}]})
    )
    frames += writer.feed(_chunk({"content": "ignored"}, index=1))
    frames += writer.feed(_chunk({}, "tool_calls"))
    frames += writer.feed({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
    frames += writer.end()
    events = _events(frames)
    names = [n for n, _ in events]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0][1]["message"]["usage"]["input_tokens"] == 12
    starts = [d["content_block"] for n, d in events if n == "content_block_start"]
    assert [s["type"] for s in starts] == ["thinking", "text", "tool_use", "tool_use"]
    assert [d["index"] for n, d in events if n == "content_block_start"] == [0, 1, 2, 3]
    assert events[4][1]["delta"] == {"type": "signature_delta", "signature": "sig"}
    assert events[11][1]["delta"] == {"type": "input_json_delta", "partial_json": '{"a":'}
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"]["input_tokens"] == 7 and delta["usage"]["output_tokens"] == 3


def test_stream_writer_with_nothing_and_errors() -> None:
    writer = tr.MessageStreamWriter("pub", 1)
    names = [n for n, _ in _events(writer.end())]
    assert names == ["message_start", "ping", "message_delta", "message_stop"]
    ((name, data),) = _events(writer.error("overloaded_error", "busy"))
    assert name == "error" and data == {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}


def test_server_tools_and_unknown_fields_ride_along_for_an_anthropic_target() -> None:
    search = {"type": "web_search_20250305", "name": "web_search"}
    full, raw = canonical(
        tools=[search],
        tool_choice={"type": "auto"},
        container="ctr",
        output_config={"effort": "low"},
        metadata={"user_id": "u", "tag": "x"},
    )
    assert full["anthropic_extra"] == {
        "container": "ctr",
        "tools": [search],
        "tool_choice": {"type": "auto"},
        "output_config": {"effort": "low"},
        "metadata": {"user_id": "u", "tag": "x"},
    }
    assert "tools" not in full and "anthropic_extra" not in raw and full["user"] == "u"
