"""Chat streams as Responses events (responses_api/events.py), as a table: the chunks an upstream sends, the
events the caller gets. Every stream is checked against OpenAI's schemas and grammar
(tests/responses_api/schema.py: sequence numbers, order, deltas adding up to the `.done` events and the
final output), read by the openai SDK's own stream accumulator, and its final response compared with the
buffered translation of the same answer (translate.response_object)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from openai import omit
from openai._models import construct_type
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from inferplex.responses_api import carried, translate
from inferplex.responses_api.events import ResponseEvents
from inferplex.responses_api.wire import parse
from tests.responses_api.schema import check_event, check_response, check_stream

USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def counter() -> translate.NewId:
    n = itertools.count()
    return lambda prefix: f"{prefix}_{next(n)}"


def delta(finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": fields, "finish_reason": finish}],
    }


def usage_chunk(usage: dict[str, Any] = USAGE) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [],
        "usage": usage,
    }


def call(index: int, call_id: str | None = None, name: str | None = None, arguments: str = "") -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    out: dict[str, Any] = {"index": index, "function": function}
    if call_id is not None:
        out.update(id=call_id, type="function")
    return out


def run(chunks: list[dict[str, Any]], **request: Any) -> tuple[ResponseEvents, list[dict[str, Any]]]:
    req = parse({"model": "m", "input": "hi", **request}).body
    events = ResponseEvents(translate.skeleton(req, response_id="resp_1", created_at=100), make_id=counter())
    out = events.start()
    for chunk in chunks:
        out += events.feed(chunk)
    out += events.finish(completed_at=105)
    return events, out


OPEN = ["response.created", "response.in_progress"]
TEXT_OPEN = ["response.output_item.added", "response.content_part.added"]
TEXT_CLOSE = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
REASONING_OPEN = ["response.output_item.added", "response.reasoning_summary_part.added"]
REASONING_CLOSE = [
    "response.reasoning_summary_text.done",
    "response.reasoning_summary_part.done",
    "response.output_item.done",
]
CALL_CLOSE = ["response.function_call_arguments.done", "response.output_item.done"]
TEXT_DELTA = "response.output_text.delta"
ARGS_DELTA = "response.function_call_arguments.delta"
SUMMARY_DELTA = "response.reasoning_summary_text.delta"
DONE = "response.completed"

# (name, chunks, the event types after created/in_progress, the final output as (type, text or arguments))
STREAMS = [
    (
        "text",
        [delta(role="assistant", content=""), delta(content="Hel"), delta(content="lo"), delta("stop"), usage_chunk()],
        [*TEXT_OPEN, TEXT_DELTA, TEXT_DELTA, *TEXT_CLOSE, DONE],
        [("message", "Hello")],
    ),
    (
        "usage in the finishing chunk",
        [delta(content="Hi"), {**delta("stop"), "usage": USAGE}],
        [*TEXT_OPEN, TEXT_DELTA, *TEXT_CLOSE, DONE],
        [("message", "Hi")],
    ),
    (
        "nothing at all: an empty message, as a buffered answer has",
        [delta(role="assistant"), delta("stop"), usage_chunk()],
        [*TEXT_OPEN, *TEXT_CLOSE, DONE],
        [("message", "")],
    ),
    (
        "reasoning then text",
        [
            delta(reasoning_content="Let me "),
            delta(reasoning_content="think"),
            delta(content="42"),
            delta("stop"),
            usage_chunk(),
        ],
        [*REASONING_OPEN, SUMMARY_DELTA, SUMMARY_DELTA, *REASONING_CLOSE, *TEXT_OPEN, TEXT_DELTA, *TEXT_CLOSE, DONE],
        [("reasoning", "Let me think"), ("message", "42")],
    ),
    (
        "one tool call",
        [
            delta(role="assistant", tool_calls=[call(0, "call_a", "get_weather")]),
            delta(tool_calls=[call(0, arguments='{"city"')]),
            delta(tool_calls=[call(0, arguments=':"Paris"}')]),
            delta("tool_calls"),
            usage_chunk(),
        ],
        ["response.output_item.added", ARGS_DELTA, ARGS_DELTA, *CALL_CLOSE, DONE],
        [("function_call", '{"city":"Paris"}')],
    ),
    (
        "text, then two tool calls, the second whole in one chunk",
        [
            delta(content="Checking."),
            delta(tool_calls=[call(0, "call_a", "f", "{}")]),
            delta(tool_calls=[call(1, "call_b", "g", '{"x":1}')]),
            delta("tool_calls"),
            usage_chunk(),
        ],
        [
            *TEXT_OPEN,
            TEXT_DELTA,
            *TEXT_CLOSE,
            "response.output_item.added",
            ARGS_DELTA,
            *CALL_CLOSE,
            "response.output_item.added",
            ARGS_DELTA,
            *CALL_CLOSE,
            DONE,
        ],
        [("message", "Checking."), ("function_call", "{}"), ("function_call", '{"x":1}')],
    ),
    (
        "a call with no arguments",
        [delta(tool_calls=[call(0, "call_a", "now")]), delta("tool_calls"), usage_chunk()],
        ["response.output_item.added", *CALL_CLOSE, DONE],
        [("function_call", "")],
    ),
    (
        "a refusal",
        [delta(refusal="I can't"), delta(refusal=" help"), delta("stop"), usage_chunk()],
        [
            "response.output_item.added",
            "response.content_part.added",
            "response.refusal.delta",
            "response.refusal.delta",
            "response.refusal.done",
            "response.content_part.done",
            "response.output_item.done",
            DONE,
        ],
        [("message", "I can't help")],
    ),
    (
        "cut short by max_output_tokens",
        [delta(content="Once upon"), delta("length"), usage_chunk()],
        [*TEXT_OPEN, TEXT_DELTA, *TEXT_CLOSE, "response.incomplete"],
        [("message", "Once upon")],
    ),
    (
        "stopped by a content filter",
        [delta(content="x"), delta("content_filter"), usage_chunk()],
        [*TEXT_OPEN, TEXT_DELTA, *TEXT_CLOSE, "response.incomplete"],
        [("message", "x")],
    ),
    (
        "a second choice is ignored (Responses has no n)",
        [
            delta(content="a"),
            {**delta(content="b"), "choices": [{"index": 1, "delta": {"content": "b"}, "finish_reason": None}]},
            delta("stop"),
            usage_chunk(),
        ],
        [*TEXT_OPEN, TEXT_DELTA, *TEXT_CLOSE, DONE],
        [("message", "a")],
    ),
]


def _content(item: dict[str, Any]) -> str:
    if item["type"] == "message":
        return "".join(p.get("text") or p.get("refusal") or "" for p in item["content"])
    if item["type"] == "reasoning":
        return "".join(p["text"] for p in item["summary"])
    return str(item["arguments"])


@pytest.mark.parametrize(("chunks", "kinds", "output"), [s[1:] for s in STREAMS], ids=[s[0] for s in STREAMS])
def test_stream(chunks: list[dict[str, Any]], kinds: list[str], output: list[tuple[str, str]]) -> None:
    events, out = run(chunks)
    assert [e["type"] for e in out] == OPEN + kinds
    final = check_stream(out)
    assert [(item["type"], _content(item)) for item in final["output"]] == output
    assert final == events.response
    assert final["usage"]["input_tokens"] == 7 and final["usage"]["total_tokens"] == 10


@pytest.mark.parametrize("chunks", [s[1] for s in STREAMS], ids=[s[0] for s in STREAMS])
def test_the_openai_sdk_reads_the_stream(chunks: list[dict[str, Any]]) -> None:
    """The SDK's `responses.stream()` accumulator takes every event and ends with the same response."""
    events, out = run(chunks)
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=[], text_format=omit)
    handled = []
    for event in out:
        handled += state.handle_event(construct_type(type_=ResponseStreamEvent, value=event))  # type: ignore[arg-type]
    last = handled[-1]
    assert last.type in ("response.completed", "response.incomplete")
    final = events.response
    text = "".join(
        p["text"] for i in final["output"] if i["type"] == "message" for p in i["content"] if p["type"] == "output_text"
    )
    assert last.response.output_text == text
    assert [i.id for i in last.response.output] == [i["id"] for i in final["output"]]


