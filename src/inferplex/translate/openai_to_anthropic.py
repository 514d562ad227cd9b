"""Canonical (OpenAI Chat Completions) <-> Anthropic Messages API, for the outbound Anthropic adapter.

`build_request` turns a canonical request into a Messages body: system and developer messages become the
top-level `system`, tool results become `tool_result` blocks in a user turn, consecutive same-role turns are
merged (Anthropic wants user/assistant alternation), images become base64 or URL sources, `cache_control`
and `thinking` pass through. `to_completion` and `AnthropicStream` turn the answer back into OpenAI's shape;
any stop reason, block type or event this code does not know is ignored or mapped to its nearest meaning,
never a crash, so a new Anthropic feature cannot break a running gateway.
"""

from __future__ import annotations

from typing import Any

import orjson

from inferplex.canonical import ChatRequest, ContentPart, Message, NamedToolChoice
from inferplex.errors import InvalidRequest
from inferplex.providers.failures import ProviderFailure
from inferplex.responses import ChatCompletion, ChatCompletionChunk, Choice, ChunkChoice, FunctionCall, ToolCall, Usage
from inferplex.translate import reasoning
from inferplex.translate.openai_shapes import ChunkStream, assistant_message, cached_usage, choice, completion

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def finish_reason(stop_reason: Any) -> str:
    """Anthropic's stop_reason as an OpenAI finish_reason; unknown (or missing) reasons read as `stop`."""
    return FINISH_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def _extra(model: Any, key: str) -> Any:
    return (model.model_extra or {}).get(key)


def _data_url(url: str) -> tuple[str, str] | None:
    """(media_type, base64 data) from a `data:` URL, or None for an ordinary URL."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        raise InvalidRequest("Image data URLs must be base64 encoded (data:<type>;base64,...).", param="messages")
    return head.removesuffix(";base64"), data


def _part_block(part: ContentPart) -> dict[str, Any] | None:
    block: dict[str, Any] | None
    if part.type == "text":
        block = {"type": "text", "text": part.text or ""}
    elif part.type == "image_url":
        url = str((part.image_url or {})["url"])
        inline = _data_url(url)
        source = (
            {"type": "base64", "media_type": inline[0], "data": inline[1]} if inline else {"type": "url", "url": url}
        )
        block = {"type": "image", "source": source}
    elif part.type == "file":
        data = str((part.file or {}).get("file_data") or "")
        inline = _data_url(data) if data else None
        if inline is None:
            raise InvalidRequest("File parts must carry file_data as a base64 data URL.", param="messages")
        block = {"type": "document", "source": {"type": "base64", "media_type": inline[0], "data": inline[1]}}
    elif part.type == "refusal":
        block = {"type": "text", "text": part.refusal or ""}
    else:
        return None  # input_audio: `capabilities.plan` refuses it before translation
    if _extra(part, "cache_control") is not None:
        block["cache_control"] = _extra(part, "cache_control")
    return block


def _blocks(content: str | list[ContentPart] | None) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in (_part_block(p) for p in content) if b is not None]


def _arguments(raw: str, where: str) -> Any:
    try:
        return orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        raise InvalidRequest(f"{where}: tool call arguments must be JSON.", param=where) from None


def _message_blocks(m: Message, i: int) -> tuple[str, list[dict[str, Any]]]:
    """(anthropic role, content blocks) for one non-system canonical message."""
    if m.role == "tool":
        content = m.content if isinstance(m.content, str) else _blocks(m.content)
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": content}
        if _extra(m, "is_error"):
            block["is_error"] = True
        return "user", [block]
    if m.role == "assistant":
        blocks = [dict(b) for b in _extra(m, "thinking_blocks") or () if isinstance(b, dict)]
        blocks += _blocks(m.content)
        if m.refusal and not m.content:
            blocks.append({"type": "text", "text": m.refusal})
        for j, call in enumerate(m.tool_calls or ()):
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.function.name,
                    "input": _arguments(call.function.arguments, f"messages[{i}].tool_calls[{j}].function.arguments"),
                }
            )
        return "assistant", blocks
    return "user", _blocks(m.content)  # user, and the legacy `function` role


def _system(messages: list[Message]) -> str | list[dict[str, Any]] | None:
    system = [m for m in messages if m.role in ("system", "developer")]
    if not system:
        return None
    if len(system) == 1 and isinstance(system[0].content, str):
        return system[0].content
    blocks: list[dict[str, Any]] = []
    for m in system:
        blocks += _blocks(m.content)
    return blocks


def build_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Conversation turns, consecutive same-role turns merged, single plain texts kept as strings."""
    turns: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if m.role in ("system", "developer"):
            continue
        role, blocks = _message_blocks(m, i)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks, "_string": isinstance(m.content, str)})
    for turn in turns:
        content = turn["content"]
        plain = turn.pop("_string")
        if plain and len(content) == 1 and content[0]["type"] == "text" and len(content[0]) == 2:
            turn["content"] = content[0]["text"]
    return turns


