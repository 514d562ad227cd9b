"""Canonical (OpenAI Chat Completions) <-> AWS Bedrock Converse / ConverseStream, for the Bedrock adapter.

Converse is one message shape for every model family on Bedrock (Anthropic, Meta Llama, Mistral, ...):
content blocks `text`, `image` (raw bytes, base64 in JSON), `toolUse`, `toolResult`, `reasoningContent`
and `cachePoint`; `system` blocks; `inferenceConfig`; `toolConfig`. Family-specific knobs (Anthropic's
`top_k` and `thinking`) go in `additionalModelRequestFields`, chosen by the model id's documented family
prefix. ConverseStream events (messageStart, contentBlockStart/Delta/Stop, messageStop, metadata, and
exceptions) become chunks in `BedrockStream`; unknown stop reasons, blocks and events never crash.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from inferplex.canonical import ChatRequest, ContentPart, Message, NamedToolChoice
from inferplex.errors import InvalidRequest
from inferplex.providers.failures import ProviderFailure
from inferplex.responses import ChatCompletion, ChatCompletionChunk, ToolCall, Usage
from inferplex.translate.openai_shapes import ChunkStream, assistant_message, cached_usage, choice, completion

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}
DOC_FORMATS = {
    "application/pdf": "pdf",
    "text/csv": "csv",
    "text/plain": "txt",
    "text/html": "html",
    "text/markdown": "md",
}


def finish_reason(stop: Any) -> str:
    return FINISH_REASONS.get(stop, "stop") if isinstance(stop, str) else "stop"


def family(model_id: str) -> str:
    """The model family from a Bedrock model id (`anthropic.claude-...`, `us.meta.llama...`, an ARN)."""
    name = model_id.rsplit("/", 1)[-1]
    parts = name.split(".")
    if len(parts) > 2 and len(parts[0]) <= 4:  # cross-region inference profile prefix: us., eu., apac., global.
        parts = parts[1:]
    return parts[0] if len(parts) > 1 else "unknown"


def _media(url: str, part: str) -> tuple[str, str]:
    if not url.startswith("data:"):
        raise InvalidRequest(
            f"Bedrock takes {part}s as base64 data URLs only (data:<type>;base64,...), not links.", param="messages"
        )
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        raise InvalidRequest("Data URLs must be base64 encoded (data:<type>;base64,...).", param="messages")
    return head.removesuffix(";base64"), data


def _block(part: ContentPart) -> list[dict[str, Any]]:
    if part.type == "text":
        out: list[dict[str, Any]] = [{"text": part.text or ""}] if part.text else []
    elif part.type == "image_url":
        mime, data = _media(str((part.image_url or {})["url"]), "image")
        if mime not in IMAGE_FORMATS:
            raise InvalidRequest(f"Bedrock does not take images of type {mime}.", param="messages")
        out = [{"image": {"format": IMAGE_FORMATS[mime], "source": {"bytes": data}}}]
    elif part.type == "file":
        mime, data = _media(str((part.file or {}).get("file_data") or ""), "file")
        name = str((part.file or {}).get("filename") or "document").rsplit(".", 1)[0] or "document"
        out = [{"document": {"format": DOC_FORMATS.get(mime, "txt"), "name": name, "source": {"bytes": data}}}]
    else:
        out = [{"text": part.refusal or ""}] if part.refusal else []
    if (part.model_extra or {}).get("cache_control") is not None:
        out.append({"cachePoint": {"type": "default"}})
    return out


def _blocks(content: str | list[ContentPart] | None) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content else []
    return [b for p in content for b in _block(p)]


def _args(raw: str, where: str) -> Any:
    try:
        return orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        raise InvalidRequest(f"{where}: tool call arguments must be JSON.", param=where) from None


def _turn(m: Message, i: int) -> tuple[str, list[dict[str, Any]]]:
    if m.role == "tool":
        text = m.text()
        status = "error" if (m.model_extra or {}).get("is_error") else "success"
        return "user", [
            {"toolResult": {"toolUseId": m.tool_call_id, "content": [{"text": text or " "}], "status": status}}
        ]
    if m.role == "assistant":
        blocks: list[dict[str, Any]] = []
        for b in (m.model_extra or {}).get("thinking_blocks") or ():
            if isinstance(b, dict) and b.get("type") == "thinking":
                blocks.append(
                    {
                        "reasoningContent": {
                            "reasoningText": {"text": b.get("thinking", ""), "signature": b.get("signature", "")}
                        }
                    }
                )
        blocks += _blocks(m.content)
        for j, call in enumerate(m.tool_calls or ()):
            args = _args(call.function.arguments, f"messages[{i}].tool_calls[{j}].function.arguments")
            blocks.append({"toolUse": {"toolUseId": call.id, "name": call.function.name, "input": args}})
        return "assistant", blocks
    return "user", _blocks(m.content)


def build_messages(messages: list[Message]) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if m.role in ("system", "developer"):
            continue
        role, blocks = _turn(m, i)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    return turns


def _tool_choice(request: ChatRequest) -> dict[str, Any] | None:
    choice = request.tool_choice
    if choice is None or choice == "none":
        return None
    if isinstance(choice, NamedToolChoice):
        return {"tool": {"name": (choice.function or {}).get("name")}}
    return {"any": {}} if choice == "required" else {"auto": {}}


def build_request(request: ChatRequest, model_id: str, default_max_tokens: int) -> dict[str, Any]:
    """The Converse body (the model id is in the URL) for a request `capabilities.plan` has trimmed."""
    body: dict[str, Any] = {"messages": build_messages(request.messages)}
    system = [b for m in request.messages if m.role in ("system", "developer") for b in _blocks(m.content)]
    if system:
        body["system"] = system
    inference: dict[str, Any] = {"maxTokens": request.output_limit or default_max_tokens}
    if request.temperature is not None:
        inference["temperature"] = request.temperature
    if request.top_p is not None:
        inference["topP"] = request.top_p
    if request.stop_list:
        inference["stopSequences"] = request.stop_list
    body["inferenceConfig"] = inference
    # tool_choice "none" has no Converse spelling: the tools are left out instead
    if request.tools and request.tool_choice != "none":
        tools: list[dict[str, Any]] = []
        for t in request.tools:
            if t.function is None:
                continue
            spec: dict[str, Any] = {
                "name": t.function.name,
                "inputSchema": {"json": t.function.parameters or {"type": "object", "properties": {}}},
            }
            if t.function.description:
                spec["description"] = t.function.description
            tools.append({"toolSpec": spec})
            if (t.model_extra or {}).get("cache_control") is not None:
                tools.append({"cachePoint": {"type": "default"}})
        config: dict[str, Any] = {"tools": tools}
        choice = _tool_choice(request)
        if choice is not None:
            config["toolChoice"] = choice
        body["toolConfig"] = config
    extra = request.model_extra or {}
    if family(model_id) == "anthropic":
        fields = {k: extra[k] for k in ("top_k", "thinking") if extra.get(k) is not None}
        if fields:
            body["additionalModelRequestFields"] = fields
    return body


def usage(data: Any) -> Usage:
    """OpenAI usage from Converse's: cache reads and writes are part of the input, reported apart too."""
    u = data if isinstance(data, dict) else {}
    return cached_usage(
        int(u.get("inputTokens") or 0),
        int(u.get("cacheReadInputTokens") or 0),
        int(u.get("cacheWriteInputTokens") or 0),
        int(u.get("outputTokens") or 0),
    )


