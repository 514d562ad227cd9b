"""The native pass-through's pure parts (responses_api/native.py), and the fake upstream's `/v1/responses`
held to OpenAI's published schemas, its stream grammar and the official SDK.

The pipeline side (routing, retries, fallbacks, settlement) is in test_native_pipeline.py.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from inferplex.responses_api.carried import carried
from inferplex.responses_api.native import as_input, chat_usage, delta_chars, present, replayable, upstream_body
from inferplex.responses_api.wire import ResponsesRequest
from tests.conftest import UPSTREAM_KEY
from tests.fakes.openai_upstream import FakeOpenAI
from tests.responses_api.schema import check_event, check_response, check_stream, sse_events

USER = {"type": "message", "role": "user", "content": "hi"}
ANSWER = {
    "type": "message",
    "role": "assistant",
    "id": "msg_1",
    "status": "completed",
    "content": [{"type": "output_text", "text": "hello", "annotations": []}],
}
THOUGHT = {"type": "reasoning", "id": "rs_1", "summary": []}
SEALED = {**THOUGHT, "encrypted_content": "gAAAA"}
STORED_USER = {
    "id": "msg_ab12",
    "type": "message",
    "role": "user",
    "status": "completed",
    "content": [{"type": "input_text", "text": "hi"}],
}
CALL = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}
OUTPUT = {"id": "fco_1", "type": "function_call_output", "call_id": "call_1", "output": "42"}


@pytest.mark.parametrize(
    ("wire", "history", "expected"),
    [
        # no history: the caller's body, store off upstream, the gateway's own fields out
        ({"model": "m", "input": "hi"}, [], {"model": "m", "input": "hi", "store": False}),
        (
            {"model": "m", "input": "hi", "store": True, "background": True, "previous_response_id": "resp_1"},
            [],
            {"model": "m", "input": "hi", "store": False},
        ),
        # a string input after history becomes OpenAI's one user message
        (
            {"model": "m", "input": "again", "previous_response_id": "resp_1"},
            [USER, ANSWER],
            {
                "model": "m",
                "store": False,
                "input": [USER, ANSWER, {"type": "message", "role": "user", "content": "again"}],
            },
        ),
        # items after history, as they are; hosted tools and unknown fields pass through
        (
            {"model": "m", "input": [USER], "tools": [{"type": "web_search"}], "x_vendor": 1},
            [ANSWER],
            {"model": "m", "input": [ANSWER, USER], "tools": [{"type": "web_search"}], "x_vendor": 1, "store": False},
        ),
        # reasoning the upstream cannot look up (no encrypted content) is left out; sealed reasoning is kept
        (
            {"model": "m", "input": "go on"},
            [USER, THOUGHT, ANSWER],
            {
                "model": "m",
                "store": False,
                "input": [USER, ANSWER, {"type": "message", "role": "user", "content": "go on"}],
            },
        ),
        (
            {"model": "m", "input": [USER]},
            [SEALED, ANSWER],
            {"model": "m", "store": False, "input": [SEALED, ANSWER, USER]},
        ),
        # what the translation wrote for other providers: their signed thinking dropped, Gemini's signature off
        (
            {"model": "m", "input": [USER]},
            [
                {**THOUGHT, "encrypted_content": carried([{"type": "thinking", "thinking": "t", "signature": "s"}])},
                {**CALL, "extra_content": {"google": {"thought_signature": "sig"}}},
            ],
            {"model": "m", "store": False, "input": [{k: v for k, v in CALL.items() if k != "id"}, USER]},
        ),
        # a call after reasoning left out loses the id that pairs them; the next turn's items are as they were
        (
            {"model": "m", "input": "next"},
            [USER, THOUGHT, CALL, {**CALL, "id": "fc_2"}, OUTPUT, ANSWER, CALL],
            {
                "model": "m",
                "store": False,
                "input": [
                    USER,
                    {k: v for k, v in CALL.items() if k != "id"},
                    {k: v for k, v in CALL.items() if k != "id"},
                    {k: v for k, v in OUTPUT.items() if k != "id"},
                    ANSWER,
                    CALL,
                    {"type": "message", "role": "user", "content": "next"},
                ],
            },
        ),
        # no input at all (a follow-up that only continues): the history alone
        ({"model": "m"}, [USER, ANSWER], {"model": "m", "store": False, "input": [USER, ANSWER]}),
    ],
)
def test_upstream_body(wire: dict[str, Any], history: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    before = repr(wire)
    assert upstream_body(wire, history) == expected
    assert repr(wire) == before  # the caller's object is not changed


@pytest.mark.parametrize(
    ("item", "sent"),
    [
        # the ids the gateway gave the caller's input: a user message has no id upstream, a tool output need not
        (STORED_USER, {k: v for k, v in STORED_USER.items() if k != "id"}),
        (
            {**STORED_USER, "role": "developer"},
            {k: v for k, v in STORED_USER.items() if k != "id"} | {"role": "developer"},
        ),
        (OUTPUT, {k: v for k, v in OUTPUT.items() if k != "id"}),
        # an answer's items keep theirs (the upstream issued them, or the translation in its format)
        (ANSWER, ANSWER),
        (CALL, CALL),
        (SEALED, SEALED),
        (USER, USER),
    ],
)
def test_history_items_as_upstream_input(item: dict[str, Any], sent: dict[str, Any]) -> None:
    assert as_input(item) == sent


@pytest.mark.parametrize(
    ("item", "kept"),
    [(USER, True), (ANSWER, True), (THOUGHT, False), (SEALED, True), ({"type": "function_call"}, True)],
)
def test_replayable(item: dict[str, Any], kept: bool) -> None:
    assert replayable(item) is kept


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (None, None),
        ("nope", None),
        (
            {
                "input_tokens": 10,
                "output_tokens": 4,
                "total_tokens": 14,
                "input_tokens_details": {"cached_tokens": 3, "cache_write_tokens": 1},
                "output_tokens_details": {"reasoning_tokens": 2},
            },
            {
                "prompt_tokens": 10,
                "completion_tokens": 4,
                "total_tokens": 14,
                "prompt_tokens_details": {"cached_tokens": 3, "cache_write_tokens": 1},
                "completion_tokens_details": {"reasoning_tokens": 2},
            },
        ),
        (
            {"input_tokens": 5, "output_tokens": 1},
            {
                "prompt_tokens": 5,
                "completion_tokens": 1,
                "total_tokens": 6,
                "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        ),
    ],
)
def test_chat_usage(usage: Any, expected: Any) -> None:
    assert chat_usage(usage) == expected


@pytest.mark.parametrize(
    ("event", "chars"),
    [
        ({"type": "response.output_text.delta", "delta": "abc"}, 3),
        ({"type": "response.function_call_arguments.delta", "delta": '{"a"'}, 4),
        ({"type": "response.reasoning_summary_text.delta", "delta": "xy"}, 2),
        ({"type": "response.output_text.done", "text": "abc"}, 0),
        ({"type": "response.created", "response": {}}, 0),
    ],
)
def test_delta_chars(event: dict[str, Any], chars: int) -> None:
    assert delta_chars(event) == chars


def test_present_shows_the_gateways_fields() -> None:
    request = ResponsesRequest.model_validate({"model": "pub", "input": "hi", "previous_response_id": "resp_prev"})
    upstream = {
        "id": "resp_upstream",
        "model": "gpt-x-2025",
        "store": False,
        "background": False,
        "previous_response_id": None,
        "output": [],
    }
    shown = present(upstream, request, response_id="resp_ours", model="pub")
    assert shown["id"] == "resp_ours" and shown["model"] == "pub"
    assert shown["store"] is True and shown["previous_response_id"] == "resp_prev" and shown["background"] is False


# ---- the fake upstream's /v1/responses ----------------------------------------------------------------------


def _client(fake: FakeOpenAI) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.base_url, api_key=UPSTREAM_KEY, max_retries=0)


def _raw_stream(fake: FakeOpenAI, body: dict[str, Any]) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {UPSTREAM_KEY}"}
    r = httpx.post(fake.base_url + "/responses", json={**body, "stream": True}, headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    for block in r.text.strip().split("\n\n"):  # `event:` names the data's own type, as OpenAI's stream does
        name, data = block.split("\n", 1)
        assert name.removeprefix("event: ") in data
    return sse_events(r.text)


@pytest.mark.parametrize(
    "body",
    [
        {"model": "gpt-x", "input": "hello there"},
        {"model": "tool-x", "input": "weather?", "tools": [{"type": "function", "name": "weather", "parameters": {}}]},
        {
            "model": "reason-x",
            "input": "think",
            "reasoning": {"summary": "auto"},
            "include": ["reasoning.encrypted_content"],
        },
        {"model": "search-x", "input": "news", "tools": [{"type": "web_search"}]},
        {"model": "gpt-x", "input": " ".join(["word"] * 30), "max_output_tokens": 16},
    ],
)
def test_the_fake_speaks_openais_grammar(fake_openai: FakeOpenAI, body: dict[str, Any]) -> None:
    events = _raw_stream(fake_openai, body)
    if body["model"].startswith("search-"):  # a hosted tool's events: the checker's grammar knows the translated ones
        for event in events:
            check_event(event)
        final = events[-1]["response"]
    else:
        final = check_stream(events)
    buffered = _client(fake_openai).responses.create(**body)
    check_response(buffered.model_dump(mode="json", exclude_unset=True))
    assert [i.type for i in buffered.output] == [i["type"] for i in final["output"]]
    assert buffered.status == final["status"]


def test_the_fake_streams_through_the_sdk(fake_openai: FakeOpenAI) -> None:
    with _client(fake_openai).responses.stream(model="gpt-x", input="hello there") as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == final.output_text == "echo: hello there"


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"input": "hi"}, 400, "model"),
        ({"model": "m", "input": "hi", "previous_response_id": "resp_x"}, 404, "previous_response_id"),
        ({"model": "m", "input": "hi", "store": False, "background": True}, 400, "background"),
        ({"model": "m", "input": "hi", "max_output_tokens": 8}, 400, "max_output_tokens"),
        ({"model": "m", "input": "hi", "stream_options": {}}, 400, "stream_options"),
        ({"model": "m", "input": "hi", "provider": "x"}, 400, "provider"),
        ({"model": "m", "input": [{"type": "bogus"}]}, 400, "input[0].type"),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, 400, "input[0].role"),
        ({"model": "m", "input": [STORED_USER]}, 400, "input[0].id"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]},
            400,
            "input[0].content[0].type",
        ),
        (
            {"model": "m", "input": [{"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}]},
            400,
            "input[0].content[0].type",
        ),
        ({"model": "m", "input": [{"type": "function_call", "call_id": "c"}]}, 400, "input[0].name"),
        ({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}, 404, "input"),
        ({"model": "m", "store": False, "input": [THOUGHT]}, 404, "input"),
        ({"model": "m", "input": "hi", "tools": [{"type": "function"}]}, 400, "tools[0].name"),
    ],
)
def test_the_fake_refuses_what_openai_refuses(
    fake_openai: FakeOpenAI, body: dict[str, Any], status: int, param: str
) -> None:
    headers = {"Authorization": f"Bearer {UPSTREAM_KEY}"}
    r = httpx.post(fake_openai.base_url + "/responses", json=body, headers=headers, timeout=10)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param
