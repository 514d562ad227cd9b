"""Inbound Anthropic Messages API <-> canonical (OpenAI-shaped), for the `/v1/messages` dialect.

`to_canonical` returns two OpenAI-shaped dicts: `full`, which keeps Anthropic-only details (cache_control,
thinking, top_k, thinking blocks with their signatures) so an Anthropic target round-trips faithfully, and
`raw`, the same request without them, safe to forward to any OpenAI-compatible upstream. `to_message` and
`MessageStreamWriter` render canonical results back in Anthropic's exact shapes and event grammar.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

import orjson

from inferplex.dialects.anthropic.wire import (
    Base64Source,
    Block,
    CountTokensRequest,
    DocumentBlock,
    ImageBlock,
    MessageParam,
    MessagesRequest,
    TextBlock,
    TextSource,
    ToolChoice,
    ToolResultBlock,
    ToolUseBlock,
)
from inferplex.sse import encode

# Keys only an Anthropic (or Bedrock-Anthropic) target understands: removed from `raw`.
ANTHROPIC_ONLY = ("cache_control", "thinking_blocks", "thinking", "top_k", "is_error", "anthropic_extra")

# Request fields mapped to canonical ones; any other top-level field (container, mcp_servers, service_tier,
# context_management, ...) rides along in `anthropic_extra` for an Anthropic target.
_MAPPED = {
    "model",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "output_config",
    "max_tokens",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "metadata",
    "stream",
}

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def stop_reason(finish: Any, matched: Any = None) -> str:
    """An OpenAI finish_reason as Anthropic's stop_reason; unknown reasons read as `end_turn`.

    `matched` is the choice's `stop_reason` (vLLM's name, also set by the Anthropic adapter): the stop
    sequence that ended the answer, when one did.
    """
    if finish == "stop" and isinstance(matched, str):
        return "stop_sequence"
    return STOP_REASONS.get(finish, "end_turn") if isinstance(finish, str) else "end_turn"


def _sequence(choice: dict[str, Any]) -> str | None:
    matched = choice.get("stop_reason")
    return matched if isinstance(matched, str) and choice.get("finish_reason") == "stop" else None


def _cached(out: dict[str, Any], block: Any) -> dict[str, Any]:
    if getattr(block, "cache_control", None) is not None:
        out["cache_control"] = block.cache_control
    return out


def _source_url(source: Any) -> str:
    if isinstance(source, Base64Source):
        return f"data:{source.media_type};base64,{source.data}"
    return str(source.url)


def _part(block: TextBlock | ImageBlock | DocumentBlock) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return _cached({"type": "text", "text": block.text}, block)
    if isinstance(block, ImageBlock):
        return _cached({"type": "image_url", "image_url": {"url": _source_url(block.source)}}, block)
    if isinstance(block.source, TextSource):
        return _cached({"type": "text", "text": block.source.data}, block)
    if isinstance(block.source, Base64Source):
        file = {"file_data": _source_url(block.source), "filename": block.title or "document.pdf"}
        return _cached({"type": "file", "file": file}, block)
    return _cached({"type": "text", "text": f"[document: {block.source.url}]"}, block)


def _tool_result(block: ToolResultBlock) -> dict[str, Any]:
    content: Any = block.content if isinstance(block.content, str) else [_part(b) for b in block.content or ()]
    message: dict[str, Any] = {"role": "tool", "tool_call_id": block.tool_use_id, "content": content}
    if block.is_error:
        message["is_error"] = True
    return _cached(message, block)


def _user(content: list[Block]) -> list[dict[str, Any]]:
    """One Anthropic user turn: its tool results become tool messages, the rest one user message after them."""
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, ToolResultBlock):
            out.append(_tool_result(block))
        elif isinstance(block, TextBlock | ImageBlock | DocumentBlock):
            parts.append(_part(block))
        # thinking and tool_use blocks in a user turn mean nothing; Anthropic rejects them, we ignore them
    if parts:
        out.append({"role": "user", "content": parts})
    return out


def _assistant(content: list[Block]) -> dict[str, Any]:
    texts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    thinking: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextBlock):
            texts.append(_cached({"type": "text", "text": block.text}, block))
        elif isinstance(block, ToolUseBlock):
            args = orjson.dumps(block.input).decode()
            calls.append({"id": block.id, "type": "function", "function": {"name": block.name, "arguments": args}})
        elif block.type in ("thinking", "redacted_thinking"):
            thinking.append(block.model_dump(exclude_none=True))
    message: dict[str, Any] = {"role": "assistant"}
    plain = all(len(t) == 2 for t in texts)
    message["content"] = ("".join(t["text"] for t in texts) if plain else texts) if texts else None
    if calls:
        message["tool_calls"] = calls
    if thinking:
        message["thinking_blocks"] = thinking
        message["reasoning_content"] = "".join(str(b.get("thinking", "")) for b in thinking)
    if message["content"] is None and not calls:
        message["content"] = ""
    return message


def _messages(messages: list[MessageParam]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
        elif m.role == "user":
            out += _user(m.content)
        else:
            out.append(_assistant(m.content))
    return out


def _tool_choice(choice: ToolChoice, out: dict[str, Any]) -> None:
    if choice.type == "tool":
        out["tool_choice"] = {"type": "function", "function": {"name": choice.name or ""}}
    else:
        out["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[choice.type]
    if choice.disable_parallel_tool_use:
        out["parallel_tool_calls"] = False


def to_canonical(req: CountTokensRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    """(full, raw): the canonical request with and without Anthropic-only details."""
    full: dict[str, Any] = {"model": req.model}
    messages = _messages(req.messages)
    if isinstance(req.system, str) and req.system:
        messages.insert(0, {"role": "system", "content": req.system})
    elif isinstance(req.system, list) and req.system:
        messages.insert(0, {"role": "system", "content": [_part(b) for b in req.system]})
    full["messages"] = messages
    extra: dict[str, Any] = {k: v for k, v in (req.model_extra or {}).items() if k not in _MAPPED}
    server_tools = [t.model_dump(exclude_none=True) for t in req.tools or () if t.is_server_tool]
    if server_tools:
        extra["tools"] = server_tools
    output_config = {k: v for k, v in (req.output_config or {}).items() if k != "format"}
    if output_config:
        extra["output_config"] = output_config
    if isinstance(req, MessagesRequest) and req.metadata is not None:
        metadata = req.metadata.model_dump(exclude_none=True)
        if set(metadata) - {"user_id"}:
            extra["metadata"] = metadata
    client_tools = [t for t in req.tools or () if not t.is_server_tool]
    if client_tools:
        full["tools"] = [
            _cached(
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "parameters": t.input_schema,
                        **({"description": t.description} if t.description else {}),
                        **({"strict": True} if t.strict else {}),
                    },
                },
                t,
            )
            for t in client_tools
        ]
    if req.tool_choice is not None and client_tools:
        _tool_choice(req.tool_choice, full)
    elif req.tool_choice is not None and server_tools:
        extra["tool_choice"] = req.tool_choice.model_dump(exclude_none=True)
    fmt = (req.output_config or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        full["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": fmt.get("schema") or {}, "strict": True},
        }
    if req.thinking is not None:
        full["thinking"] = req.thinking
    if isinstance(req, MessagesRequest):
        full["max_completion_tokens"] = req.max_tokens
        if req.stop_sequences:
            full["stop"] = req.stop_sequences
        for name in ("temperature", "top_p", "top_k"):
            if getattr(req, name) is not None:
                full[name] = getattr(req, name)
        if req.metadata is not None and req.metadata.user_id:
            full["user"] = req.metadata.user_id
        if req.stream:
            full["stream"] = True
            full["stream_options"] = {"include_usage": True}
    if extra:
        full["anthropic_extra"] = extra
    return full, strip_anthropic(full)


def strip_anthropic(value: Any) -> Any:
    """A deep copy without the Anthropic-only keys."""
    if isinstance(value, dict):
        return {k: strip_anthropic(v) for k, v in value.items() if k not in ANTHROPIC_ONLY}
    if isinstance(value, list):
        return [strip_anthropic(v) for v in value]
    return value


def anthropic_usage(usage: Any) -> dict[str, Any]:
    """Anthropic usage from OpenAI's: input_tokens excludes cache reads and writes, which are listed apart."""
    u = usage if isinstance(usage, dict) else {}
    prompt = int(u.get("prompt_tokens") or 0)
    read = int((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    written = int(u.get("cache_creation_input_tokens") or 0)
    return {
        "input_tokens": max(prompt - read - written, 0),
        "output_tokens": int(u.get("completion_tokens") or 0),
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
    }


def message_id(upstream_id: Any) -> str:
    text = str(upstream_id or "")
    return text if text.startswith("msg_") else "msg_" + secrets.token_hex(12)


def _tool_input(arguments: str) -> Any:
    try:
        value = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def to_message(completion: Mapping[str, Any], model: str) -> dict[str, Any]:
    """An Anthropic `message` from a canonical `chat.completion` (its first choice)."""
    choice: dict[str, Any] = (completion.get("choices") or [{}])[0]
    message: dict[str, Any] = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    blocks = message.get("thinking_blocks")
    if isinstance(blocks, list) and blocks:
        content += [b for b in blocks if isinstance(b, dict)]
    elif message.get("reasoning_content"):
        content.append({"type": "thinking", "thinking": message["reasoning_content"], "signature": ""})
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    if message.get("refusal"):
        content.append({"type": "text", "text": message["refusal"]})
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id", ""),
                "name": fn.get("name", ""),
                "input": _tool_input(fn.get("arguments") or ""),
            }
        )
    return {
        "id": message_id(completion.get("id")),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(choice.get("finish_reason"), choice.get("stop_reason")),
        "stop_sequence": _sequence(choice),
        "usage": anthropic_usage(completion.get("usage")),
    }


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


