"""Table tests of the Gemini translators, both directions, unknown values included."""

from __future__ import annotations

from typing import Any

import pytest

from inferplex.canonical import ChatRequest
from inferplex.errors import InvalidRequest
from inferplex.providers.failures import ProviderFailure
from inferplex.translate import openai_to_gemini as tr

USER = {"role": "user", "content": "hi"}
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": False},
    },
}


def body(**request: Any) -> dict[str, Any]:
    request.setdefault("model", "m")
    request.setdefault("messages", [USER])
    return tr.build_request(ChatRequest.model_validate(request))


CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("minimal", {}, {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
    (
        "system instruction",
        {"messages": [{"role": "system", "content": "be brief"}, USER]},
        {"systemInstruction": {"parts": [{"text": "be brief"}]}},
    ),
    (
        "generation config",
        {
            "temperature": 0.2,
            "top_p": 0.5,
            "max_tokens": 9,
            "stop": "X",
            "seed": 1,
            "n": 2,
            "presence_penalty": 0.1,
            "top_k": 4,
        },
        {
            "generationConfig": {
                "temperature": 0.2,
                "topP": 0.5,
                "maxOutputTokens": 9,
                "stopSequences": ["X"],
                "seed": 1,
                "candidateCount": 2,
                "presencePenalty": 0.1,
                "topK": 4,
            }
        },
    ),
    (
        "tools and auto",
        {"tools": [TOOL], "tool_choice": "auto"},
        {
            "tools": [
                {
                    "functionDeclarations": [
                        {
                            "name": "get_weather",
                            "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}},
                        }
                    ]
                }
            ],
            "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        },
    ),
    (
        "required -> ANY",
        {"tools": [TOOL], "tool_choice": "required"},
        {"toolConfig": {"functionCallingConfig": {"mode": "ANY"}}},
    ),
    (
        "named -> ANY + allowed",
        {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {"toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}}},
    ),
    (
        "json_schema -> responseSchema",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "x",
                    "schema": {"type": "object", "properties": {"a": {"type": ["string", "null"]}}, "$schema": "x"},
                },
            }
        },
        {
            "generationConfig": {
                "responseMimeType": "application/json",
                "responseSchema": {"type": "OBJECT", "properties": {"a": {"type": "STRING", "nullable": True}}},
            }
        },
    ),
    (
        "json_object -> mime type only",
        {"response_format": {"type": "json_object"}},
        {"generationConfig": {"responseMimeType": "application/json"}},
    ),
    (
        "reasoning_effort -> thinkingBudget",
        {"reasoning_effort": "none"},
        {"generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}},
    ),
]


@pytest.mark.parametrize(("name", "request_", "expected"), CASES, ids=[c[0] for c in CASES])
def test_build_request(name: str, request_: dict[str, Any], expected: dict[str, Any]) -> None:
    out = body(**request_)
    for key, value in expected.items():
        assert out[key] == value, key


def test_media_tool_calls_and_results() -> None:
    out = body(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "image_url", "image_url": {"url": "https://x/cat.jpg"}},
                    {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
        ]
    )
    user, model, result = out["contents"]
    assert user["parts"][1:] == [
        {"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://x/cat.jpg"}},
        {"inlineData": {"mimeType": "audio/wav", "data": "UklG"}},
    ]
    call = {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": tr.PLACEHOLDER_SIGNATURE}
    assert model == {"role": "model", "parts": [call]}
    assert result == {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"content": "done"}}}]}


