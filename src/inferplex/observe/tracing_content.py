"""Prompt and completion content as GenAI's message shapes, for traces with `capture_content` on.

OpenTelemetry's GenAI conventions put content on spans as `gen_ai.input.messages` and
`gen_ai.output.messages`: JSON lists of `{"role", "parts": [...]}` whose parts are `text` (`content`),
`tool_call` (`id`, `name`, `arguments`) and `tool_call_response` (`id`, `response`). The input is read from
the body an attempt sent upstream (`providers/http.Outbound.sent`): what the model saw, with the gateway's
system prompt, in whichever wire format the provider speaks (OpenAI's and Anthropic's `messages`, Gemini's
`contents`, Bedrock's Converse, the Responses API's `input`). A buffered chat answer is read from the
canonical completion; a stream's text from the events the attempt received (`Replies`). A part that is not
text or a tool call (an image, audio) is named by its type only: a trace is not a copy of the media.
"""

from __future__ import annotations

from typing import Any

_TEXT_TYPES = {"text", "input_text", "output_text"}
_CALL_TYPES = {"tool_use", "function_call"}
_RESULT_TYPES = {"tool_result", "function_call_output"}


def input_messages(body: Any) -> list[dict[str, Any]] | None:
    """The messages of an upstream request body, or None when it has none (an embedding, an image)."""
    if not isinstance(body, dict):
        return None
    out: list[dict[str, Any]] = []
    system = body.get("system") or body.get("systemInstruction") or body.get("system_instruction")
    if system:
        out.append({"role": "system", "parts": _parts(system)})
    if isinstance(body.get("instructions"), str):  # the Responses API's system prompt
        out.append({"role": "system", "parts": [_text(body["instructions"])]})
    messages = body.get("messages") or body.get("contents")
    if messages is None and "input" in body and ("instructions" in body or isinstance(body["input"], list)):
        messages = body["input"]  # the Responses API; an embedding's `input` has no roles and is left out
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if not isinstance(messages, list):
        return out or None
    for message in messages:
        if isinstance(message, dict):
            out.append(_message(message))
    return out


def _message(message: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role") or ("tool" if message.get("type") in _RESULT_TYPES else "user")
    role = "assistant" if role == "model" else role
    if message.get("type") in _CALL_TYPES | _RESULT_TYPES:  # a Responses API item that is itself a call
        return {"role": role, "parts": [_part(message)]}
    parts = _parts(message.get("content", message.get("parts")))
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict):
            fn = call.get("function") or {}
            parts.append(_call(call.get("id"), fn.get("name"), fn.get("arguments")))
    if role == "tool" and message.get("tool_call_id"):  # OpenAI's tool answer: its content is the response
        text = " ".join(p.get("content", "") for p in parts if p.get("type") == "text")
        parts = [_result(message["tool_call_id"], text)]
    return {"role": role, "parts": parts}


def _parts(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [_text(content)]
    if isinstance(content, dict):
        content = content.get("parts", [content])
    if not isinstance(content, list):
        return []
    return [_part(p) if isinstance(p, dict) else _text(str(p)) for p in content]


def _part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind in _TEXT_TYPES or (kind is None and isinstance(part.get("text"), str)):
        return _text(part.get("text", ""))
    if kind in _CALL_TYPES:
        arguments = part.get("input", part.get("arguments"))
        return _call(part.get("id") or part.get("call_id"), part.get("name"), arguments)
    if kind in _RESULT_TYPES:
        response = part.get("content", part.get("output"))
        return _result(part.get("tool_use_id") or part.get("call_id"), response)
    for key in ("functionCall", "toolUse"):  # Gemini's and Bedrock's
        if isinstance(part.get(key), dict):
            call = part[key]
            return _call(call.get("toolUseId") or call.get("id"), call.get("name"), call.get("args", call.get("input")))
    for key in ("functionResponse", "toolResult"):
        if isinstance(part.get(key), dict):
            result = part[key]
            response = result.get("response", result.get("content"))
            return _result(result.get("toolUseId") or result.get("id"), response)
    return {"type": kind if isinstance(kind, str) else next(iter(part), "unknown")}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "content": text}


def _call(id_: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_call", "id": id_, "name": name, "arguments": arguments}


def _result(id_: Any, response: Any) -> dict[str, Any]:
    return {"type": "tool_call_response", "id": id_, "response": response}


class Replies:
    """The text an attempt received, per choice, and why each ended: fed every JSON answer or stream event
    (`providers/http.Outbound.received`), in OpenAI's, Anthropic's, Gemini's or the Responses API's shape."""

    __slots__ = ("reasons", "texts")

    def __init__(self) -> None:
        self.texts: dict[int, list[str]] = {}
        self.reasons: dict[int, str] = {}

    def _add(self, index: Any, text: Any) -> None:
        if isinstance(text, str) and text:
            self.texts.setdefault(index if isinstance(index, int) else 0, []).append(text)

    def add(self, data: Any) -> None:
        if not isinstance(data, dict):
            return
        for choice in data.get("choices") or ():  # OpenAI: a chunk's delta, or a completion's message
            if isinstance(choice, dict):
                index = choice.get("index", 0)
                body = choice.get("delta") or choice.get("message") or {}
                self._add(index, body.get("content") if isinstance(body, dict) else None)
                if choice.get("finish_reason"):
                    self.reasons[index] = choice["finish_reason"]
        for candidate in data.get("candidates") or ():  # Gemini
            if isinstance(candidate, dict):
                index = candidate.get("index", 0)
                for part in (candidate.get("content") or {}).get("parts") or ():
                    self._add(index, part.get("text") if isinstance(part, dict) else None)
                if candidate.get("finishReason"):
                    self.reasons[index] = candidate["finishReason"]
        kind = data.get("type")
        delta = data.get("delta")
        if kind == "content_block_delta" and isinstance(delta, dict):  # Anthropic's stream
            self._add(0, delta.get("text"))
        elif kind == "message_delta" and isinstance(delta, dict) and delta.get("stop_reason"):
            self.reasons[0] = delta["stop_reason"]
        elif kind == "message":  # Anthropic's buffered answer
            for block in data.get("content") or ():
                if isinstance(block, dict) and block.get("type") == "text":
                    self._add(0, block.get("text"))
            if data.get("stop_reason"):
                self.reasons[0] = data["stop_reason"]
        elif kind == "response.output_text.delta":  # the Responses API's stream
            self._add(0, delta)

    def messages(self) -> list[dict[str, Any]]:
        indexes = sorted(self.texts.keys() | self.reasons.keys())
        return [_reply("".join(self.texts.get(i, ())), self.reasons.get(i)) for i in indexes]


def _reply(text: str, finish_reason: str | None) -> dict[str, Any]:
    return {"role": "assistant", "parts": [_text(text)], "finish_reason": finish_reason}


def output_messages(response: Any, replies: Replies | None) -> list[dict[str, Any]] | None:
    """The answer's messages: a buffered chat completion's choices, else the text a stream delivered."""
    choices = response.get("choices") if isinstance(response, dict) else None
    if isinstance(choices, list):
        out = []
        for choice in choices:
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict):
                continue
            parts = _parts(message.get("content"))
            parts += _message({"role": "assistant", "tool_calls": message.get("tool_calls")})["parts"]
            out.append({"role": "assistant", "parts": parts, "finish_reason": choice.get("finish_reason")})
        return out
    if replies is not None and (replies.texts or replies.reasons):
        return replies.messages()
    return None