class MessageStreamWriter:
    """Renders canonical chunks as Anthropic's event grammar, for one response.

    message_start, then for each block content_block_start / _delta... / _stop, then message_delta (stop
    reason and usage) and message_stop. Text, thinking and each tool call are separate blocks; the open
    block and the tool-call-index -> block-index map are this object's state.
    """

    def __init__(self, model: str, input_estimate: int) -> None:
        self.model = model
        self.input_estimate = input_estimate
        self.started = False
        self.block = -1
        self.open: str | None = None  # "text" | "thinking" | "tool:<n>"
        self.finish: str | None = None
        self.matched: str | None = None
        self.usage: Any = None

    def _event(self, name: str, data: dict[str, Any]) -> bytes:
        return encode(orjson.dumps({"type": name, **data}), name)

    def _start(self, chunk: Mapping[str, Any]) -> list[bytes]:
        self.started = True
        message: dict[str, Any] = {
            "id": message_id(chunk.get("id")),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": self.input_estimate,
                "output_tokens": 1,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }
        return [self._event("message_start", {"message": message}), self._event("ping", {})]

    def _open(self, kind: str, block: dict[str, Any]) -> list[bytes]:
        if self.open == kind:
            return []
        out = self._close()
        self.block += 1
        self.open = kind
        out.append(self._event("content_block_start", {"index": self.block, "content_block": block}))
        return out

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        return [self._event("content_block_stop", {"index": self.block})]

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return self._event("content_block_delta", {"index": self.block, "delta": delta})

    def feed(self, chunk: Mapping[str, Any]) -> list[bytes]:
        out = [] if self.started else self._start(chunk)
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # Anthropic's shape has one answer; n > 1 is refused before the call
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
                out.append(self._delta({"type": "thinking_delta", "thinking": delta["reasoning_content"]}))
            if delta.get("reasoning_signature") and self.open == "thinking":
                out.append(self._delta({"type": "signature_delta", "signature": delta["reasoning_signature"]}))
            for text in (delta.get("content"), delta.get("refusal")):
                if text:
                    out += self._open("text", {"type": "text", "text": ""})
                    out.append(self._delta({"type": "text_delta", "text": text}))
            for call in delta.get("tool_calls") or ():
                out += self._tool_call(call)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
                self.matched = _sequence(choice)
        return out

    def _tool_call(self, call: dict[str, Any]) -> list[bytes]:
        fn = call.get("function") or {}
        out = self._open(
            f"tool:{call.get('index', 0)}",
            {"type": "tool_use", "id": call.get("id") or "", "name": fn.get("name") or "", "input": {}},
        )
        if fn.get("arguments"):
            out.append(self._delta({"type": "input_json_delta", "partial_json": fn["arguments"]}))
        return out

    def end(self) -> list[bytes]:
        out = [] if self.started else self._start({})
        out += self._close()
        usage = anthropic_usage(self.usage)
        delta = {"stop_reason": stop_reason(self.finish, self.matched), "stop_sequence": self.matched}
        out.append(self._event("message_delta", {"delta": delta, "usage": usage}))
        out.append(self._event("message_stop", {}))
        return out

    def error(self, kind: str, message: str) -> list[bytes]:
        return [encode(orjson.dumps(error_body(kind, message)), "error")]