def _call(call_id: str, signature: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    if signature is not None:
        call["extra_content"] = {"google": {"thought_signature": signature}}
    return call


# (assistant turns' calls as (id, signature) lists, the thoughtSignature each functionCall part goes out with)
SIGNATURES: list[tuple[str, list[list[tuple[str, str | None]]], list[list[str | None]]]] = [
    ("gemini's own kept", [[("a", "c2ln")]], [["c2ln"]]),
    ("another provider's call gets the placeholder", [[("a", None)]], [[tr.PLACEHOLDER_SIGNATURE]]),
    ("gemini's parallel calls: only the first is signed", [[("a", "c2ln"), ("b", None)]], [["c2ln", None]]),
    (
        "another's parallel calls: the first of the step",
        [[("a", None), ("b", None)]],
        [[tr.PLACEHOLDER_SIGNATURE, None]],
    ),
    (
        "every step of a turn",
        [[("a", "c2ln")], [("b", None)]],
        [["c2ln"], [tr.PLACEHOLDER_SIGNATURE]],
    ),
]


@pytest.mark.parametrize(("name", "steps", "expected"), SIGNATURES, ids=[c[0] for c in SIGNATURES])
def test_each_steps_first_call_goes_out_signed(
    name: str, steps: list[list[tuple[str, str | None]]], expected: list[list[str | None]]
) -> None:
    messages: list[dict[str, Any]] = [USER]
    for step in steps:
        messages.append({"role": "assistant", "content": None, "tool_calls": [_call(i, sig) for i, sig in step]})
        messages += [{"role": "tool", "tool_call_id": i, "content": "ok"} for i, _ in step]
    turns = [c for c in body(messages=messages)["contents"] if c["role"] == "model"]
    assert [[part.get("thoughtSignature") for part in turn["parts"]] for turn in turns] == expected


def test_a_tool_result_without_its_call_is_a_400() -> None:
    with pytest.raises(InvalidRequest):
        body(messages=[USER, {"role": "tool", "tool_call_id": "nope", "content": "x"}])


@pytest.mark.parametrize(
    ("reason", "calls", "finish"),
    [
        ("STOP", False, "stop"),
        ("STOP", True, "tool_calls"),
        ("MAX_TOKENS", False, "length"),
        ("SAFETY", False, "content_filter"),
        ("RECITATION", False, "content_filter"),
        ("PROHIBITED_CONTENT", False, "content_filter"),
        ("SPII", False, "content_filter"),
        ("MALFORMED_FUNCTION_CALL", False, "stop"),
        ("A_NEW_REASON", False, "stop"),
        (None, False, "stop"),
    ],
)
def test_finish_reasons(reason: Any, calls: bool, finish: str) -> None:
    assert tr.finish_reason(reason, calls) == finish


def test_completion_parts_usage_and_unknown_parts() -> None:
    data = {
        "responseId": "r1",
        "candidates": [
            {
                "index": 0,
                "finishReason": "STOP",
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "hm", "thought": True},
                        {"text": "a"},
                        {"text": "b"},
                        {"functionCall": {"name": "f", "args": {"x": 1}}},
                        {"executableCode": {"code": "1"}},
                    ],
                },
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 10,
            "candidatesTokenCount": 4,
            "cachedContentTokenCount": 6,
            "thoughtsTokenCount": 2,
        },
    }
    out = tr.to_completion(data, "pub")
    message = out["choices"][0]["message"]
    assert message["content"] == "ab" and message["reasoning_content"] == "hm"
    assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"x":1}'}
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert out["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 6,
        "total_tokens": 16,
        "prompt_tokens_details": {"cached_tokens": 6},
        "completion_tokens_details": {"reasoning_tokens": 2},
    }


def test_blocked_prompt_is_content_filter_and_empty_is_an_error() -> None:
    out = tr.to_completion({"promptFeedback": {"blockReason": "SAFETY"}}, "pub")
    assert out["choices"][0]["finish_reason"] == "content_filter"
    with pytest.raises(ProviderFailure):
        tr.to_completion({"candidates": []}, "pub")


def test_stream_translation() -> None:
    stream = tr.GeminiStream("pub")
    chunks = stream.feed({"candidates": [{"index": 0, "content": {"parts": [{"text": "He"}]}}]})
    chunks += stream.feed(
        {
            "candidates": [
                {
                    "index": 0,
                    "content": {
                        "parts": [
                            {"functionCall": {"name": "f", "args": {}}},
                            {"functionCall": {"name": "g", "args": {}}},
                        ]
                    },
                }
            ]
        }
    )
    chunks += stream.feed(
        {
            "candidates": [{"index": 0, "finishReason": "STOP", "content": {"parts": [{"text": ""}]}}],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2},
        }
    )
    chunks.append(stream.end())
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""} and deltas[1] == {"content": "He"}
    assert [d["tool_calls"][0]["index"] for d in deltas[2:4]] == [0, 1]
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls" and stream.finished
    assert chunks[-1]["usage"]["total_tokens"] == 5


@pytest.mark.parametrize("status", ["UNAVAILABLE", "SOMETHING_NEW"])
def test_stream_errors_report_the_providers_status(status: str) -> None:
    """What each status means is the adapter's `ErrorMap` (tests/providers/test_failures.py)."""
    with pytest.raises(ProviderFailure, match="gemini says no") as info:
        tr.GeminiStream("m").feed({"error": {"code": 500, "status": status, "message": "gemini says no"}})
    assert info.value.kind == status
