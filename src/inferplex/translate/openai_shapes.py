"""The OpenAI response shapes every native translator builds, in one place.

Anthropic, Gemini and Bedrock answers all become the same `chat.completion`: an assistant message with text,
tool calls and reasoning, a choice, a usage block. Building them here keeps every translator's output
identical in the keys a strict client reads (`refusal`, `logprobs`, `prompt_tokens_details`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
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


def completion_chunks(response: Chunk, carry: tuple[str, ...] = ()) -> list[Chunk]:
    """A buffered `chat.completion` as the chunks a stream of it would have carried.

    Used wherever an answer must be streamed but was produced whole (a model declared `streaming: false`,
    a processor that needs the whole answer): one chunk with every choice's message, one with every
    finish_reason (carrying the response's `carry` keys, e.g. processor metadata), then the usage chunk.
    Content goes whole: the answer is complete, so splitting it would only add frames."""
    head: dict[str, Any] = {
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
        for key in ("reasoning_content", "refusal"):
            if message.get(key):
                delta[key] = message[key]
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": n, **call} for n, call in enumerate(message["tool_calls"])]
        content.append({"index": index, "delta": delta, "logprobs": None, "finish_reason": None})
        reason = choice.get("finish_reason") or "stop"
        finish.append({"index": index, "delta": {}, "logprobs": None, "finish_reason": reason})
    last = {**head, "choices": finish}
    for key in carry:
        if key in response:
            last[key] = response[key]
    out = [{**head, "choices": content}, last]
    if response.get("usage") is not None:
        out.append({**head, "choices": [], "usage": response["usage"]})
    return out


def completion_from_chunks(chunks: list[Chunk]) -> Chunk:
    """The `chat.completion` a stream's chunks add up to (the inverse of `completion_chunks`): text and
    reasoning concatenated, tool calls merged by their index, the last finish_reason and usage seen.
    Used for the usage log's response body of a streamed answer."""
    out: dict[str, Any] = {"id": "", "object": "chat.completion", "created": 0, "model": "", "choices": []}
    by_index: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for key in ("id", "created", "model", "system_fingerprint"):
            if chunk.get(key) and not out.get(key):
                out[key] = chunk[key]
        if chunk.get("usage") is not None:
            out["usage"] = chunk["usage"]
        for c in chunk.get("choices") or ():
            index = c.get("index", 0)
            state = by_index.setdefault(index, {"text": [], "reasoning": [], "calls": {}, "finish": None})
            delta = c.get("delta") or {}
            if delta.get("content"):
                state["text"].append(delta["content"])
            if delta.get("reasoning_content"):
                state["reasoning"].append(delta["reasoning_content"])
            for call in delta.get("tool_calls") or ():
                merged = state["calls"].setdefault(call.get("index", 0), {"function": {"arguments": ""}})
                for key in ("id", "type"):
                    if call.get(key):
                        merged[key] = call[key]
                function = call.get("function") or {}
                if function.get("name"):
                    merged["function"]["name"] = function["name"]
                merged["function"]["arguments"] += function.get("arguments") or ""
            if c.get("finish_reason"):
                state["finish"] = c["finish_reason"]
    for index in sorted(by_index):
        state = by_index[index]
        calls = [state["calls"][n] for n in sorted(state["calls"])]
        message = assistant_message("".join(state["text"]), calls, "".join(state["reasoning"]))
        out["choices"].append(choice(message, state["finish"] or "stop", index))
    return out


async def aiter_chunks(chunks: list[Chunk]) -> AsyncIterator[Chunk]:
    for chunk in chunks:
        yield chunk


class ChunkStream:
    """The identity of one translated stream (id, created, public model) and the two chunk shapes it emits.

    Each native stream translator subclasses it and keeps its own state (block indexes, usage so far)."""

    def __init__(self, public_model: str, stream_id: str) -> None:
        self.model = public_model
        self.id = stream_id
        self.created = int(time.time())

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, index: int = 0) -> Chunk:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    def _usage_chunk(self, usage: dict[str, Any]) -> Chunk:
        """The last chunk of every stream: no choices, the usage (the dialect shows it if asked)."""
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage,
        }
