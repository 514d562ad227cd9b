"""Canonical (OpenAI Chat Completions) <-> Google Gemini `generateContent`, for the outbound Gemini adapter.

Gemini speaks in `contents` of `parts` with roles `user` and `model`, a separate `systemInstruction`,
`functionDeclarations` with a `toolConfig`, and a `generationConfig`. Tool calls carry no ids upstream, so
ids are minted here and a tool result finds its function's name through the assistant message that made
the call. Safety stops become `content_filter`; any finish reason or part this code does not know is read
as its nearest meaning (or skipped), never a crash.
"""

from __future__ import annotations

from typing import Any

import orjson

from inferplex.canonical import ChatRequest, ContentPart, Message, NamedToolChoice
from inferplex.errors import InvalidRequest
from inferplex.providers.failures import ProviderFailure
from inferplex.responses import ChatCompletion, ChatCompletionChunk, Choice, ToolCall, Usage
from inferplex.translate import reasoning
from inferplex.translate.openai_shapes import ChunkStream, assistant_message, choice, completion

FILTERED = {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "LANGUAGE"}
# The JSON-schema keywords Gemini's `responseSchema` (an OpenAPI subset) accepts.
SCHEMA_KEYS = {
    "type",
    "format",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "items",
    "anyOf",
    "minimum",
    "maximum",
    "title",
    "propertyOrdering",
    "minLength",
    "maxLength",
    "pattern",
    "minProperties",
    "maxProperties",
    "default",
}


def finish_reason(reason: Any, has_calls: bool = False) -> str:
    """Gemini's finishReason as an OpenAI finish_reason; unknown reasons read as `stop`."""
    if reason in FILTERED:
        return "content_filter"
    if reason == "MAX_TOKENS":
        return "length"
    return "tool_calls" if has_calls else "stop"


def response_schema(schema: Any) -> Any:
    """A JSON schema as Gemini's OpenAPI subset: upper-case types, unsupported keywords removed."""
    if isinstance(schema, list):
        return [response_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key not in SCHEMA_KEYS:
            continue
        if key == "type" and isinstance(value, list):  # ["string", "null"] -> nullable string
            kinds = [v for v in value if v != "null"]
            out["type"] = str(kinds[0] if kinds else "string").upper()
            out["nullable"] = "null" in value
        elif key == "type":
            out["type"] = str(value).upper()
        elif key == "properties":
            if not isinstance(value, dict):  # the caller's own schema: refused in its words, not a 500
                raise InvalidRequest("Invalid JSON schema in the request: `properties` must be an object.")
            out[key] = {name: response_schema(v) for name, v in value.items()}
        elif key in ("items", "anyOf"):
            out[key] = response_schema(value)
        else:
            out[key] = value
    return out


def _inline(url: str) -> dict[str, Any]:
    if url.startswith("data:"):
        head, sep, data = url[5:].partition(",")
        if not sep or not head.endswith(";base64"):
            raise InvalidRequest("Data URLs must be base64 encoded (data:<type>;base64,...).", param="messages")
        return {"inlineData": {"mimeType": head.removesuffix(";base64"), "data": data}}
    mime = "image/png" if url.lower().endswith(".png") else "image/jpeg"
    return {"fileData": {"mimeType": mime, "fileUri": url}}


def _part(part: ContentPart) -> dict[str, Any]:
    if part.type == "text":
        return {"text": part.text or ""}
    if part.type == "image_url":
        return _inline(str((part.image_url or {})["url"]))
    if part.type == "input_audio":
        audio = part.input_audio or {}
        return {"inlineData": {"mimeType": f"audio/{audio.get('format', 'wav')}", "data": audio.get("data", "")}}
    if part.type == "file":
        return _inline(str((part.file or {}).get("file_data") or ""))
    return {"text": part.refusal or ""}


def _parts(content: str | list[ContentPart] | None) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content else []
    return [_part(p) for p in content]


def _args(raw: str, where: str) -> Any:
    try:
        return orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        raise InvalidRequest(f"{where}: tool call arguments must be JSON.", param=where) from None


# Google's documented placeholder for a function call Gemini did not make (another provider's, a hand-built
# history): thinking models refuse a current-turn step whose first functionCall part has no signature, and
# accept this one in its place ("Thought signatures", FAQ on transferring history from another model).
PLACEHOLDER_SIGNATURE = "skip_thought_signature_validator"


def build_contents(messages: list[Message]) -> list[dict[str, Any]]:
    """Gemini `contents`: roles user/model, same-role turns merged, tool results as functionResponse parts.
    Each model step's first call carries its signature, Gemini's own or the placeholder (see `_signed`)."""
    names: dict[str, str] = {}
    turns: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if m.role in ("system", "developer"):
            continue
        if m.role == "assistant":
            role, parts = "model", _parts(m.content)
            for j, call in enumerate(m.tool_calls or ()):
                names[call.id] = call.function.name
                args = _args(call.function.arguments, f"messages[{i}].tool_calls[{j}].function.arguments")
                part: dict[str, Any] = {"functionCall": {"name": call.function.name, "args": args}}
                signature = ((call.model_extra or {}).get("extra_content") or {}).get("google", {})
                if isinstance(signature, dict) and signature.get("thought_signature"):
                    part["thoughtSignature"] = signature["thought_signature"]
                parts.append(part)
        elif m.role == "tool":
            name = names.get(m.tool_call_id or "")
            if name is None:
                raise InvalidRequest(
                    f"messages[{i}].tool_call_id does not match an earlier tool call.",
                    param=f"messages[{i}].tool_call_id",
                )
            role, parts = "user", [{"functionResponse": {"name": name, "response": {"content": m.text()}}}]
        else:
            role, parts = "user", _parts(m.content)
        if turns and turns[-1]["role"] == role:
            turns[-1]["parts"] += parts
        else:
            turns.append({"role": role, "parts": parts})
    return [_signed(turn) for turn in turns]


def _signed(turn: dict[str, Any]) -> dict[str, Any]:
    """A model turn whose first functionCall part has no thought signature gets Google's placeholder. Gemini
    signs only the first call of a step (parallel calls after it go unsigned), so that is the one part its
    validator reads; a call from any other source has none, and without one a thinking model answers 400.
    Older turns are not validated, and any Gemini model takes the field, so it is set wherever it is missing."""
    if turn["role"] != "model":
        return turn
    first = next((part for part in turn["parts"] if "functionCall" in part), None)
    if first is not None and not first.get("thoughtSignature"):
        first["thoughtSignature"] = PLACEHOLDER_SIGNATURE
    return turn


def _tool_config(request: ChatRequest) -> dict[str, Any] | None:
    choice = request.tool_choice
    if choice is None:
        return None
    if isinstance(choice, NamedToolChoice):
        name = (choice.function or {}).get("name")
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}
    return {"functionCallingConfig": {"mode": {"auto": "AUTO", "required": "ANY", "none": "NONE"}[choice]}}


