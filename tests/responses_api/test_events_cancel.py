"""`ResponseEvents.cancel`: a run stopped by its caller (a background response cancelled) closes its open item
with the `.done` events OpenAI's stream would send, and the response keeps the output so far and the usage
the settled stream was charged for (responses_api/background.py writes both)."""

from __future__ import annotations

from typing import Any

import pytest

from inferplex.responses_api import translate
from inferplex.responses_api.events import ResponseEvents
from inferplex.responses_api.wire import parse
from tests.responses_api.schema import check_event, check_response
from tests.responses_api.test_events import call, counter, delta

USAGE = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
TEXT_CLOSE = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
CALL_CLOSE = ["response.function_call_arguments.done", "response.output_item.done"]
REASONING_CLOSE = [
    "response.reasoning_summary_text.done",
    "response.reasoning_summary_part.done",
    "response.output_item.done",
]

CASES = [
    # (chunks fed before the cancel, the closing events, the output as (type, status, text))
    ([], [], []),
    ([delta(content="tick "), delta(content="tick")], TEXT_CLOSE, [("message", "incomplete", "tick tick")]),
    ([delta(reasoning_content="hmm")], REASONING_CLOSE, [("reasoning", "incomplete", "hmm")]),
    (
        [delta(reasoning_content="hmm"), delta(content="par")],
        TEXT_CLOSE,
        [("reasoning", "completed", "hmm"), ("message", "incomplete", "par")],
    ),
    (
        [delta(tool_calls=[call(0, "call_1", "get_weather", '{"ci')])],
        CALL_CLOSE,
        [("function_call", "incomplete", '{"ci')],
    ),
]


def text_of(item: dict[str, Any]) -> str:
    if item["type"] == "message":
        return "".join(part["text"] for part in item["content"])
    if item["type"] == "reasoning":
        return "".join(part["text"] for part in item["summary"])
    return str(item["arguments"])


@pytest.mark.parametrize(("chunks", "closing", "output"), CASES)
def test_cancel_closes_the_open_item_and_keeps_the_output(
    chunks: list[dict[str, Any]], closing: list[str], output: list[tuple[str, str, str]]
) -> None:
    req = parse({"model": "m", "input": "hi", "background": True}).body
    events = ResponseEvents(translate.skeleton(req, response_id="resp_1", created_at=100), make_id=counter())
    out = events.start(queued=True)
    for chunk in chunks:
        out += events.feed(chunk)
    fed = len(out)
    out += events.cancel(USAGE)
    assert [e["type"] for e in out[fed:]] == closing
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    for event in out:
        check_event(event)
    response = events.response
    check_response(response)
    assert response["status"] == "cancelled"
    assert response["usage"] == translate.response_usage(USAGE)
    assert [(i["type"], i["status"], text_of(i)) for i in response["output"]] == output
    if closing:  # the last event closes the item as the response keeps it
        assert out[-1]["item"] == response["output"][-1]