def to_completion(data: Any, public_model: str) -> ChatCompletion:
    content = ((data.get("output") or {}).get("message") or {}).get("content") if isinstance(data, dict) else None
    if not isinstance(content, list):
        raise ProviderFailure("api_error", "the provider's response has no output message")
    texts: list[str] = []
    thinking: list[str] = []
    blocks: list[dict[str, Any]] = []
    calls: list[ToolCall] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif "toolUse" in block:
            use = block["toolUse"]
            calls.append(
                {
                    "id": use.get("toolUseId", ""),
                    "type": "function",
                    "function": {"name": use.get("name", ""), "arguments": orjson.dumps(use.get("input", {})).decode()},
                }
            )
        elif "reasoningContent" in block:
            text = block["reasoningContent"].get("reasoningText") or {}
            thinking.append(str(text.get("text", "")))
            blocks.append(
                {"type": "thinking", "thinking": text.get("text", ""), "signature": text.get("signature", "")}
            )
    message = assistant_message("".join(texts), calls, "".join(thinking), blocks if thinking else None)
    chosen = choice(message, finish_reason(data.get("stopReason")))
    return completion("bedrock-" + str(int(time.time() * 1000)), public_model, [chosen], usage(data.get("usage")))


class BedrockStream(ChunkStream):
    """Translates ConverseStream events into chunks; the usage chunk comes from the final `metadata` event."""

    def __init__(self, public_model: str) -> None:
        super().__init__(public_model, "bedrock-" + str(int(time.time() * 1000)))
        self.tool_index: dict[int, int] = {}
        self.stopped = False
        self.done = False

    def feed(self, event: str, data: Any, message_type: str = "event") -> list[ChatCompletionChunk]:
        if message_type in ("exception", "error"):
            message = data.get("message") if isinstance(data, dict) else None
            kind = event[:1].upper() + event[1:] if event else "InternalServerException"
            raise ProviderFailure(kind, str(message or "the provider failed mid-stream"))
        if not isinstance(data, dict):
            return []
        if event == "messageStart":
            return [self._chunk({"role": "assistant", "content": ""})]
        if event == "contentBlockStart":
            use = (data.get("start") or {}).get("toolUse")
            if isinstance(use, dict):
                index = int(data.get("contentBlockIndex", 0))
                position = self.tool_index[index] = len(self.tool_index)
                call: ToolCall = {
                    "index": position,
                    "id": use.get("toolUseId", ""),
                    "type": "function",
                    "function": {"name": use.get("name", ""), "arguments": ""},
                }
                return [self._chunk({"tool_calls": [call]})]
            return []
        if event == "contentBlockDelta":
            return self._delta(int(data.get("contentBlockIndex", 0)), data.get("delta") or {})
        if event == "messageStop":
            self.stopped = True
            return [self._chunk({}, finish_reason(data.get("stopReason")))]
        if event == "metadata":
            self.done = True
            return [self._usage_chunk(usage(data.get("usage")))]
        return []  # contentBlockStop and events added after this was written

    def _delta(self, index: int, delta: dict[str, Any]) -> list[ChatCompletionChunk]:
        if isinstance(delta.get("text"), str):
            return [self._chunk({"content": delta["text"]})]
        if "toolUse" in delta and index in self.tool_index:
            piece = (delta["toolUse"] or {}).get("input") or ""
            if not piece:
                return []
            return [self._chunk({"tool_calls": [{"index": self.tool_index[index], "function": {"arguments": piece}}]})]
        reasoning = delta.get("reasoningContent")
        if isinstance(reasoning, dict):
            if reasoning.get("text"):
                return [self._chunk({"reasoning_content": reasoning["text"]})]
            if reasoning.get("signature"):
                return [self._chunk({"reasoning_signature": reasoning["signature"]})]
        return []