@pytest.mark.parametrize(
    ("message", "chunks"),
    [
        ({"content": "Hello"}, [delta(content="Hel"), delta(content="lo"), delta("stop"), usage_chunk()]),
        (
            {"content": "42", "reasoning_content": "hm"},
            [delta(reasoning_content="hm"), delta(content="42"), delta("stop"), usage_chunk()],
        ),
        (
            {
                "content": None,
                "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            [delta(tool_calls=[call(0, "call_a", "f", "{}")]), delta("tool_calls"), usage_chunk()],
        ),
        ({"content": "Hel"}, [delta(content="Hel"), delta("length"), usage_chunk()]),
    ],
)
def test_streamed_and_buffered_answers_are_the_same_response(
    message: dict[str, Any], chunks: list[dict[str, Any]]
) -> None:
    finish = chunks[-2]["choices"][0]["finish_reason"]
    completion = {
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": USAGE,
    }
    req = parse({"model": "m", "input": "hi"}).body
    buffered = translate.response_object(
        req, response_id="resp_1", created_at=100, completion=completion, completed_at=105, make_id=counter()
    )
    events, _ = run(chunks)
    assert events.response == buffered


def test_the_opening_events_carry_the_skeleton() -> None:
    _, out = run([delta(content="x"), delta("stop"), usage_chunk()], instructions="be brief", metadata={"k": "v"})
    for event in out[:2]:
        check_response(event["response"])
        assert event["response"]["status"] == "in_progress" and event["response"]["output"] == []
        assert event["response"]["instructions"] == "be brief" and event["response"]["metadata"] == {"k": "v"}
    assert out[-1]["response"]["completed_at"] == 105 and out[-1]["response"]["created_at"] == 100


def test_interleaved_call_arguments_end_up_whole() -> None:
    """A call's arguments coming after a later call started get no events of their own (its `.done` was
    sent) but are in the final response."""
    chunks = [
        delta(tool_calls=[call(0, "call_a", "f", '{"a":')]),
        delta(tool_calls=[call(1, "call_b", "g", "{}")]),
        delta(tool_calls=[call(0, arguments="1}")]),
        delta("tool_calls"),
        usage_chunk(),
    ]
    events, out = run(chunks)
    assert [i["arguments"] for i in events.response["output"]] == ['{"a":1}', "{}"]
    for event in out:
        check_event(event)


# (the error given, the error the response carries)
FAILURES = [
    ({"code": "rate_limit_exceeded", "message": "slow down"}, {"code": "rate_limit_exceeded", "message": "slow down"}),
    ({"code": "upstream_error", "message": "boom"}, {"code": "server_error", "message": "boom"}),
    (
        {"error": {"message": "bad", "type": "invalid_request_error", "code": None}},
        {"code": "server_error", "message": "bad"},
    ),
    ({}, {"code": "server_error", "message": "The response failed."}),
]


@pytest.mark.parametrize(("error", "carried"), FAILURES)
def test_fail(error: dict[str, Any], carried: dict[str, Any]) -> None:
    req = parse({"model": "m", "input": "hi"}).body
    events = ResponseEvents(translate.skeleton(req, response_id="resp_1", created_at=100), make_id=counter())
    out = events.start()
    out += events.feed(delta(reasoning_content="r"))
    out += events.feed(delta(content="partial"))
    out += events.fail(error)
    assert [e["type"] for e in out][-2:] == [TEXT_DELTA, "response.failed"]
    final = check_stream(out)
    assert final["status"] == "failed" and final["error"] == carried
    assert [(i["type"], i["status"]) for i in final["output"]] == [
        ("reasoning", "completed"),
        ("message", "incomplete"),
    ]
    assert final["output"][1]["content"][0]["text"] == "partial"
    assert events.response == final


def test_fail_before_any_output() -> None:
    req = parse({"model": "m", "input": "hi"}).body
    events = ResponseEvents(translate.skeleton(req, response_id="resp_1", created_at=100))
    out = events.start() + events.fail({"code": "server_error", "message": "x"})
    final = check_stream(out)
    assert final["output"] == [] and final["usage"] is None


def test_a_signed_thinking_block_is_carried_for_the_next_turn() -> None:
    chunks = [
        delta(reasoning_content="hm"),
        delta(reasoning_signature="sig"),
        delta(reasoning_signature="=="),
        delta(tool_calls=[{**call(0, "call_a", "f", "{}"), "extra_content": {"google": {"thought_signature": "ts"}}}]),
        delta("tool_calls"),
        usage_chunk(),
    ]
    events, out = run(chunks)
    final = check_stream(out)
    reasoning, function_call = final["output"]
    assert carried.uncarried(reasoning["encrypted_content"]) == [
        {"type": "thinking", "thinking": "hm", "signature": "sig=="}
    ]
    assert function_call["extra_content"] == {"google": {"thought_signature": "ts"}}
    assert events.response == final


def test_a_background_response_opens_queued() -> None:
    req = parse({"model": "m", "input": "hi", "background": True}).body
    events = ResponseEvents(translate.skeleton(req, response_id="resp_1", created_at=100, status="queued"))
    out = events.start(queued=True) + events.feed(delta(content="x")) + events.feed(delta("stop"))
    out += events.feed(usage_chunk()) + events.finish()
    assert [e["type"] for e in out[:3]] == ["response.created", "response.queued", "response.in_progress"]
    assert [e["response"]["status"] for e in out[:3]] == ["queued", "queued", "in_progress"]
    assert check_stream(out)["background"] is True
