"""The pure OpenAI shape helpers: replaying a buffered answer as chunks, and folding chunks back."""

from __future__ import annotations

from typing import Any

import pytest

from inferplex.translate.openai_shapes import assistant_message, choice, completion_chunks, completion_from_chunks

USAGE = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}


def _completion(*choices: dict[str, Any]) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 5, "model": "m", "choices": list(choices),
            "usage": USAGE}  # fmt: skip


@pytest.mark.parametrize(
    "response",
    [
        _completion(choice(assistant_message("Hello there.", []), "stop")),
        _completion(choice(assistant_message("", [CALL]), "tool_calls")),
        _completion(choice(assistant_message("Let me check.", [CALL, {**CALL, "id": "call_2"}]), "tool_calls")),
        _completion(choice(assistant_message("short", [], reasoning="think first"), "length")),
        _completion(choice(assistant_message("a", []), "stop", 0), choice(assistant_message("b", []), "stop", 1)),
    ],
    ids=["text", "tool-call", "text-and-two-calls", "reasoning", "two-choices"],
)
def test_folding_the_replayed_chunks_gives_back_the_answer(response: dict[str, Any]) -> None:
    folded = completion_from_chunks(completion_chunks(response))
    assert folded["choices"] == response["choices"]
    assert (folded["id"], folded["model"], folded["usage"]) == ("chatcmpl-1", "m", USAGE)


def test_folding_merges_pieces_of_text_and_tool_call_arguments() -> None:
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    call = {"index": 0, "id": "call_9", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}
    chunks = [
        chunk({"role": "assistant", "content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({"tool_calls": [call]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
        chunk({}, "tool_calls"),
        {**head, "choices": [], "usage": USAGE},
    ]
    folded = completion_from_chunks(chunks)
    message = folded["choices"][0]["message"]
    assert message["content"] == "Hello" and folded["choices"][0]["finish_reason"] == "tool_calls"
    assert message["tool_calls"] == [
        {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ]
    assert folded["usage"] == USAGE