def _tool(tool: Any) -> dict[str, Any]:
    fn = tool.function
    out: dict[str, Any] = {"name": fn.name, "input_schema": fn.parameters or {"type": "object", "properties": {}}}
    if fn.description:
        out["description"] = fn.description
    if fn.strict:
        out["strict"] = True
    if _extra(tool, "cache_control") is not None:
        out["cache_control"] = _extra(tool, "cache_control")
    return out


def _tool_choice(request: ChatRequest) -> dict[str, Any] | None:
    choice = request.tool_choice
    out: dict[str, Any] | None
    if choice is None:
        out = None
    elif choice == "none":
        return {"type": "none"}
    elif choice == "required":
        out = {"type": "any"}
    elif choice == "auto":
        out = {"type": "auto"}
    else:
        assert isinstance(choice, NamedToolChoice)
        name = (choice.function or {}).get("name")
        if not isinstance(name, str):
            raise InvalidRequest("tool_choice must name a function.", param="tool_choice")
        out = {"type": "tool", "name": name}
    if request.parallel_tool_calls is False and request.tools:
        out = out or {"type": "auto"}
        out["disable_parallel_tool_use"] = True
    return out


def build_request(
    request: ChatRequest, upstream_model: str, default_max_tokens: int, *, stream: bool
) -> dict[str, Any]:
    """The Messages API body for a canonical request that `capabilities.plan` has already trimmed."""
    body: dict[str, Any] = {
        "model": upstream_model,
        "max_tokens": request.output_limit or default_max_tokens,
        "messages": build_messages(request.messages),
    }
    system = _system(request.messages)
    if system is not None:
        body["system"] = system
    if request.stop_list:
        body["stop_sequences"] = request.stop_list
    for name in ("temperature", "top_p"):
        if getattr(request, name) is not None:
            body[name] = getattr(request, name)
    for name in ("top_k", "thinking", "cache_control"):
        if _extra(request, name) is not None:
            body[name] = _extra(request, name)
    thinking_budget = reasoning.budget(_extra(request, "reasoning_effort"))
    if thinking_budget and "thinking" not in body:
        # max_tokens counts thinking too: the budget is added so the caller's limit still bounds the answer
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
        body["max_tokens"] += thinking_budget
    if request.tools:
        body["tools"] = [_tool(t) for t in request.tools if t.function is not None]
    choice = _tool_choice(request)
    if choice is not None and request.tools:
        body["tool_choice"] = choice
    if request.user:
        body["metadata"] = {"user_id": request.user}
    fmt = request.response_format
    if fmt is not None and fmt.type == "json_schema" and fmt.json_schema is not None:
        body["output_config"] = {"format": {"type": "json_schema", "schema": fmt.json_schema.schema_ or {}}}
    _merge_extra(body, _extra(request, "anthropic_extra"))
    if stream:
        body["stream"] = True
    return body


def _merge_extra(body: dict[str, Any], extra: Any) -> None:
    """Anthropic-only fields the Anthropic dialect carried through canonical (server tools, container, ...)."""
    if not isinstance(extra, dict):
        return
    for key, value in extra.items():
        if key == "betas":
            continue  # a header, set by the adapter
        if key == "tools" and isinstance(value, list):
            body["tools"] = [*body.get("tools", []), *value]
        elif isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = value


def betas(request: ChatRequest) -> str | None:
    """The `anthropic-beta` header value the caller asked for, if any."""
    extra = _extra(request, "anthropic_extra")
    found = extra.get("betas") if isinstance(extra, dict) else None
    return ",".join(str(b) for b in found) if isinstance(found, list) and found else None


def usage(data: Any) -> Usage:
    """OpenAI usage from Anthropic's: prompt_tokens counts all input, cached or not; cache writes kept apart."""
    u = data if isinstance(data, dict) else {}
    return cached_usage(
        int(u.get("input_tokens") or 0),
        int(u.get("cache_read_input_tokens") or 0),
        int(u.get("cache_creation_input_tokens") or 0),
        int(u.get("output_tokens") or 0),
    )


def _tool_call(block: dict[str, Any]) -> ToolCall:
    args = orjson.dumps(block.get("input") if block.get("input") is not None else {}).decode()
    function: FunctionCall = {"name": block.get("name", ""), "arguments": args}
    return {"id": block.get("id", ""), "type": "function", "function": function}