def build_request(request: ChatRequest) -> dict[str, Any]:
    """The generateContent body (the model is in the URL) for a request `capabilities.plan` has trimmed."""
    body: dict[str, Any] = {"contents": build_contents(request.messages)}
    system = [p for m in request.messages if m.role in ("system", "developer") for p in _parts(m.content)]
    if system:
        body["systemInstruction"] = {"parts": system}
    if request.tools:
        decls = []
        for t in request.tools:
            if t.function is None:
                continue
            decl: dict[str, Any] = {"name": t.function.name}
            if t.function.description:
                decl["description"] = t.function.description
            if t.function.parameters and t.function.parameters.get("properties"):
                decl["parameters"] = response_schema(t.function.parameters)
            decls.append(decl)
        body["tools"] = [{"functionDeclarations": decls}]
        config = _tool_config(request)
        if config is not None:
            body["toolConfig"] = config
    gen: dict[str, Any] = {}
    for ours, theirs in (
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("seed", "seed"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
        ("n", "candidateCount"),
    ):
        if getattr(request, ours) is not None:
            gen[theirs] = getattr(request, ours)
    top_k = (request.model_extra or {}).get("top_k")
    if top_k is not None:
        gen["topK"] = top_k
    thinking_budget = reasoning.budget((request.model_extra or {}).get("reasoning_effort"))
    if thinking_budget is not None:
        gen["thinkingConfig"] = {"thinkingBudget": thinking_budget}
    if request.output_limit:
        gen["maxOutputTokens"] = request.output_limit
    if request.stop_list:
        gen["stopSequences"] = request.stop_list
    fmt = request.response_format
    if fmt is not None and fmt.type != "text":
        gen["responseMimeType"] = "application/json"
        if fmt.type == "json_schema" and fmt.json_schema is not None and fmt.json_schema.schema_:
            gen["responseSchema"] = response_schema(fmt.json_schema.schema_)
    if gen:
        body["generationConfig"] = gen
    return body


def usage(meta: Any) -> Usage:
    """OpenAI usage from usageMetadata; thinking tokens count as completion (they are billed as output)."""
    u = meta if isinstance(meta, dict) else {}
    prompt = int(u.get("promptTokenCount") or 0)
    thoughts = int(u.get("thoughtsTokenCount") or 0)
    completion = int(u.get("candidatesTokenCount") or 0) + thoughts
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": int(u.get("cachedContentTokenCount") or 0)},
        "completion_tokens_details": {"reasoning_tokens": thoughts},
    }


