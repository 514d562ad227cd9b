"""The checker itself (schema.py): it passes streams shaped as OpenAI's own and catches each kind of break.

`openai_stream()` is what OpenAI's API sends for a short text answer followed by a function call (the
shapes of its API reference's streaming examples); each row of BROKEN changes one thing a client relies
on and must be caught, so a green grammar test against the gateway means something.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.responses_api.schema import (
    check_cancelled_stream,
    check_event,
    check_response,
    check_stream,
    problems,
    sse_events,
)

RESPONSE: dict[str, Any] = {
    "id": "resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654",
    "object": "response",
    "created_at": 1741290958,
    "status": "in_progress",
    "error": None,
    "incomplete_details": None,
    "instructions": "You are a helpful assistant.",
    "max_output_tokens": None,
    "model": "gpt-4.1-2025-04-14",
    "output": [],
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "reasoning": {"effort": None, "summary": None},
    "store": True,
    "temperature": 1.0,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "strict": True,
        }
    ],
    "top_p": 1.0,
    "truncation": "disabled",
    "usage": None,
    "user": None,
    "metadata": {},
}
MESSAGE = {"id": "msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654", "type": "message", "role": "assistant"}
CALL = {"id": "fc_67c9fdd0f2b08190a1d8e2c9e4d5f6a707b8b0ad4e5eb654", "type": "function_call"}
CALL_FIELDS = {"call_id": "call_12345xyz", "name": "get_weather"}
TEXT = {"type": "output_text", "annotations": [], "logprobs": []}


def openai_stream() -> list[dict[str, Any]]:
    message_done = {**MESSAGE, "status": "completed", "content": [{**TEXT, "text": "Hi there!"}]}
    call_done = {**CALL, "status": "completed", "arguments": '{"city":"Paris"}', **CALL_FIELDS}
    final = {
        **RESPONSE,
        "status": "completed",
        "output": [message_done, call_done],
        "usage": {
            "input_tokens": 37,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 11,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 48,
        },
    }
    at = {"output_index": 0, "item_id": MESSAGE["id"]}
    fc = {"output_index": 1, "item_id": CALL["id"]}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": RESPONSE},
        {"type": "response.in_progress", "response": RESPONSE},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**MESSAGE, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **at, "content_index": 0, "part": {**TEXT, "text": ""}},
        {"type": "response.output_text.delta", **at, "content_index": 0, "delta": "Hi", "logprobs": []},
        {"type": "response.output_text.delta", **at, "content_index": 0, "delta": " there!", "logprobs": []},
        {"type": "response.output_text.done", **at, "content_index": 0, "text": "Hi there!", "logprobs": []},
        {"type": "response.content_part.done", **at, "content_index": 0, "part": {**TEXT, "text": "Hi there!"}},
        {"type": "response.output_item.done", "output_index": 0, "item": message_done},
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {**CALL, "status": "in_progress", "arguments": "", **CALL_FIELDS},
        },
        {"type": "response.function_call_arguments.delta", **fc, "delta": '{"city":'},
        {"type": "response.function_call_arguments.delta", **fc, "delta": '"Paris"}'},
        {"type": "response.function_call_arguments.done", **fc, "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "response.output_item.done", "output_index": 1, "item": call_done},
        {"type": "response.completed", "response": final},
    ]
    return [{**e, "sequence_number": i} for i, e in enumerate(events)]


def test_openai_shaped_stream_passes() -> None:
    final = check_stream(openai_stream())
    assert final["status"] == "completed"
    check_response(final)


def test_sse_framing_is_read_as_openai_writes_it() -> None:
    import orjson

    events = openai_stream()
    body = "".join(f"event: {e['type']}\ndata: {orjson.dumps(e).decode()}\n\n" for e in events)
    assert sse_events(body) == events
    with pytest.raises(AssertionError):
        sse_events(body + "data: [DONE]\n\n")
    with pytest.raises(AssertionError):
        sse_events(body.replace("event: response.completed", "event: response.done"))


def _set(index: int, path: str, value: Any) -> Callable[[list[dict[str, Any]]], None]:
    def change(events: list[dict[str, Any]]) -> None:
        node: Any = events[index]
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[keys[-1]] = value

    return change


def _drop(index: int) -> Callable[[list[dict[str, Any]]], None]:
    def change(events: list[dict[str, Any]]) -> None:
        del events[index]
        for i, e in enumerate(events):
            e["sequence_number"] = i

    return change


def _swap(a: int, b: int) -> Callable[[list[dict[str, Any]]], None]:
    def change(events: list[dict[str, Any]]) -> None:
        events[a], events[b] = events[b], events[a]
        events[a]["sequence_number"], events[b]["sequence_number"] = a, b

    return change


BROKEN: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "sequence gap": _set(5, "sequence_number", 9),
    "no in_progress": _drop(1),
    "no terminal event": _drop(14),
    "delta without logprobs (schema)": lambda ev: ev[4].pop("logprobs"),
    "unknown event type": _set(4, "type", "response.output_text.append"),
    "text done differs from deltas": _set(6, "text", "Hi"),
    "part done differs": _set(7, "part.text", "Hello"),
    "item done differs": _set(8, "item.content.0.text", "Hi there"),
    "wrong item_id": _set(5, "item_id", "msg_other"),
    "wrong output_index": _set(10, "output_index", 0),
    "item added twice at 0": _set(9, "output_index", 0),
    "part never done": _drop(7),
    "arguments done differ": _set(12, "arguments", "{}"),
    "function name missing on done (schema)": lambda ev: ev[12].pop("name"),
    "call_id missing (schema)": lambda ev: ev[13]["item"].pop("call_id"),
    "final output is not the items": _set(14, "response.output", []),
    "completed with status in_progress": _set(14, "response.status", "in_progress"),
    "completed without usage": _set(14, "response.usage", None),
    "another response id": _set(14, "response.id", "resp_other"),
    "another model at the end": _set(14, "response.model", "gpt-4o"),
    "delta before its part": _swap(3, 4),
    "status outside the enum (schema)": _set(0, "response.status", "running"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_each_break_is_caught(case: str) -> None:
    events = copy.deepcopy(openai_stream())
    BROKEN[case](events)
    with pytest.raises(AssertionError):
        check_stream(events)


def test_event_and_response_schemas_report_where() -> None:
    assert problems("Response", {**RESPONSE, "object": "chat.completion"})[0].startswith("object:")
    with pytest.raises(AssertionError, match="unknown event type"):
        check_event({"type": "response.nope", "sequence_number": 0})
    with pytest.raises(AssertionError, match="ResponseTextDeltaEvent"):
        check_event({"type": "response.output_text.delta", "sequence_number": 0})


def test_a_cancelled_stream_ends_once_its_open_item_is_closed() -> None:
    events = openai_stream()
    assert check_cancelled_stream(events[:9]) == [events[8]["item"]]
    with pytest.raises(AssertionError, match="open"):
        check_cancelled_stream(events[:7])
    with pytest.raises(AssertionError, match="terminal"):
        check_cancelled_stream(events)
