"""The cache key as tables: what makes two requests one entry, and whose entry it is."""

from __future__ import annotations

from typing import Any

import pytest

from inferplex.auth import MASTER, Principal
from inferplex.cache.keys import entry_id, normalised, partition_id, scope_of

MSG = [{"role": "user", "content": "hi"}]

# (family, request JSON, the normalised body); the model is always replaced by "public"
NORMALISED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("chat", {"model": "alias", "messages": MSG}, {"model": "public", "messages": MSG}),
    (
        "chat",
        {"model": "m", "messages": MSG, "stream": True, "stream_options": {"include_usage": True}},
        {"model": "public", "messages": MSG},
    ),
    ("chat", {"model": "m", "messages": MSG, "user": "u-1"}, {"model": "public", "messages": MSG}),
    (
        "chat",
        {
            "model": "m",
            "messages": MSG,
            "n": 1,
            "temperature": 1,
            "top_p": 1.0,
            "presence_penalty": 0,
            "frequency_penalty": 0.0,
            "logprobs": False,
            "parallel_tool_calls": True,
            "response_format": {"type": "text"},
        },
        {"model": "public", "messages": MSG},
    ),
    (
        "chat",
        {"model": "m", "messages": MSG, "n": 2, "temperature": 0.5, "logprobs": True},
        {"model": "public", "messages": MSG, "n": 2, "temperature": 0.5, "logprobs": True},
    ),
    # a boolean is never a number's default (n: true is not n: 1)
    ("chat", {"model": "m", "messages": MSG, "n": True}, {"model": "public", "messages": MSG, "n": True}),
    ("chat", {"model": "m", "messages": MSG, "seed": None, "max_tokens": None}, {"model": "public", "messages": MSG}),
    ("chat", {"model": "m", "messages": MSG, "tool_choice": "none"}, {"model": "public", "messages": MSG}),
    (
        "chat",
        {"model": "m", "messages": MSG, "tools": [1], "tool_choice": "auto"},
        {"model": "public", "messages": MSG, "tools": [1]},
    ),
    (
        "chat",
        {"model": "m", "messages": MSG, "tools": [1], "tool_choice": "none"},
        {"model": "public", "messages": MSG, "tools": [1], "tool_choice": "none"},
    ),
    (
        "chat",
        {"model": "m", "messages": MSG, "response_format": {"type": "json_object"}},
        {"model": "public", "messages": MSG, "response_format": {"type": "json_object"}},
    ),
    ("embedding", {"model": "m", "input": "x", "encoding_format": "float"}, {"model": "public", "input": "x"}),
    (
        "embedding",
        {"model": "m", "input": "x", "encoding_format": "base64"},
        {"model": "public", "input": "x", "encoding_format": "base64"},
    ),
    (
        "responses",
        {"model": "m", "input": "x", "truncation": "disabled", "temperature": 1},
        {"model": "public", "input": "x"},
    ),
]


@pytest.mark.parametrize(("family", "wire", "expected"), NORMALISED)
def test_normalised(family: str, wire: dict[str, Any], expected: dict[str, Any]) -> None:
    before = dict(wire)
    assert normalised(family, wire, "public") == expected
    assert wire == before  # the caller's object is left as it was


ACCOUNT_KEY = Principal(key_id="k1", account_id="a1")
OTHER_KEY_SAME_ACCOUNT = Principal(key_id="k2", account_id="a1")
KEY_WITHOUT_ACCOUNT = Principal(key_id="k3")

# (principal, cache.scope, the model is shared, the scope)
SCOPES = [
    (ACCOUNT_KEY, "account", False, "account:a1"),
    (OTHER_KEY_SAME_ACCOUNT, "account", False, "account:a1"),
    (ACCOUNT_KEY, "key", False, "key:k1"),
    (OTHER_KEY_SAME_ACCOUNT, "key", False, "key:k2"),
    (KEY_WITHOUT_ACCOUNT, "account", False, "key:k3"),
    (MASTER, "account", False, "open"),
    (MASTER, "key", False, "open"),
    (ACCOUNT_KEY, "account", True, "shared"),
    (MASTER, "key", True, "shared"),
]


@pytest.mark.parametrize(("principal", "scope", "shared", "expected"), SCOPES)
def test_scope_of(principal: Principal, scope: str, shared: bool, expected: str) -> None:
    assert scope_of(principal, scope, shared=shared) == expected


def test_field_order_does_not_change_the_entry() -> None:
    a = {"model": "public", "messages": MSG, "temperature": 0.3, "tools": [{"b": 1, "a": 2}]}
    b = {"tools": [{"a": 2, "b": 1}], "temperature": 0.3, "messages": MSG, "model": "public"}
    assert entry_id("open", None, "public", False, a, "chat") == entry_id("open", None, "public", False, b, "chat")


BODY = {"model": "public", "messages": MSG}
BASE = ("account:a1", None, "public", False, BODY, "chat")
# every part of the key that differs makes another entry
VARIANTS = [
    ("account:a2", None, "public", False, BODY, "chat"),
    ("key:k1", None, "public", False, BODY, "chat"),
    ("account:a1", "ns", "public", False, BODY, "chat"),
    ("account:a1", "", "public", False, BODY, "chat"),
    ("account:a1", None, "other", False, BODY, "chat"),
    ("account:a1", None, "public", True, BODY, "chat"),
    ("account:a1", None, "public", False, {**BODY, "seed": 1}, "chat"),
    ("account:a1", None, "public", False, BODY, "responses"),
]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_part_of_the_key_counts(variant: tuple[Any, ...]) -> None:
    assert entry_id(*variant) != entry_id(*BASE)


def test_the_entry_id_is_a_hash_that_reveals_nothing() -> None:
    secret = {"model": "public", "messages": [{"role": "user", "content": "my password is hunter2"}]}
    made = entry_id("account:a1", "ns", "public", False, secret, "chat")
    assert len(made) == 64 and int(made, 16) >= 0 and "hunter2" not in made


def test_a_partition_differs_from_an_entry_and_by_its_exact_part() -> None:
    p1 = partition_id("account:a1", None, "public", False, "chat", {"model": "public"})
    p2 = partition_id("account:a1", None, "public", False, "chat", {"model": "public", "seed": 2})
    assert p1 != p2 and p1 != entry_id("account:a1", None, "public", False, {"model": "public"}, "chat")
