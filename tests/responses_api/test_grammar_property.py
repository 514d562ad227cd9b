"""Any chat stream a provider may send, cut anywhere, makes a Responses stream that fits OpenAI's grammar.

Hypothesis draws chat streams the way the gateway's adapters produce them: runs of reasoning, text,
refusal and tool calls in any order and number (calls one after another, as every provider streams them),
each cut into arbitrary pieces (empty ones included), the call's id and name on its first chunk, a
finish reason, the usage chunk. Each goes through `ResponseEvents` (responses_api/events.py), the
translator every translated stream uses, and must come out as a stream schema.check_stream accepts (every
event against OpenAI's schema, the grammar, deltas adding up to the final output) whose final response
holds exactly what was streamed: the same runs, in order, with the same text.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplex.responses_api import translate
from inferplex.responses_api.events import ResponseEvents
from inferplex.responses_api.wire import parse
from tests.responses_api.schema import check_stream

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
PIECES = st.lists(TEXT, min_size=1, max_size=5)
RUN = st.one_of(
    st.tuples(st.just("reasoning"), PIECES),
    st.tuples(st.just("text"), PIECES),
    st.tuples(st.just("refusal"), PIECES),
    st.tuples(st.just("call"), PIECES),
)
FINISH = st.sampled_from(["stop", "length", "tool_calls", "content_filter", None])
# the pipeline asks every upstream stream for its usage (stream_options.include_usage)
USAGE = st.builds(
    lambda p, c: {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
    st.integers(0, 10_000),
    st.integers(0, 10_000),
)


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def chat_stream(runs: list[tuple[str, list[str]]], finish: str | None, usage: dict[str, int]) -> list[dict[str, Any]]:
    chunks = [chunk({"role": "assistant", "content": ""})]
    calls = itertools.count()
    for kind, pieces in runs:
        if kind == "call":
            index = next(calls)
            first = {"index": index, "id": f"call_{index}", "type": "function"}
            chunks.append(chunk({"tool_calls": [{**first, "function": {"name": f"f{index}", "arguments": ""}}]}))
            chunks += [chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}) for p in pieces]
        else:
            field = {"reasoning": "reasoning_content", "text": "content", "refusal": "refusal"}[kind]
            chunks += [chunk({field: p}) for p in pieces]
    chunks.append(chunk({}, finish))
    chunks.append({**chunk({}), "choices": [], "usage": usage})
    return chunks


def expected_output(runs: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """(item type, its texts) as the final response must hold them: runs with no text vanish (except a
    call), a text and a refusal next to each other are parts of one message, runs of one kind in a row
    are one item (one part)."""
    out: list[tuple[str, list[tuple[str, str]]]] = []
    for kind, pieces in runs:
        text = "".join(pieces)
        if kind == "call":
            out.append(("function_call", [("arguments", text)]))
            continue
        if not text:
            continue
        item = "reasoning" if kind == "reasoning" else "message"
        part = "output_text" if kind == "text" else kind
        if out and out[-1][0] == item:
            if out[-1][1][-1][0] == part:
                out[-1][1][-1] = (part, out[-1][1][-1][1] + text)
            else:
                out[-1][1].append((part, text))
        else:
            out.append((item, [(part, text)]))
    return [(item, [text for _, text in parts]) for item, parts in out] or [("message", [""])]


def texts_of(item: dict[str, Any]) -> tuple[str, list[str]]:
    if item["type"] == "function_call":
        return "function_call", [item["arguments"]]
    if item["type"] == "reasoning":
        return "reasoning", [part["text"] for part in item["summary"]]
    return "message", [part.get("text", part.get("refusal")) for part in item["content"]]


def translated(runs: list[tuple[str, list[str]]], finish: str | None, usage: dict[str, int]) -> dict[str, Any]:
    """The chat stream of `runs` through ResponseEvents: checked against the grammar, its final response."""
    request = parse({"model": "m", "input": "hi"}).body
    ids = itertools.count()
    events = ResponseEvents(
        translate.skeleton(request, response_id="resp_1", created_at=100), make_id=lambda p: f"{p}_{next(ids)}"
    )
    out = events.start()
    for c in chat_stream(runs, finish, usage):
        out += events.feed(c)
    out += events.finish(completed_at=101)
    final = check_stream(out)
    assert final == events.response
    return final


@settings(max_examples=150, deadline=None)
@given(runs=st.lists(RUN, max_size=6), finish=FINISH, usage=USAGE)
def test_any_chat_stream_makes_a_conformant_responses_stream(
    runs: list[tuple[str, list[str]]], finish: str | None, usage: dict[str, int]
) -> None:
    final = translated(runs, finish, usage)
    assert [texts_of(item) for item in final["output"]] == expected_output(runs)
    calls = [item for item in final["output"] if item["type"] == "function_call"]
    assert [(c["call_id"], c["name"]) for c in calls] == [(f"call_{i}", f"f{i}") for i in range(len(calls))]


# what the property test found first (fixed in 15c204f): a message part of a kind opened a second time (text,
# refusal, text) started from the first one's text
@pytest.mark.parametrize("kinds", [("text", "refusal", "text"), ("refusal", "text", "refusal")])
def test_a_reopened_part_holds_its_own_text(kinds: tuple[str, str, str]) -> None:
    runs = [(kind, [f"{kind}{i}"]) for i, kind in enumerate(kinds)]
    final = translated(runs, "stop", {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4})
    assert [texts_of(item) for item in final["output"]] == expected_output(runs)
