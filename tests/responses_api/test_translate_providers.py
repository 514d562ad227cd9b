"""A Responses conversation, translated to chat, is one every native provider translation takes as it should:
a multi-turn exchange with instructions, an image, reasoning with a signed thinking block, text and a tool
call, the tool's output and a follow-up, read back from a stored history exactly as a `previous_response_id`
follow-up reads it. Anthropic gets its thinking block back ahead of its `tool_use`; Gemini its thought
signature on the `functionCall`; Bedrock the same turns."""

from __future__ import annotations

from typing import Any

from inferplex.canonical import ChatRequest
from inferplex.gateway_request import parse_request
from inferplex.responses_api import translate
from inferplex.responses_api.wire import ResponsesRequest, parse
from inferplex.translate import openai_to_anthropic, openai_to_bedrock, openai_to_gemini
from tests.responses_api.test_translate import counter

PNG = "data:image/png;base64,iVBORw0KGgo="
THINKING = {"type": "thinking", "thinking": "Look it up.", "signature": "c2ln"}
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


def first_turn() -> tuple[ResponsesRequest, list[dict[str, Any]]]:
    """The first request and the history a follow-up reads: its input items, then its output items."""
    request = parse(
        {
            "model": "m",
            "instructions": "Be brief.",
            "tools": [WEATHER],
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Weather where this is?"},
                        {"type": "input_image", "image_url": PNG},
                    ],
                }
            ],
        }
    ).body
    completion = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Checking.",
                    "reasoning_content": "Look it up.",
                    "thinking_blocks": [THINKING],
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                            "extra_content": {"google": {"thought_signature": "dHM="}},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    response = translate.response_object(
        request, response_id="resp_1", created_at=1, completion=completion, make_id=counter()
    )
    return request, [*translate.input_items(request, make_id=counter()), *response["output"]]


def follow_up() -> ChatRequest:
    _, history = first_turn()
    request = parse(
        {
            "model": "m",
            "instructions": "Be brief.",
            "tools": [WEATHER],
            "previous_response_id": "resp_1",
            "input": [
                {"type": "function_call_output", "call_id": "call_1", "output": '{"temp": 21}'},
                {"role": "user", "content": "And tomorrow?"},
            ],
        }
    ).body
    chat: ChatRequest = parse_request(ChatRequest, translate.to_chat(request, history)).body
    return chat


def test_anthropic_gets_its_signed_thinking_back_before_the_tool_use() -> None:
    body = openai_to_anthropic.build_request(follow_up(), "claude", 1024, stream=False)
    assert body["system"] == "Be brief."
    assert [turn["role"] for turn in body["messages"]] == ["user", "assistant", "user"]
    user, assistant, results = body["messages"]
    assert [b["type"] for b in user["content"]] == ["text", "image"]
    assert assistant["content"] == [
        THINKING,
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    assert [b["type"] for b in results["content"]] == ["tool_result", "text"]
    assert results["content"][0]["tool_use_id"] == "call_1"


def test_gemini_gets_its_thought_signature_back_on_the_call() -> None:
    body = openai_to_gemini.build_request(follow_up())
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert [turn["role"] for turn in body["contents"]] == ["user", "model", "user"]
    model = body["contents"][1]["parts"]
    call = next(p for p in model if "functionCall" in p)
    assert call == {
        "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
        "thoughtSignature": "dHM=",
    }
    response = next(p for p in body["contents"][2]["parts"] if "functionResponse" in p)
    assert response["functionResponse"]["name"] == "get_weather"


def test_bedrock_takes_the_same_turns() -> None:
    turns = openai_to_bedrock.build_messages(follow_up().messages)
    assert [turn["role"] for turn in turns] == ["user", "assistant", "user"]
    assistant = turns[1]["content"]
    assert any("reasoningContent" in block for block in assistant)
    assert any(block.get("toolUse", {}).get("toolUseId") == "call_1" for block in assistant)
    assert any(block.get("toolResult", {}).get("toolUseId") == "call_1" for block in turns[2]["content"])
