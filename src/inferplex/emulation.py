"""The emulations `capabilities.plan` may choose, provider-agnostic, on canonical requests and responses.

- json_schema by a forced tool: the schema becomes the only tool the model must call; its arguments are
  returned as the message content (and streamed as content deltas), with finish_reason `stop`.
- n > 1 by parallel calls: n single-choice calls, their choices renumbered and their usage summed. Streams
  run the calls one after another, so the caller sees ordinary chunks, each choice under its own index.
- streaming from a buffered call, for a model declared `streaming: false`: one call, replayed as chunks.

Each works on OpenAI-shaped dicts only, so every native adapter gets them by calling `run_chat` and
`run_stream` with its own single-call functions.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from inferplex.canonical import ChatRequest, FunctionDef, NamedToolChoice, Tool
from inferplex.capabilities import JsonTool, Plan
from inferplex.responses import ChatCompletion, ChatCompletionChunk, Usage
from inferplex.translate.openai_shapes import aiter_chunks, completion_chunks

Once = Callable[[ChatRequest], Awaitable[ChatCompletion]]
StreamOnce = Callable[[ChatRequest], AsyncIterator[ChatCompletionChunk]]


def with_json_tool(request: ChatRequest, tool: JsonTool) -> ChatRequest:
    """The request with its answer schema as the single, forced tool."""
    fn = FunctionDef(
        name=tool.name, description=tool.description or "Return the answer in this schema.", parameters=tool.schema
    )
    return request.model_copy(
        update={
            "tools": [Tool(type="function", function=fn)],
            "tool_choice": NamedToolChoice(type="function", function={"name": tool.name}),
            "parallel_tool_calls": None,
            "response_format": None,
        }
    )


def json_tool_completion(completion: ChatCompletion) -> ChatCompletion:
    """Turn the forced tool call back into the JSON text the caller asked for."""
    for choice in completion.get("choices") or ():
        message = choice.get("message") or {}
        calls = message.pop("tool_calls", None) or []
        if calls:
            message["content"] = "".join(c.get("function", {}).get("arguments", "") for c in calls)
        if choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "stop"
    return completion


def json_tool_chunk(chunk: ChatCompletionChunk) -> ChatCompletionChunk:
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        calls = delta.pop("tool_calls", None) or []
        pieces = "".join((c.get("function") or {}).get("arguments") or "" for c in calls)
        if pieces:
            delta["content"] = (delta.get("content") or "") + pieces
        if choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "stop"
    return chunk


def add_usage(total: Usage | None, more: Usage | None) -> Usage | None:
    """Sum two OpenAI usage objects, nested details included."""
    summed: Usage | None = _add(total, more)
    return summed


def _add(total: Any, more: Any) -> Any:
    """`add_usage` on any JSON objects: every integer summed, at any depth, whether `Usage` names it or not
    (an upstream may report counts of its own)."""
    if more is None:
        return total
    if total is None:
        return _copy(more)
    for key, value in more.items():
        if isinstance(value, int) and isinstance(total.get(key), int):
            total[key] += value
        elif isinstance(value, dict):
            total[key] = _add(total.get(key) if isinstance(total.get(key), dict) else None, value)
        elif key not in total:
            total[key] = value
    return total


def _copy(usage: dict[str, Any]) -> dict[str, Any]:
    return {k: _copy(v) if isinstance(v, dict) else v for k, v in usage.items()}


async def run_chat(plan: Plan, once: Once) -> ChatCompletion:
    """Serve a buffered request according to its plan."""
    request = with_json_tool(plan.request, plan.json_tool) if plan.json_tool else plan.request
    if plan.fan_out > 1:
        results = await asyncio.gather(*(once(request) for _ in range(plan.fan_out)))
        completion = results[0]
        choices = []
        usage: Usage | None = None
        for i, result in enumerate(results):
            for choice in result.get("choices") or ():
                choice["index"] = i
                choices.append(choice)
            usage = add_usage(usage, result.get("usage"))
        completion["choices"] = choices
        completion["usage"] = usage
    else:
        completion = await once(request)
    return json_tool_completion(completion) if plan.json_tool else completion


async def run_stream(plan: Plan, once: Once, stream_once: StreamOnce) -> AsyncGenerator[ChatCompletionChunk, None]:
    """Serve a streamed request according to its plan; always ends with one usage chunk (`choices: []`).

    With n fanned out, the calls' chunks become one stream: every chunk takes the first call's id and
    `created` (each upstream message has its own), and call i's choice is index i. Without a fan-out the
    indices are the upstream's own (Gemini's candidateCount streams several), and are left alone."""
    request = with_json_tool(plan.request, plan.json_tool) if plan.json_tool else plan.request
    usage: Usage | None = None
    last: ChatCompletionChunk | None = None
    fan_out = plan.fan_out > 1
    identity: tuple[str, int] | None = None
    for i in range(plan.fan_out):
        source = aiter_chunks(completion_chunks(await once(request))) if plan.buffered_stream else stream_once(request)
        try:
            async for chunk in source:
                if fan_out:
                    if identity is None:
                        identity = chunk.get("id", ""), chunk.get("created", 0)
                    chunk["id"], chunk["created"] = identity
                if not chunk.get("choices") and chunk.get("usage") is not None:
                    usage = add_usage(usage, chunk["usage"])
                    last = chunk
                    continue
                if fan_out:
                    for choice in chunk.get("choices") or ():
                        choice["index"] = i
                yield json_tool_chunk(chunk) if plan.json_tool else chunk
        finally:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()  # the caller left: cancel the upstream request now, not at garbage collection
    if last is not None:
        last["usage"] = usage
        yield last
