"""`semantic_parts`: which part of a chat body is compared by meaning and which must match exactly (a table)."""

from __future__ import annotations

from typing import Any

import pytest

from inferplex.cache.semantic import semantic_parts

SYSTEM = {"role": "system", "content": "Be brief."}
IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}


def body(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **fields}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


# (case, body, compare, expected exact part, expected compared text); a None expected exact: no lookup
CASES: list[tuple[str, dict[str, Any], str, Any, str | None]] = [
    (
        "last_user: string content",
        body(SYSTEM, user("What is the capital of France?"), temperature=0),
        "last_user",
        body(SYSTEM, user([]), temperature=0),
        "What is the capital of France?",
    ),
    (
        "last_user: text parts joined, an image stays exact",
        body(user([{"type": "text", "text": "Describe"}, IMAGE, {"type": "text", "text": "this picture"}])),
        "last_user",
        body(user([IMAGE])),
        "Describe\nthis picture",
    ),
    (
        "last_user: earlier turns are exact, only the last user turn is compared",
        body(user("Hi"), assistant("Hello!"), user("What time is it in Paris?")),
        "last_user",
        body(user("Hi"), assistant("Hello!"), user([])),
        "What time is it in Paris?",
    ),
    (
        "last_user: messages after it (a tool result) stay exact",
        body(
            user("Weather in Oslo?"),
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "12C"},
        ),
        "last_user",
        body(
            user([]),
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "12C"},
        ),
        "Weather in Oslo?",
    ),
    (
        "last_user: a message's other fields (name) stay exact",
        body({"role": "user", "name": "ann", "content": "Hello"}),
        "last_user",
        body({"role": "user", "name": "ann", "content": []}),
        "Hello",
    ),
    ("last_user: no user message", body(SYSTEM, assistant("Hi")), "last_user", None, None),
    ("last_user: the last user turn is an image alone", body(user("Hi"), user([IMAGE])), "last_user", None, None),
    ("last_user: blank text", body(user("   \n")), "last_user", None, None),
    (
        "conversation: every turn's text, role-tagged, in order; the rest of the body exact",
        body(SYSTEM, user("Hi"), assistant("Hello!"), user("Capital of France?"), temperature=0.2),
        "conversation",
        {"model": "m", "temperature": 0.2},
        "system: Be brief.\nuser: Hi\nassistant: Hello!\nuser: Capital of France?",
    ),
    (
        "conversation: what is not text (images, tool calls) stays exact",
        body(
            user([{"type": "text", "text": "What is this?"}, IMAGE]),
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
        ),
        "conversation",
        {
            "model": "m",
            "messages": [
                {"content": [IMAGE]},
                {"content": [], "tool_calls": [{"id": "c1", "type": "function"}]},
                {"content": [], "tool_call_id": "c1"},
            ],
        },
        "user: What is this?\ntool: a cat",
    ),
    (
        "conversation: a speaker's name stays exact",
        body({"role": "user", "name": "ann", "content": "Hi"}),
        "conversation",
        {"model": "m", "messages": [{"name": "ann", "content": []}]},
        "user: Hi",
    ),
    ("conversation: no user text", body(SYSTEM, assistant("Hi")), "conversation", None, None),
    ("embeddings body: no messages", {"model": "e", "input": "hello"}, "last_user", None, None),
    ("Responses-style body: no messages", {"model": "m", "input": "hello"}, "conversation", None, None),
    ("malformed messages", {"model": "m", "messages": "hello"}, "last_user", None, None),
]


@pytest.mark.parametrize(("case", "data", "compare", "exact", "text"), CASES, ids=[c[0] for c in CASES])
def test_semantic_parts(case: str, data: dict[str, Any], compare: Any, exact: Any, text: str | None) -> None:
    got = semantic_parts(data, compare)
    if exact is None:
        assert got is None
    else:
        assert got == (exact, text)


# pairs of bodies that must (or must not) land in one partition: the same exact part
SAME: list[tuple[str, dict[str, Any], dict[str, Any], str, bool]] = [
    ("paraphrased last turn", body(user("Capital of France?")), body(user("France's capital?")), "last_user", True),
    (
        "string content and one text part are the same request",
        body(user("Hello")),
        body(user([{"type": "text", "text": "Hola"}])),
        "last_user",
        True,
    ),
    ("another system prompt", body(SYSTEM, user("Hi")), body(user("Hi")), "last_user", False),
    ("another temperature", body(user("Hi"), temperature=0), body(user("Hi"), temperature=1), "last_user", False),
    ("another earlier turn", body(user("A"), user("Q")), body(user("B"), user("Q")), "last_user", False),
    (
        "another earlier turn, whole conversation compared",
        body(user("A"), user("Q")),
        body(user("B"), user("Q")),
        "conversation",
        True,
    ),
    ("another image", body(user([IMAGE, {"type": "text", "text": "?"}])), body(user("?")), "last_user", False),
]


@pytest.mark.parametrize(("case", "a", "b", "compare", "same"), SAME, ids=[c[0] for c in SAME])
def test_partition_is_shared_only_by_the_same_exact_part(
    case: str, a: dict[str, Any], b: dict[str, Any], compare: Any, same: bool
) -> None:
    first, second = semantic_parts(a, compare), semantic_parts(b, compare)
    assert first is not None and second is not None
    assert (first[0] == second[0]) is same


def test_the_body_is_not_changed() -> None:
    data = body(SYSTEM, user([{"type": "text", "text": "Hi"}, IMAGE]))
    before = repr(data)
    semantic_parts(data, "last_user")
    semantic_parts(data, "conversation")
    assert repr(data) == before
