"""Chat completions to Responses objects (responses_api/translate.py: `response_object`, `skeleton`, the
output items, usage), as tables, every object checked against OpenAI's published `Response` schema; and
what the next turn needs back from an answer (signed thinking blocks, Gemini's thought signatures) going
out in the response and coming back through `to_chat`."""

from __future__ import annotations

from typing import Any

import pytest

from inferplex.responses_api import carried, translate
from tests.responses_api.schema import check, check_response
from tests.responses_api.test_translate import CHAT_CALL, CHAT_CALL2, TOOL, USER, chat, counter, request

# ---- response_object --------------------------------------------------------------------------------------

USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def completion(message: dict[str, Any], finish: str = "stop", usage: dict[str, Any] | None = USAGE) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def text(item_id: str, value: str, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": value, "annotations": [], "logprobs": []}],
    }


def fcall(item_id: str, call_id: str, name: str, args: str, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": args,
        "status": status,
    }


# (the assistant message, its finish reason, the output items, status, incomplete_details)
OUTPUTS = [
    ({"content": "Hello"}, "stop", [text("msg_0", "Hello")], "completed", None),
    ({"content": ""}, "stop", [text("msg_0", "")], "completed", None),
    (
        {"content": None, "tool_calls": [CHAT_CALL, CHAT_CALL2]},
        "tool_calls",
        [fcall("fc_0", "call_1", "f", '{"a":1}'), fcall("fc_1", "call_2", "g", "{}")],
        "completed",
        None,
    ),
    (
        {"content": "Looking", "tool_calls": [CHAT_CALL]},
        "tool_calls",
        [text("msg_0", "Looking"), fcall("fc_1", "call_1", "f", '{"a":1}')],
        "completed",
        None,
    ),
    (
        {"content": "Yes", "reasoning_content": "hm"},
        "stop",
        [
            {
                "type": "reasoning",
                "id": "rs_0",
                "summary": [{"type": "summary_text", "text": "hm"}],
                "status": "completed",
            },
            text("msg_1", "Yes"),
        ],
        "completed",
        None,
    ),
    (
        {"content": None, "refusal": "I can't"},
        "stop",
        [
            {
                "type": "message",
                "id": "msg_0",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "refusal", "refusal": "I can't"}],
            }
        ],
        "completed",
        None,
    ),
    ({"content": "Hel"}, "length", [text("msg_0", "Hel", "incomplete")], "incomplete", {"reason": "max_output_tokens"}),
    ({"content": ""}, "content_filter", [text("msg_0", "", "incomplete")], "incomplete", {"reason": "content_filter"}),
]


@pytest.mark.parametrize(("message", "finish", "output", "status", "details"), OUTPUTS)
def test_response_object(
    message: dict[str, Any], finish: str, output: list[dict[str, Any]], status: str, details: Any
) -> None:
    got = translate.response_object(
        request(input="hi"),
        response_id="resp_1",
        created_at=100,
        completion=completion(message, finish),
        completed_at=105,
        make_id=counter(),
    )
    check_response(got)
    assert got["output"] == output
    assert (got["status"], got["incomplete_details"]) == (status, details)
    assert got["completed_at"] == (105 if status == "completed" else None)
    assert got["usage"] == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }


def test_response_object_echoes_the_request() -> None:
    req = request(
        input="hi",
        instructions="be brief",
        tools=[TOOL],
        tool_choice="required",
        temperature=0.2,
        top_p=0.5,
        max_output_tokens=64,
        metadata={"k": "v"},
        user="u",
        reasoning={"effort": "low", "summary": "auto"},
        text={"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}, "verbosity": "low"},
        previous_response_id="resp_0",
        parallel_tool_calls=False,
        store=False,
        truncation="auto",
        service_tier="flex",
    )
    got = translate.response_object(req, response_id="resp_1", created_at=100, completion=completion({"content": "{}"}))
    check_response(got)
    assert {
        k: got[k]
        for k in (
            "id",
            "object",
            "created_at",
            "model",
            "instructions",
            "tool_choice",
            "temperature",
            "top_p",
            "max_output_tokens",
            "metadata",
            "user",
            "reasoning",
            "text",
            "previous_response_id",
            "parallel_tool_calls",
            "store",
            "truncation",
            "service_tier",
            "background",
            "error",
        )
    } == {
        "id": "resp_1",
        "object": "response",
        "created_at": 100,
        "model": "m",
        "instructions": "be brief",
        "tool_choice": "required",
        "temperature": 0.2,
        "top_p": 0.5,
        "max_output_tokens": 64,
        "metadata": {"k": "v"},
        "user": "u",
        "reasoning": {"effort": "low", "summary": "auto"},
        "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}, "verbosity": "low"},
        "previous_response_id": "resp_0",
        "parallel_tool_calls": False,
        "store": False,
        "truncation": "auto",
        "service_tier": "flex",
        "background": False,
        "error": None,
    }
    assert got["tools"] == [{**TOOL, "strict": None}]


def test_defaults_echoed_as_openai_does() -> None:
    got = translate.skeleton(request(input="hi"), response_id="resp_1", created_at=1)
    check_response(got)
    assert got["status"] == "in_progress" and got["output"] == [] and got["usage"] is None
    assert (got["temperature"], got["top_p"], got["tool_choice"], got["truncation"], got["parallel_tool_calls"]) == (
        1.0,
        1.0,
        "auto",
        "disabled",
        True,
    )
    assert got["text"] == {"format": {"type": "text"}, "verbosity": "medium"}
    assert got["metadata"] == {} and got["tools"] == [] and got["store"] is True


@pytest.mark.parametrize("status", ["cancelled", "failed", "queued"])
def test_status_override(status: str) -> None:
    got = translate.response_object(
        request(input="hi"),
        response_id="r",
        created_at=1,
        completion=completion({"content": "x"}),
        status_override=status,
    )
    assert got["status"] == status and got["completed_at"] is None


# (chat usage, Responses usage's details)
USAGES = [
    (None, None),
    ({"prompt_tokens": 3, "completion_tokens": 4}, {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}),
    (
        {
            "prompt_tokens": 30,
            "completion_tokens": 40,
            "total_tokens": 70,
            "prompt_tokens_details": {"cached_tokens": 20},
            "completion_tokens_details": {"reasoning_tokens": 25},
        },
        {
            "input_tokens": 30,
            "output_tokens": 40,
            "total_tokens": 70,
            "input_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 25},
        },
    ),
]


@pytest.mark.parametrize(("usage", "expected"), USAGES)
def test_usage(usage: dict[str, Any] | None, expected: dict[str, Any] | None) -> None:
    got = translate.response_usage(usage)
    if expected is None:
        assert got is None
        return
    assert got is not None
    assert {k: got[k] for k in expected} == expected
    check("ResponseUsage", got)


# ---- what the next turn needs back: signed thinking, Gemini's thought signatures ---------------------------

THINKING = [{"type": "thinking", "thinking": "hm", "signature": "sig=="}, {"type": "redacted_thinking", "data": "xyz"}]
GEMINI_CALL = {**CHAT_CALL, "extra_content": {"google": {"thought_signature": "ts=="}}}


def test_thinking_blocks_ride_in_encrypted_content_and_come_back() -> None:
    """Anthropic's and Bedrock's signed thinking blocks go out in the reasoning item and, read back as
    history, reach the assistant message they belong to, ahead of its tool call."""
    message = {"content": None, "reasoning_content": "hm", "thinking_blocks": THINKING, "tool_calls": [CHAT_CALL]}
    got = translate.response_object(
        request(input="hi"),
        response_id="r",
        created_at=1,
        completion=completion(message, "tool_calls"),
        make_id=counter(),
    )
    check_response(got)
    reasoning = got["output"][0]
    assert reasoning["type"] == "reasoning" and reasoning["summary"] == [{"type": "summary_text", "text": "hm"}]
    assert carried.uncarried(reasoning["encrypted_content"]) == THINKING
    history = [*translate.input_items(request(input="hi"), make_id=counter()), *got["output"]]
    output = {"type": "function_call_output", "call_id": "call_1", "output": "1"}
    assert chat(history, input=[output])["messages"] == [
        USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [CHAT_CALL],
            "reasoning_content": "hm",
            "thinking_blocks": THINKING,
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "1"},
    ]


def test_redacted_thinking_alone_still_makes_a_reasoning_item() -> None:
    message = {"content": "ok", "thinking_blocks": [THINKING[1]]}
    got = translate.response_object(request(input="hi"), response_id="r", created_at=1, completion=completion(message))
    check_response(got)
    assert got["output"][0]["summary"] == [] and carried.uncarried(got["output"][0]["encrypted_content"]) == [
        THINKING[1]
    ]


@pytest.mark.parametrize(
    "content", [None, "", "gAAAAopenai-encrypted", "inferplex.v1:!!!", "inferplex.v1:bm90IGpzb24", 3]
)
def test_encrypted_content_not_ours_is_dropped(content: Any) -> None:
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": content}
    assert chat(input=[USER, item, {"role": "assistant", "content": "a"}])["messages"][-1] == {
        "role": "assistant",
        "content": "a",
    }


def test_gemini_thought_signatures_go_out_with_the_call_and_come_back() -> None:
    got = translate.response_object(
        request(input="hi"),
        response_id="r",
        created_at=1,
        completion=completion({"content": None, "tool_calls": [GEMINI_CALL]}, "tool_calls"),
    )
    check_response(got)
    assert got["output"][0]["extra_content"] == GEMINI_CALL["extra_content"]
    assert chat(got["output"], input="next")["messages"][0] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [GEMINI_CALL],
    }


def test_cache_writes_reported_as_an_anthropic_style_upstream_names_them() -> None:
    got = translate.response_usage({"prompt_tokens": 10, "completion_tokens": 1, "cache_creation_input_tokens": 4})
    assert got is not None and got["input_tokens_details"] == {"cached_tokens": 0, "cache_write_tokens": 4}


def test_items_for_openai_lose_what_only_this_translation_reads() -> None:
    got = translate.response_object(
        request(input="hi"),
        response_id="r",
        created_at=1,
        completion=completion(
            {"content": None, "thinking_blocks": THINKING, "tool_calls": [GEMINI_CALL]}, "tool_calls"
        ),
        make_id=counter(),
    )
    reasoning, call = got["output"]
    assert carried.for_openai(reasoning) is None
    assert carried.for_openai(call) == {k: v for k, v in call.items() if k != "extra_content"}
    openai_reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"}
    assert carried.for_openai(openai_reasoning) is openai_reasoning
    assert carried.for_openai(USER) is USER