class _Calls:
    """Mints OpenAI tool-call ids for Gemini's id-less function calls, numbered across a response."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.count = 0

    def call(self, fc: dict[str, Any], signature: Any = None) -> ToolCall:
        self.count += 1
        args = orjson.dumps(fc.get("args") or {}).decode()
        out: ToolCall = {
            "id": str(fc.get("id") or f"call_{self.prefix}_{self.count}"),
            "type": "function",
            "function": {"name": str(fc.get("name", "")), "arguments": args},
        }
        if isinstance(signature, str) and signature:
            # Gemini wants the signature back with its call next turn; Google's own OpenAI layer uses this key
            out["extra_content"] = {"google": {"thought_signature": signature}}
        return out


def _split(parts: Any, calls: _Calls) -> tuple[str, str, list[ToolCall]]:
    """(text, thoughts, tool calls) of a candidate's parts; unknown part kinds are skipped."""
    text: list[str] = []
    thoughts: list[str] = []
    tool_calls: list[ToolCall] = []
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, dict):
            continue
        if "functionCall" in part:
            tool_calls.append(calls.call(part["functionCall"], part.get("thoughtSignature")))
        elif isinstance(part.get("text"), str):
            (thoughts if part.get("thought") else text).append(part["text"])
    return "".join(text), "".join(thoughts), tool_calls


def _blocked(data: dict[str, Any]) -> bool:
    return not data.get("candidates") and bool((data.get("promptFeedback") or {}).get("blockReason"))


def to_completion(data: Any, public_model: str) -> ChatCompletion:
    if not isinstance(data, dict):
        raise ProviderFailure("api_error", "the provider's response is not an object")
    response_id = str(data.get("responseId") or "gemini")
    calls = _Calls(response_id[-8:])
    choices: list[Choice] = []
    for i, cand in enumerate(data.get("candidates") or ()):
        text, thoughts, tool_calls = _split((cand.get("content") or {}).get("parts"), calls)
        message = assistant_message(text, tool_calls, thoughts)
        choices.append(choice(message, finish_reason(cand.get("finishReason"), bool(tool_calls)), cand.get("index", i)))
    if not choices and _blocked(data):
        choices.append(choice(assistant_message("", []), "content_filter"))
    if not choices:
        raise ProviderFailure("api_error", "the provider's response has no candidates")
    return completion(response_id, public_model, choices, usage(data.get("usageMetadata")))


class GeminiStream(ChunkStream):
    """Translates one streamGenerateContent (alt=sse) response into chunks; usage is sent once, at the end."""

    def __init__(self, public_model: str) -> None:
        super().__init__(public_model, "gemini")
        self.started = False
        self.tool_index: dict[int, int] = {}
        self.calls = _Calls("s")
        self.usage: Any = None
        self.finished = False

    def feed(self, data: Any) -> list[ChatCompletionChunk]:
        if not isinstance(data, dict):
            return []
        if "error" in data:
            err = data["error"] if isinstance(data["error"], dict) else {}
            raise ProviderFailure(str(err.get("status") or "api_error"), str(err.get("message") or "stream failed"))
        self.id = str(data.get("responseId") or self.id)
        if data.get("usageMetadata"):
            self.usage = data["usageMetadata"]
        out: list[ChatCompletionChunk] = []
        if not self.started:
            self.started = True
            out.append(self._chunk({"role": "assistant", "content": ""}))
        if _blocked(data):
            self.finished = True
            out.append(self._chunk({}, "content_filter"))
        for i, cand in enumerate(data.get("candidates") or ()):
            index = cand.get("index", i)
            text, thoughts, tool_calls = _split((cand.get("content") or {}).get("parts"), self.calls)
            if thoughts:
                out.append(self._chunk(index=index, delta={"reasoning_content": thoughts}))
            if text:
                out.append(self._chunk(index=index, delta={"content": text}))
            for call in tool_calls:
                position = self.tool_index[index] = self.tool_index.get(index, -1) + 1
                out.append(self._chunk(index=index, delta={"tool_calls": [{"index": position, **call}]}))
            if cand.get("finishReason"):
                self.finished = True
                out.append(self._chunk({}, finish_reason(cand["finishReason"], index in self.tool_index), index))
        return out

    def end(self) -> ChatCompletionChunk:
        return self._usage_chunk(usage(self.usage))