def to_completion(data: Any, public_model: str) -> ChatCompletion:
    """A `chat.completion` from a Messages API response."""
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise ProviderFailure("api_error", "the provider's response has no content")
    texts: list[str] = []
    thinking: list[str] = []
    thinking_blocks: list[dict[str, Any]] = []
    calls: list[ToolCall] = []
    for block in data["content"]:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "thinking":
            thinking.append(str(block.get("thinking", "")))
            thinking_blocks.append(block)
        elif kind == "redacted_thinking":
            thinking_blocks.append(block)
        elif kind == "tool_use":
            calls.append(_tool_call(block))
        # server tool blocks and unknown types carry nothing an OpenAI client can read
    message = assistant_message("".join(texts), calls, "".join(thinking), thinking_blocks)
    chosen = choice(message, finish_reason(data.get("stop_reason")))
    _stop_sequence(chosen, data.get("stop_sequence"))
    return completion(str(data.get("id") or "msg"), public_model, [chosen], usage(data.get("usage")))


def _stop_sequence(choice: Choice | ChunkChoice, sequence: Any) -> None:
    """Keep which stop sequence ended the answer (as vLLM's `stop_reason` does), for a faithful round trip."""
    if isinstance(sequence, str):
        choice["stop_reason"] = sequence


def stream_error(data: Any) -> ProviderFailure:
    """The failure an `error` event inside an Anthropic stream reports (the adapter's `ErrorMap` maps it)."""
    err = data.get("error") if isinstance(data, dict) else None
    if not isinstance(err, dict):
        return ProviderFailure("api_error", "the provider failed mid-stream")
    return ProviderFailure(str(err.get("type") or "api_error"), str(err.get("message") or "the provider failed"))


class AnthropicStream(ChunkStream):
    """Translates one Messages API event stream into `chat.completion.chunk` dicts.

    Anthropic numbers content blocks across text and tool use; OpenAI numbers tool calls alone. The map
    from block index to tool-call index, the usage seen so far and whether the stream finished live here.
    """

    def __init__(self, public_model: str) -> None:
        super().__init__(public_model, "msg")
        self.tool_index: dict[int, int] = {}
        self.usage: dict[str, Any] = {}
        self.done = False

    def feed(self, event: str, data: Any) -> list[ChatCompletionChunk]:
        """Chunks for one SSE event (`event` is the SSE event name; `data` its decoded JSON)."""
        kind = data.get("type", event) if isinstance(data, dict) else event
        if kind == "error":
            raise stream_error(data)
        if not isinstance(data, dict):
            return []
        if kind == "message_start":
            message = data.get("message") or {}
            self.id = str(message.get("id") or self.id)
            self.usage.update({k: v for k, v in (message.get("usage") or {}).items() if v is not None})
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "content_block_start":
            return self._block_start(int(data.get("index", 0)), data.get("content_block") or {})
        if kind == "content_block_delta":
            return self._block_delta(int(data.get("index", 0)), data.get("delta") or {})
        if kind == "message_delta":
            self.usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
            delta = data.get("delta") or {}
            chunk = self._chunk({}, finish_reason(delta.get("stop_reason")))
            _stop_sequence(chunk["choices"][0], delta.get("stop_sequence"))
            return [chunk]
        if kind == "message_stop":
            self.done = True
            return [self._usage_chunk(usage(self.usage))]
        return []  # ping, content_block_stop, and event types added after this was written

    def _block_start(self, index: int, block: dict[str, Any]) -> list[ChatCompletionChunk]:
        kind = block.get("type")
        if kind == "tool_use":
            position = self.tool_index[index] = len(self.tool_index)
            call: ToolCall = {
                "index": position,
                "id": block.get("id", ""),
                "type": "function",
                "function": {"name": block.get("name", ""), "arguments": ""},
            }
            return [self._chunk({"tool_calls": [call]})]
        if kind == "text" and block.get("text"):
            return [self._chunk({"content": block["text"]})]
        if kind == "thinking" and block.get("thinking"):
            return [self._chunk({"reasoning_content": block["thinking"]})]
        return []

    def _block_delta(self, index: int, delta: dict[str, Any]) -> list[ChatCompletionChunk]:
        kind = delta.get("type")
        if kind == "text_delta":
            return [self._chunk({"content": delta.get("text", "")})]
        if kind == "thinking_delta":
            return [self._chunk({"reasoning_content": delta.get("thinking", "")})]
        if kind == "signature_delta":
            return [self._chunk({"reasoning_signature": delta.get("signature", "")})]
        if kind == "input_json_delta" and index in self.tool_index and delta.get("partial_json"):
            piece: ToolCall = {
                "index": self.tool_index[index],
                "function": {"arguments": delta.get("partial_json", "")},
            }
            return [self._chunk({"tool_calls": [piece]})]
        return []  # citations_delta and unknown delta types
