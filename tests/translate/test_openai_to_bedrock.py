"""Table tests of the Bedrock Converse translators, both directions, unknown values included."""

from __future__ import annotations

from typing import Any

import pytest

from inferplex.canonical import ChatRequest
from inferplex.errors import InvalidRequest
from inferplex.providers.failures import ProviderFailure
from inferplex.translate import openai_to_bedrock as tr

USER = {"role": "user", "content": "hi"}
TOOL = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}


def body(model_id: str = "anthropic.claude-x-v1:0", **request: Any) -> dict[str, Any]:
    request.setdefault("model", "m")
    request.setdefault("messages", [USER])
    return tr.build_request(ChatRequest.model_validate(request), model_id, 4096)


@pytest.mark.parametrize(
    ("model_id", "family"),
    [
        ("anthropic.claude-3-5-sonnet-20240620-v1:0", "anthropic"),
        ("us.anthropic.claude-3-7-sonnet-v1:0", "anthropic"),
        ("meta.llama3-1-70b-instruct-v1:0", "meta"),
        ("eu.meta.llama3-2-3b-instruct-v1:0", "meta"),
        ("mistral.mistral-large-2407-v1:0", "mistral"),
        ("arn:aws:bedrock:us-east-1:123:inference-profile/us.anthropic.claude-x-v1:0", "anthropic"),
        ("my-custom-model", "unknown"),
    ],
)
def test_family(model_id: str, family: str) -> None:
    assert tr.family(model_id) == family


CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "minimal",
        {},
        {"messages": [{"role": "user", "content": [{"text": "hi"}]}], "inferenceConfig": {"maxTokens": 4096}},
    ),
    (
        "system, sampling, stop",
        {
            "messages": [{"role": "system", "content": "s"}, USER],
            "temperature": 0.1,
            "top_p": 0.2,
            "stop": ["X"],
            "max_tokens": 7,
        },
        {
            "system": [{"text": "s"}],
            "inferenceConfig": {"maxTokens": 7, "temperature": 0.1, "topP": 0.2, "stopSequences": ["X"]},
        },
    ),
    (
        "tools, auto",
        {"tools": [TOOL], "tool_choice": "auto"},
        {
            "toolConfig": {
                "tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}, "description": "d"}}],
                "toolChoice": {"auto": {}},
            }
        },
    ),
    (
        "required -> any",
        {"tools": [TOOL], "tool_choice": "required"},
        {
            "toolConfig": {
                "tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}, "description": "d"}}],
                "toolChoice": {"any": {}},
            }
        },
    ),
    (
        "top_k and thinking for Anthropic",
        {"top_k": 3, "thinking": {"type": "enabled", "budget_tokens": 1024}},
        {"additionalModelRequestFields": {"top_k": 3, "thinking": {"type": "enabled", "budget_tokens": 1024}}},
    ),
]


@pytest.mark.parametrize(("name", "request_", "expected"), CASES, ids=[c[0] for c in CASES])
def test_build_request(name: str, request_: dict[str, Any], expected: dict[str, Any]) -> None:
    out = body(**request_)
    for key, value in expected.items():
        assert out[key] == value, key


def test_family_knobs_and_none_choice() -> None:
    assert "additionalModelRequestFields" not in body("meta.llama3-1-8b-instruct-v1:0", top_k=3)
    assert "toolConfig" not in body(tools=[TOOL], tool_choice="none")


def test_blocks_cache_points_and_tool_results() -> None:
    out = body(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
                    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AA"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "ok"},
        ]
    )
    user, assistant, result = out["messages"]
    assert user["content"] == [
        {"text": "look"},
        {"cachePoint": {"type": "default"}},
        {"image": {"format": "jpeg", "source": {"bytes": "AA"}}},
    ]
    assert assistant["content"] == [{"toolUse": {"toolUseId": "t1", "name": "f", "input": {"a": 1}}}]
    assert result["content"] == [{"toolResult": {"toolUseId": "t1", "content": [{"text": "ok"}], "status": "success"}}]


def test_image_links_are_a_400() -> None:
    with pytest.raises(InvalidRequest, match="base64 data URLs"):
        body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}])


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("guardrail_intervened", "content_filter"),
        ("content_filtered", "content_filter"),
        ("model_context_window_exceeded", "length"),
        ("brand_new", "stop"),
        (None, "stop"),
    ],
)
def test_finish_reasons(stop: Any, finish: str) -> None:
    assert tr.finish_reason(stop) == finish


def test_completion() -> None:
    data = {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {"reasoningContent": {"reasoningText": {"text": "hm", "signature": "s"}}},
                    {"text": "a"},
                    {"toolUse": {"toolUseId": "t", "name": "f", "input": {"x": 1}}},
                    {"newBlock": {}},
                ],
            }
        },
        "stopReason": "tool_use",
        "usage": {"inputTokens": 5, "outputTokens": 2, "cacheReadInputTokens": 4, "cacheWriteInputTokens": 1},
    }
    out = tr.to_completion(data, "pub")
    message = out["choices"][0]["message"]
    assert message["content"] == "a" and message["reasoning_content"] == "hm"
    assert message["thinking_blocks"] == [{"type": "thinking", "thinking": "hm", "signature": "s"}]
    assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"x":1}'}
    assert out["usage"]["prompt_tokens"] == 10 and out["usage"]["prompt_tokens_details"] == {"cached_tokens": 4}
    with pytest.raises(ProviderFailure):
        tr.to_completion({"output": {}}, "pub")


def test_stream() -> None:
    stream = tr.BedrockStream("pub")
    chunks = stream.feed("messageStart", {"role": "assistant"})
    chunks += stream.feed("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hi"}})
    chunks += stream.feed(
        "contentBlockStart", {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t", "name": "f"}}}
    )
    chunks += stream.feed("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"a"'}}})
    chunks += stream.feed("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"reasoningContent": {"text": "r"}}})
    chunks += stream.feed("somethingNew", {"x": 1})
    chunks += stream.feed("messageStop", {"stopReason": "tool_use"})
    chunks += stream.feed("metadata", {"usage": {"inputTokens": 1, "outputTokens": 2}})
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[1] == {"content": "Hi"}
    assert deltas[2]["tool_calls"][0]["id"] == "t" and deltas[3]["tool_calls"][0]["function"] == {"arguments": '{"a"'}
    assert deltas[4] == {"reasoning_content": "r"} and chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"]["total_tokens"] == 3 and stream.done


@pytest.mark.parametrize(
    ("event", "kind"),
    [("throttlingException", "ThrottlingException"), ("newException", "NewException")],
)
def test_stream_exceptions_report_the_providers_type(event: str, kind: str) -> None:
    """What each type means is the adapter's `ErrorMap` (tests/providers/test_failures.py)."""
    with pytest.raises(ProviderFailure, match="aws says no") as info:
        tr.BedrockStream("m").feed(event, {"message": "aws says no"}, "exception")
    assert info.value.kind == kind
