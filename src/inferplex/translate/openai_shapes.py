"""The OpenAI response shapes every native translator builds, in one place.

Anthropic, Gemini and Bedrock answers all become the same `chat.completion`: an assistant message with text,
tool calls and reasoning, a choice, a usage block. Building them here keeps every translator's output
identical in the keys a strict client reads (`refusal`, `logprobs`, `prompt_tokens_details`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from inferplex.responses import (
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChunkChoice,
    Delta,
    Message,
    ToolCall,
    Usage,
)

# What a replayed answer's last chunk carries over from it: the processors' report (processors/chain.py).
Carried = Literal["processors", "inferada"]


def assistant_message(
    text: str,
    calls: list[ToolCall],
    reasoning: str = "",
    thinking_blocks: list[dict[str, Any]] | None = None,
) -> Message:
    """`content` is null only when the answer is tool calls alone, as OpenAI sends it."""
    message: Message = {"role": "assistant", "content": text if text or not calls else None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = reasoning
    if thinking_blocks:
        message["thinking_blocks"] = thinking_blocks
    return message


def choice(message: Message, finish_reason: str, index: int = 0) -> Choice:
    return {"index": index, "message": message, "logprobs": None, "finish_reason": finish_reason}


def completion(response_id: str, public_model: str, choices: list[Choice], usage: Usage) -> ChatCompletion:
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": public_model,
        "choices": choices,
        "usage": usage,
    }


def cached_usage(fresh: int, read: int, written: int, output: int) -> Usage:
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


def completion_chunks(response: ChatCompletion, carry: tuple[Carried, ...] = ()) -> list[ChatCompletionChunk]:
    """A buffered `chat.completion` as the chunks a stream of it would have carried.

    Used wherever an answer must be streamed but was produced whole (a model declared `streaming: false`,
    a processor that needs the whole answer): one chunk with every choice's message, one with every
    finish_reason (carrying the response's `carry` keys, e.g. processor metadata), then the usage chunk.
    Content goes whole: the answer is complete, so splitting it would only add frames."""
    head: ChatCompletionChunk = {
        "id": response.get("id", "chatcmpl-replay"),
        "object": "chat.completion.chunk",
        "created": response.get("created", 0),
        "model": response.get("model", ""),
    }
    if response.get("system_fingerprint") is not None:
        head["system_fingerprint"] = response["system_fingerprint"]
    content: list[ChunkChoice] = []
    finish: list[ChunkChoice] = []
    for i, choice in enumerate(response.get("choices") or ()):
        index = choice.get("index", i)
        message = choice.get("message") or {}
        delta: Delta = {"role": "assistant", "content": message.get("content")}
        if message.get("reasoning_content"):
            delta["reasoning_content"] = message["reasoning_content"]
        if message.get("refusal"):
            delta["refusal"] = message["refusal"]
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": n, **call} for n, call in enumerate(message["tool_calls"])]
        content.append({"index": index, "delta": delta, "logprobs": None, "finish_reason": None})
        reason = choice.get("finish_reason") or "stop"
        finish.append({"index": index, "delta": {}, "logprobs": None, "finish_reason": reason})
    last: ChatCompletionChunk = {**head, "choices": finish}
    for key in carry:
        if key in response:
            last[key] = response[key]
    out: list[ChatCompletionChunk] = [{**head, "choices": content}, last]
    if response.get("usage") is not None:
        out.append({**head, "choices": [], "usage": response["usage"]})
    return out


def completion_from_chunks(chunks: list[ChatCompletionChunk]) -> ChatCompletion:
    """The `chat.completion` a stream's chunks add up to (the inverse of `completion_chunks`): text and
    reasoning concatenated, tool calls merged by their index, the last finish_reason and usage seen.
    Used for the usage log's response body of a streamed answer."""
    out: ChatCompletion = {"id": "", "object": "chat.completion", "created": 0, "model": "", "choices": []}
    by_index: dict[int, _Folded] = {}
    for chunk in chunks:
        for key in ("id", "model", "system_fingerprint"):
            if chunk.get(key) and not out.get(key):
                out[key] = chunk[key]
        if chunk.get("created") and not out.get("created"):
            out["created"] = chunk["created"]
        if chunk.get("usage") is not None:
            out["usage"] = chunk["usage"]
        for c in chunk.get("choices") or ():
            state = by_index.setdefault(c.get("index", 0), _Folded())
            delta = c.get("delta") or {}
            if delta.get("content"):
                state.text.append(delta["content"] or "")
            if delta.get("reasoning_content"):
                state.reasoning.append(delta["reasoning_content"])
            for call in delta.get("tool_calls") or ():
                state.add_call(call)
            if c.get("finish_reason"):
                state.finish = c["finish_reason"]
    choices = out["choices"]
    for index in sorted(by_index):
        state = by_index[index]
        calls = [state.calls[n] for n in sorted(state.calls)]
        message = assistant_message("".join(state.text), calls, "".join(state.reasoning))
        choices.append(choice(message, state.finish or "stop", index))
    return out


@dataclass(slots=True)
class _Folded:
    """One choice of a stream, as `completion_from_chunks` adds its deltas up."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, ToolCall] = field(default_factory=dict)
    finish: str | None = None

    def add_call(self, call: ToolCall) -> None:
        merged = self.calls.setdefault(call.get("index", 0), {"function": {"arguments": ""}})
        if call.get("id"):
            merged["id"] = call["id"]
        if call.get("type"):
            merged["type"] = call["type"]
        function = call.get("function") or {}
        if function.get("name"):
            merged["function"]["name"] = function["name"]
        merged["function"]["arguments"] += function.get("arguments") or ""


async def aiter_chunks(chunks: list[ChatCompletionChunk]) -> AsyncIterator[ChatCompletionChunk]:
    for chunk in chunks:
        yield chunk


class ChunkStream:
    """The identity of one translated stream (id, created, public model) and the two chunk shapes it emits.

    Each native stream translator subclasses it and keeps its own state (block indexes, usage so far)."""

    def __init__(self, public_model: str, stream_id: str) -> None:
        self.model = public_model
        self.id = stream_id
        self.created = int(time.time())

    def _chunk(self, delta: Delta, finish: str | None = None, index: int = 0) -> ChatCompletionChunk:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    def _usage_chunk(self, usage: Usage) -> ChatCompletionChunk:
        """The last chunk of every stream: no choices, the usage (the dialect shows it if asked)."""
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage,
        }
