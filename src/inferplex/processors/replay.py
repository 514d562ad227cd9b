"""A buffered completion replayed as stream chunks.

When a processor needs the whole answer, the pipeline makes a buffered call; a caller who asked for a
stream still gets one: these chunks, in OpenAI's `chat.completion.chunk` shape (role and content, tool calls,
then a chunk with `finish_reason` carrying the processors' block, then the usage chunk the dialect shows or
hides as the caller asked). Content is sent whole: the answer is already complete, so splitting it would only
add frames.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from inferplex.providers.base import Chunk

EXTRA_KEYS = ("processors", "inferada")


def completion_chunks(response: Chunk) -> list[Chunk]:
    head = {
        "id": response.get("id", "chatcmpl-replay"),
        "object": "chat.completion.chunk",
        "created": response.get("created", 0),
        "model": response.get("model", ""),
    }
    if response.get("system_fingerprint") is not None:
        head["system_fingerprint"] = response["system_fingerprint"]
    content: list[dict[str, Any]] = []
    finish: list[dict[str, Any]] = []
    for i, choice in enumerate(response.get("choices") or ()):
        index = choice.get("index", i)
        message = choice.get("message") or {}
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": n, **call} for n, call in enumerate(message["tool_calls"])]
        if message.get("refusal"):
            delta["refusal"] = message["refusal"]
        content.append({"index": index, "delta": delta, "logprobs": None, "finish_reason": None})
        finish.append({"index": index, "delta": {}, "logprobs": None, "finish_reason": choice.get("finish_reason")})
    last = {**head, "choices": finish}
    for key in EXTRA_KEYS:
        if key in response:
            last[key] = response[key]
    out = [{**head, "choices": content}, last]
    if response.get("usage") is not None:
        out.append({**head, "choices": [], "usage": response["usage"]})
    return out


async def replay(chunks: list[Chunk]) -> AsyncIterator[Chunk]:
    for chunk in chunks:
        yield chunk
