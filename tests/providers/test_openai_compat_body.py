"""The OpenAI-compatible adapter's pure pieces, by table: the request body built for each vendor profile
(renames, drops, forced stream usage) and the normalised completion a strict client reads."""

from __future__ import annotations

from typing import Any

import pytest

from inferplex.canonical import ChatRequest
from inferplex.gateway_request import parse_request
from inferplex.providers.openai_compat import build_chat_body, normalize_completion
from inferplex.providers.profiles import PROFILES

RAW = {
    "model": "public",
    "messages": [{"role": "user", "content": "x"}],
    "seed": 3,
    "n": 2,
    "max_completion_tokens": 9,
    "logit_bias": {"1": 5},
    "provider": "p",
    "vendor_x": 1,
}


def _wire(raw: dict[str, Any]) -> dict[str, Any]:
    """What the OpenAI dialect forwards of a caller's JSON: its own keys (`provider`) taken out."""
    return parse_request(ChatRequest, dict(raw)).wire()


@pytest.mark.parametrize(
    "profile,stream,expect_keys,absent,dropped",
    [
        ("openai", False, {"seed": 3, "n": 2, "max_completion_tokens": 9, "vendor_x": 1}, {"provider"}, []),
        ("mistral", False, {"random_seed": 3, "max_tokens": 9}, {"seed", "logit_bias", "provider"}, ["logit_bias"]),
        ("deepseek", False, {"max_tokens": 9}, {"n", "seed", "logit_bias"}, ["logit_bias", "n", "seed"]),
        ("groq", True, {"stream": True, "stream_options": {"include_usage": True}}, {"logit_bias"}, ["logit_bias"]),
        ("ollama", True, {"max_tokens": 9}, {"n", "logit_bias"}, ["logit_bias", "n"]),
    ],
)
def test_vendor_profiles_rename_and_drop(
    profile: str, stream: bool, expect_keys: dict[str, object], absent: set[str], dropped: list[str]
) -> None:
    body, was_dropped = build_chat_body(_wire(RAW), "upstream-id", PROFILES[profile], stream=stream)
    assert body["model"] == "upstream-id"
    for key, value in expect_keys.items():
        assert body[key] == value
    assert not absent & set(body)
    assert was_dropped == dropped
    assert RAW["model"] == "public", "the caller's body must not be mutated"


def test_stream_options_of_the_caller_are_kept_and_usage_forced() -> None:
    raw = {**RAW, "stream": True, "stream_options": {"include_usage": False, "include_obfuscation": False}}
    body, _ = build_chat_body(_wire(raw), "m", PROFILES["openai"], stream=True)
    assert body["stream_options"] == {"include_usage": True, "include_obfuscation": False}


def test_normalize_fills_every_key_a_strict_client_reads() -> None:
    data = normalize_completion({"id": "x", "choices": [{"message": {"content": "hi"}}]}, "public")
    choice = data["choices"][0]
    assert data["model"] == "public" and data["object"] == "chat.completion"
    assert choice == {
        "message": {"content": "hi", "role": "assistant", "refusal": None},
        "index": 0,
        "logprobs": None,
        "finish_reason": "stop",
    }
