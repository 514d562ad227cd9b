"""The OpenAI response shapes every native translator builds, in one place.

Anthropic, Gemini and Bedrock answers all become the same `chat.completion`: an assistant message with text,
tool calls and reasoning, a choice, a usage block. Building them here keeps every translator's output
identical in the keys a strict client reads (`refusal`, `logprobs`, `prompt_tokens_details`).
"""

from __future__ import annotations

import time
from typing import Any

from inferplex.providers.base import Chunk


def assistant_message(
    text: str,
    calls: list[dict[str, Any]],
    reasoning: str = "",
    thinking_blocks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """`content` is null only when the answer is tool calls alone, as OpenAI sends it."""
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = reasoning
    if thinking_blocks:
        message["thinking_blocks"] = thinking_blocks
    return message


def choice(message: dict[str, Any], finish_reason: str, index: int = 0) -> dict[str, Any]:
    return {"index": index, "message": message, "logprobs": None, "finish_reason": finish_reason}


def completion(response_id: str, public_model: str, choices: list[dict[str, Any]], usage: dict[str, Any]) -> Chunk:
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": public_model,
        "choices": choices,
        "usage": usage,
    }


def cached_usage(fresh: int, read: int, written: int, output: int) -> dict[str, Any]:
    """Usage for providers that report cache reads and writes apart from fresh input (Anthropic, Bedrock):
    prompt_tokens counts all input; cache writes are kept apart so billing can price them."""
    prompt = fresh + read + written
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": read},
        "cache_creation_input_tokens": written,
    }
