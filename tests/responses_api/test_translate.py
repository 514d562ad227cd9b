"""Responses requests to chat and chat completions to responses (responses_api/wire.py, translate.py), as
tables: one row per field or item kind, what chat receives, and every 400 naming the field it is about.
Every chat body is checked to be one the canonical parser takes; every response object and stored item is
checked against OpenAI's published schemas (tests/responses_api/schema.py)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from inferplex.canonical import ChatRequest
from inferplex.errors import InvalidRequest
from inferplex.gateway_request import parse_request
from inferplex.responses_api import translate
from inferplex.responses_api.wire import ResponsesRequest, parse
from tests.responses_api.schema import check


def request(**fields: Any) -> ResponsesRequest:
    return parse({"model": "m", **fields}).body


def counter() -> translate.NewId:
    n = itertools.count()
    return lambda prefix: f"{prefix}_{next(n)}"


def chat(history: list[dict[str, Any]] | None = None, **fields: Any) -> dict[str, Any]:
    body = translate.to_chat(request(**fields), history or [])
    parse_request(ChatRequest, dict(body))  # whatever the translation makes, chat takes
    return body


# ---- wire.py: parsing -------------------------------------------------------------------------------------

# (body fields, the param the 400 names)
REFUSED_AT_PARSE = [
    ({"model": ""}, "model"),
    ({"input": 3}, "input"),
    ({"input": []}, "input"),
    ({"input": [{"role": "user", "content": "a"}, 1]}, "input[1]"),
    ({"temperature": 3}, "temperature"),
    ({"top_p": -1}, "top_p"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"truncation": "sometimes"}, "truncation"),
    ({"tool_choice": "always"}, "tool_choice"),
    ({"stream_options": {"include_obfuscation": False}}, "stream_options"),
    ({"background": True, "store": False}, "background"),
    ({"previous_response_id": "resp_1", "conversation": "conv_1"}, "previous_response_id"),
    ({"text": {"format": {"type": "json_schema"}}}, "text.format"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"reasoning": {"summary": "long"}}, "reasoning.summary"),
    ({"metadata": {"k": 1}}, "metadata.k"),
    ({"store": "yes"}, "store"),
    ({"safety_identifier": "x" * 65}, "safety_identifier"),
]


@pytest.mark.parametrize(("fields", "param"), REFUSED_AT_PARSE)
def test_parse_refuses_with_the_field_named(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse({"model": "m", "input": "hi", **fields})
    assert err.value.param == param, err.value.message


def test_parse_takes_the_gateway_options_out_and_keeps_unknown_fields() -> None:
    got = parse({"model": "m", "input": "hi", "tags": "a,b", "provider": "p", "context_management": [1]})
    assert got.options.tags == ["a", "b"] and got.options.provider == "p"
    assert got.body.model_extra == {"context_management": [1]}
    assert "tags" not in got.wire() and "provider" not in got.wire()


@pytest.mark.parametrize(("sent", "stored"), [({}, True), ({"store": None}, True), ({"store": False}, False)])
def test_store_defaults_to_true(sent: dict[str, Any], stored: bool) -> None:
    assert request(input="hi", **sent).store is stored


def test_hosted_tools_parse_for_the_native_path() -> None:
    assert request(input="hi", tools=[{"type": "web_search"}]).tools == [{"type": "web_search"}]


# ---- to_chat: options -------------------------------------------------------------------------------------

TOOL = {"type": "function", "name": "get_weather", "description": "d", "parameters": {"type": "object"}}
CHAT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object"}},
}
USER = {"role": "user", "content": "hi"}

# (request fields besides model and input "hi", the chat body's fields besides model and messages)
OPTIONS = [
    ({}, {}),
    ({"tools": [TOOL]}, {"tools": [CHAT_TOOL]}),
    (
        {"tools": [{**TOOL, "strict": True}]},
        {"tools": [{"type": "function", "function": {**CHAT_TOOL["function"], "strict": True}}]},
    ),
    ({"tools": [TOOL], "parallel_tool_calls": False}, {"tools": [CHAT_TOOL], "parallel_tool_calls": False}),
    ({"parallel_tool_calls": False}, {}),  # no tools: nothing to call in parallel
    ({"tool_choice": "required"}, {"tool_choice": "required"}),
    (
        {"tool_choice": {"type": "function", "name": "f"}},
        {"tool_choice": {"type": "function", "function": {"name": "f"}}},
    ),
    (
        {"tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]}},
        {
            "tool_choice": {
                "type": "allowed_tools",
                "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "f"}}]},
            }
        },
    ),
    ({"text": {"format": {"type": "text"}}}, {}),
    ({"text": {"format": {"type": "json_object"}}}, {"response_format": {"type": "json_object"}}),
    (
        {"text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}, "strict": True}}},
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": {"type": "object"}, "strict": True},
            }
        },
    ),
    ({"text": {"verbosity": "low"}}, {}),
    ({"reasoning": {"effort": "low"}}, {"reasoning_effort": "low"}),
    ({"reasoning": {"effort": "max"}}, {"reasoning_effort": "xhigh"}),
    ({"reasoning": {"summary": "auto"}}, {}),
    ({"max_output_tokens": 100}, {"max_completion_tokens": 100}),
    ({"temperature": 0.5, "top_p": 0.9}, {"temperature": 0.5, "top_p": 0.9}),
    ({"stream": True}, {"stream": True, "stream_options": {"include_usage": True}}),
    # stored with the response or meaningless to chat, never sent upstream
    ({"metadata": {"k": "v"}, "user": "u", "service_tier": "flex", "store": False}, {}),
    ({"include": ["reasoning.encrypted_content"], "max_tool_calls": 3, "truncation": "disabled"}, {}),
    ({"prompt_cache_key": "k", "safety_identifier": "s", "top_logprobs": 2, "background": True}, {}),
    ({"context_management": [{"type": "compaction"}]}, {}),  # an unknown Responses field
]


@pytest.mark.parametrize(("fields", "expected"), OPTIONS)
def test_options(fields: dict[str, Any], expected: dict[str, Any]) -> None:
    assert chat(input="hi", **fields) == {"model": "m", "messages": [USER], **expected}


def test_stream_override_for_background_runs() -> None:
    body = translate.to_chat(request(input="hi"), [], stream=True)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert "stream" not in translate.to_chat(request(input="hi", stream=True), [], stream=False)


def test_instructions_come_first_and_are_not_history() -> None:
    history = [{"type": "message", "id": "msg_0", "role": "user", "content": [{"type": "input_text", "text": "a"}]}]
    body = chat(history, input="b", instructions="be brief")
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
    ]


# ---- to_chat: items ---------------------------------------------------------------------------------------

CALL = {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": '{"a":1}'}
CALL2 = {"type": "function_call", "call_id": "call_2", "name": "g", "arguments": "{}"}
CHAT_CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
CHAT_CALL2 = {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "{}"}}
IMAGE = {"type": "input_image", "image_url": "https://x/cat.png", "detail": "low"}
CHAT_IMAGE = {"type": "image_url", "image_url": {"url": "https://x/cat.png", "detail": "low"}}

# (input items, the chat messages)
ITEMS = [
    ("hello", [{"role": "user", "content": "hello"}]),
    ([{"role": "user", "content": "hello"}], [{"role": "user", "content": "hello"}]),
    (
        [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
            }
        ],
        [{"role": "user", "content": "ab"}],
    ),
    (
        [{"role": "user", "content": [{"type": "input_text", "text": "what is it?"}, IMAGE]}],
        [{"role": "user", "content": [{"type": "text", "text": "what is it?"}, CHAT_IMAGE]}],
    ),
    (
        [
            {
                "role": "user",
                "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"}],
            }
        ],
        [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "auto"}}
                ],
            }
        ],
    ),
    (
        [
            {
                "role": "user",
                "content": [
                    {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,AAAA"}
                ],
            }
        ],
        [
            {
                "role": "user",
                "content": [
                    {"type": "file", "file": {"file_data": "data:application/pdf;base64,AAAA", "filename": "a.pdf"}}
                ],
            }
        ],
    ),
    (
        [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}],
        [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}],
    ),
    (
        [{"role": "system", "content": "s"}, {"role": "developer", "content": [{"type": "input_text", "text": "d"}]}],
        [{"role": "system", "content": "s"}, {"role": "system", "content": "d"}],
    ),
    ([{"role": "assistant", "content": "earlier answer"}], [{"role": "assistant", "content": "earlier answer"}]),
    (
        [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "x", "annotations": []}],
            }
        ],
        [{"role": "assistant", "content": "x"}],
    ),
    (
        [{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}],
        [{"role": "assistant", "content": None, "refusal": "no"}],
    ),
    # a call and its output
    (
        [USER, CALL, {"type": "function_call_output", "call_id": "call_1", "output": "42"}],
        [
            USER,
            {"role": "assistant", "content": None, "tool_calls": [CHAT_CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        ],
    ),
    # consecutive calls: one assistant message
    (
        [
            USER,
            CALL,
            CALL2,
            {"type": "function_call_output", "call_id": "call_1", "output": "1"},
            {"type": "function_call_output", "call_id": "call_2", "output": "2"},
        ],
        [
            USER,
            {"role": "assistant", "content": None, "tool_calls": [CHAT_CALL, CHAT_CALL2]},
            {"role": "tool", "tool_call_id": "call_1", "content": "1"},
            {"role": "tool", "tool_call_id": "call_2", "content": "2"},
        ],
    ),
    # the assistant's text before its calls: the same assistant message
    (
        [USER, {"role": "assistant", "content": "let me look"}, CALL],
        [USER, {"role": "assistant", "content": "let me look", "tool_calls": [CHAT_CALL]}],
    ),
    # an output as parts
    (
        [
            CALL,
            {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
            },
        ],
        [
            {"role": "assistant", "content": None, "tool_calls": [CHAT_CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "ab"},
        ],
    ),
    (
        [CALL, {"type": "function_call_output", "call_id": "call_1", "output": [IMAGE]}],
        [
            {"role": "assistant", "content": None, "tool_calls": [CHAT_CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": [CHAT_IMAGE]},
        ],
    ),
    # reasoning rides on the assistant message after it, else is dropped
    (
        [
            USER,
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
            {"role": "assistant", "content": "a"},
        ],
        [USER, {"role": "assistant", "content": "a", "reasoning_content": "think"}],
    ),
    (
        [
            USER,
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "raw"}]},
            CALL,
        ],
        [USER, {"role": "assistant", "content": None, "tool_calls": [CHAT_CALL], "reasoning_content": "raw"}],
    ),
    ([{"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]}, USER], [USER]),
]


@pytest.mark.parametrize(("items", "messages"), ITEMS)
def test_items(items: Any, messages: list[dict[str, Any]]) -> None:
    assert chat(input=items)["messages"] == messages


def test_history_then_input_and_item_references() -> None:
    history = translate.input_items(request(input="first"), make_id=counter())
    history.append(translate.message_item("msg_out", "answer"))
    body = chat(history, input=[{"type": "item_reference", "id": "msg_0"}, {"role": "user", "content": "again"}])
    assert body["messages"] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "first"},
        {"role": "user", "content": "again"},
    ]


# (request fields, the param the 400 names)
REFUSED_IN_TRANSLATION = [
    ({"input": "hi", "tools": [TOOL, {"type": "web_search"}]}, "tools[1].type"),
    *[
        ({"input": "hi", "tools": [{"type": kind}]}, "tools[0].type")
        for kind in (
            "web_search_preview",
            "file_search",
            "code_interpreter",
            "computer_use_preview",
            "image_generation",
            "mcp",
            "local_shell",
            "shell",
            "apply_patch",
            "custom",
            "something_new",
        )
    ],
    ({"input": "hi", "tools": [{"type": "function"}]}, "tools[0].name"),
    ({"input": "hi", "tool_choice": {"type": "web_search_preview"}}, "tool_choice.type"),
    (
        {"input": "hi", "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "mcp"}]}},
        "tool_choice.tools[0]",
    ),
    ({"input": "hi", "conversation": "conv_1"}, "conversation"),
    ({"input": "hi", "prompt": {"id": "pmpt_1"}}, "prompt"),
    ({"input": "hi", "reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ({}, "input"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": "user", "content": 3}]}, "input[0].content"),
    ({"input": [USER, {"role": "user", "content": [{"type": "input_video"}]}]}, "input[1].content[0].type"),
    (
        {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}]},
        "input[0].content[0].image_url",
    ),
    (
        {"input": [{"role": "user", "content": [{"type": "input_file", "file_url": "https://x/a.pdf"}]}]},
        "input[0].content[0].file_url",
    ),
    (
        {"input": [{"role": "user", "content": [{"type": "input_file", "filename": "a.pdf"}]}]},
        "input[0].content[0].file_data",
    ),
    ({"input": [{"role": "system", "content": [IMAGE]}]}, "input[0].content"),
    ({"input": [{"role": "assistant", "content": [IMAGE]}]}, "input[0].content[0].type"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "input[0].arguments"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": 3}]}, "input[0].output"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type"),
    ({"input": [{"type": "item_reference", "id": "msg_unknown"}]}, "input[0].id"),
]


@pytest.mark.parametrize(("fields", "param"), REFUSED_IN_TRANSLATION)
def test_refused_in_translation(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        translate.to_chat(request(**fields), [])
    assert err.value.param == param, err.value.message
    assert err.value.status == 400


def test_a_hosted_tool_is_named_in_the_message() -> None:
    with pytest.raises(InvalidRequest, match=r"'web_search'.*only 'function' tools"):
        translate.to_chat(request(input="hi", tools=[{"type": "web_search"}]), [])


# ---- input_items ------------------------------------------------------------------------------------------


def test_input_items_as_openai_lists_them() -> None:
    items = translate.input_items(
        request(
            input=[
                {"role": "user", "content": "hi"},
                {
                    "type": "message",
                    "id": "msg_mine",
                    "role": "developer",
                    "content": [{"type": "input_text", "text": "d"}],
                },
                {"role": "assistant", "content": "earlier"},
                CALL,
                {"type": "function_call_output", "call_id": "call_1", "output": "42"},
            ]
        ),
        make_id=counter(),
    )
    assert items == [
        {
            "type": "message",
            "id": "msg_0",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_text", "text": "hi"}],
        },
        {
            "type": "message",
            "id": "msg_mine",
            "role": "developer",
            "status": "completed",
            "content": [{"type": "input_text", "text": "d"}],
        },
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "earlier", "annotations": [], "logprobs": []}],
        },
        {**CALL, "id": "fc_2", "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42", "id": "fco_3", "status": "completed"},
    ]
    for item in items:
        check("ItemResource", item)
        check("Item", item)  # read back as the next turn's history


def test_input_items_of_a_string() -> None:
    assert translate.input_items(request(input="hi"), make_id=counter()) == [
        {
            "type": "message",
            "id": "msg_0",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_text", "text": "hi"}],
        }
    ]
    assert translate.input_items(request(), make_id=counter()) == []


def test_stored_items_translate_as_the_input_did() -> None:
    """A follow-up reads the stored items back: they make the same chat messages as the input they were."""
    sent = [
        USER,
        {"role": "assistant", "content": "x"},
        CALL,
        {"type": "function_call_output", "call_id": "call_1", "output": "1"},
    ]
    stored = translate.input_items(request(input=sent), make_id=counter())
    assert chat(stored, input="next")["messages"][:-1] == chat(input=sent)["messages"]


# ---- truncation -------------------------------------------------------------------------------------------


def turns(n: int) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "x" * 60} for i in range(n)]


def test_truncate_keeps_everything_that_fits() -> None:
    messages = [{"role": "system", "content": "s"}, *turns(4)]
    assert translate.truncate(messages, 10_000) == messages


def test_truncate_drops_the_oldest_turns_never_the_system_nor_the_last() -> None:
    messages = [{"role": "system", "content": "s"}, *turns(10)]
    kept = translate.truncate(messages, 120)
    assert kept[0] == messages[0] and kept[-1] == messages[-1]
    assert kept[1:] == messages[-(len(kept) - 1) :] and len(kept) < len(messages)
    assert translate.estimate_tokens(kept) <= 120
    assert translate.truncate(messages, 1) == [messages[0], messages[-1]]


def test_truncate_keeps_a_call_with_its_outputs() -> None:
    call = {"role": "assistant", "content": None, "tool_calls": [CHAT_CALL, CHAT_CALL2]}
    outputs = [
        {"role": "tool", "tool_call_id": "call_1", "content": "1" * 200},
        {"role": "tool", "tool_call_id": "call_2", "content": "2"},
    ]
    messages = [*turns(2), call, *outputs, {"role": "user", "content": "and?"}]
    kept = translate.truncate(messages, translate.estimate_tokens([call, *outputs, messages[-1]]) + 5)
    assert kept == [call, *outputs, messages[-1]]
    kept = translate.truncate(messages, 10)
    assert kept == [messages[-1]]  # the call went with both outputs


def test_to_chat_truncates_with_auto_and_a_window() -> None:
    history = [
        {"type": "message", "id": f"m{i}", "role": "user", "content": [{"type": "input_text", "text": "x" * 300}]}
        for i in range(5)
    ]
    full = chat(history, input="last", truncation="disabled")
    assert (
        len(translate.to_chat(request(input="last", truncation="disabled"), history, context_window=50)["messages"])
        == 6
    )
    cut = translate.to_chat(request(input="last", truncation="auto", instructions="s"), history, context_window=50)
    assert cut["messages"] == [{"role": "system", "content": "s"}, full["messages"][-1]]
