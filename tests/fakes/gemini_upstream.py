"""A fake Gemini API (generativelanguage v1beta): a real HTTP server that rejects what Gemini rejects.

Shapes follow Google's REST reference and the `google-genai` SDK types: GenerateContentResponse
(`candidates[].content.parts`, `finishReason`, `usageMetadata`, `promptFeedback`), streamGenerateContent
with `alt=sse` (one `data:` JSON per event, `\\r\\n` line ends, no terminator), and error bodies
`{"error": {"code", "message", "status"}}`. It rejects a missing or wrong `x-goog-api-key`, unknown fields
(proto JSON parsing: `Unknown name "x"`), roles other than user/model, empty parts, lower-case schema types,
and function responses that do not answer the calls of the turn right before them.

Behaviour by model name: `*echo*` echoes the last user text; `*tool*` calls the first allowed function
(`*parallel*`: two); `*safety*` stops with SAFETY; `*blocked*` blocks the prompt; `*think*` adds a thought
part; `*sig*` signs its first call and, as a thinking model, validates the current turn's signatures
(`signature_error`: only the current turn, only each step's first call, Google's placeholders accepted);
`*cache*` reports cached tokens; `*future*` an unknown part and finish reason; `*error-<code>*` fails
(429 with `retry-after: 7`); `*midstream*` streams some text, then an UNAVAILABLE error event; `*slow*`
streams "tick " every 50 ms for 30 s, noting when the client hangs up (`hangups`);
`*choices*` gives each candidate its own text and streams the candidates word by word, taking turns, with
`index` 0 left out as proto3 JSON does.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from tests.fakes.server import FakeServer, sample, words

TOP = {
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
    "labels",
}
GEN = {
    "temperature",
    "topP",
    "topK",
    "candidateCount",
    "maxOutputTokens",
    "stopSequences",
    "seed",
    "presencePenalty",
    "frequencyPenalty",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "responseLogprobs",
    "logprobs",
    "thinkingConfig",
    "responseModalities",
}
PART_KEYS = {
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
}
TYPES = {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"}
SCHEMA = {
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
STATUS = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def error(code: int, message: str) -> web.Response:
    body = {"error": {"code": code, "message": message, "status": STATUS.get(code, "UNKNOWN")}}
    headers = {"retry-after": "7"} if code == 429 else None
    return web.Response(status=code, body=orjson.dumps(body), content_type="application/json", headers=headers)


def _schema_error(schema: Any, where: str) -> str | None:
    if not isinstance(schema, dict):
        return None
    for key, value in schema.items():
        if key not in SCHEMA:
            return f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': Cannot find field."
        if key == "type" and value not in TYPES:
            enum = "type.googleapis.com/google.ai.generativelanguage.v1beta.Type"
            return f"Invalid value at '{where}.type' ({enum}), \"{value}\""
    for name, sub in (schema.get("properties") or {}).items():
        if err := _schema_error(sub, f"{where}.properties[{name}].value"):
            return err
    return _schema_error(schema.get("items"), where + ".items")


def validate(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "Invalid JSON payload received."
    for key in body:
        if key not in TOP:
            return f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.'
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    for i, c in enumerate(contents):
        if c.get("role") not in ("user", "model"):
            return "Please use a valid role: user, model."
        if not c.get("parts"):
            return f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
        for part in c["parts"]:
            if not PART_KEYS & set(part):
                return (
                    f"* GenerateContentRequest.contents[{i}].parts: required oneof field 'data' must have one "
                    "initialized field"
                )
    if err := _unanswered_calls(contents):
        return err
    for key in body.get("generationConfig") or {}:
        if key not in GEN:
            return f"Invalid JSON payload received. Unknown name \"{key}\" at 'generation_config': Cannot find field."
    if err := _schema_error(
        (body.get("generationConfig") or {}).get("responseSchema"), "generation_config.response_schema"
    ):
        return err
    for tool in body.get("tools") or ():
        for decl in tool.get("functionDeclarations") or ():
            if err := _schema_error(decl.get("parameters"), "tools[0].function_declarations[0].parameters"):
                return err
    mode = ((body.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode")
    if mode is not None and mode not in ("AUTO", "ANY", "NONE", "VALIDATED"):
        return f"Invalid value at 'tool_config.function_calling_config.mode', \"{mode}\""
    return None


def _unanswered_calls(contents: list[dict[str, Any]]) -> str | None:
    """Gemini's 400s for function responses that do not answer the calls of the turn right before them."""
    for i, c in enumerate(contents):
        responses = [p for p in c["parts"] if "functionResponse" in p]
        if not responses:
            continue
        calls = [p for p in contents[i - 1]["parts"] if "functionCall" in p] if i else []
        if not calls:
            return "Please ensure that function response turn comes immediately after a function call turn."
        if len(calls) != len(responses):
            return (
                "Please ensure that the number of function response parts is equal to the number of function "
                "call parts of the function call turn."
            )
    return None


SIGNATURE = "c2lnbmF0dXJl"  # what this fake's `*sig*` models sign their first call with
# the placeholders Google documents for calls Gemini did not make ("Thought signatures", its FAQ)
PLACEHOLDER_SIGNATURES = {"skip_thought_signature_validator", "context_engineering_is_the_way_to_go"}


def signature_error(contents: list[dict[str, Any]]) -> str | None:
    """A thinking model's check, as Google documents it: the current turn starts at the last user content
    with standard content (not function responses); in it, the first functionCall part of every model step
    must carry a signature, the model's own or a placeholder. Earlier turns and later calls of a step (Gemini
    signs only the first of parallel calls) are not checked."""
    start = next(
        (i for i in range(len(contents) - 1, -1, -1) if contents[i]["role"] == "user" and _standard(contents[i])),
        0,
    )
    for i in range(start, len(contents)):
        calls = [p for p in contents[i]["parts"] if "functionCall" in p] if contents[i]["role"] == "model" else []
        if not calls:
            continue
        signature = calls[0].get("thoughtSignature")
        if not signature:
            return (
                "Function call is missing a thought_signature in functionCall parts. This is required for tools "
                f"to work correctly. Additional data, function call `{calls[0]['functionCall'].get('name')}`, "
                f"position {i + 1}."
            )
        if signature != SIGNATURE and signature not in PLACEHOLDER_SIGNATURES:
            return "Corrupted thought signature."
    return None


def _standard(content: dict[str, Any]) -> bool:
    return any("functionResponse" not in part for part in content["parts"])


def _text(content: dict[str, Any]) -> str:
    return " ".join(p["text"] for p in content["parts"] if isinstance(p.get("text"), str))


def candidates(model: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(candidates, usageMetadata) for a valid request."""
    gen = body.get("generationConfig") or {}
    last = next(c for c in reversed(body["contents"]) if c["role"] == "user")
    decls = [d for t in body.get("tools") or () for d in t.get("functionDeclarations") or ()]
    config = (body.get("toolConfig") or {}).get("functionCallingConfig") or {}
    allowed = config.get("allowedFunctionNames") or [d["name"] for d in decls]
    parts: list[dict[str, Any]] = []
    finish = "STOP"
    results = [p["functionResponse"] for p in last["parts"] if "functionResponse" in p]
    if "think" in model:
        parts.append({"text": "Thinking it over.", "thought": True})
    if results:
        parts.append({"text": f"tool said: {results[0]['response'].get('content')}"})
    elif decls and config.get("mode") != "NONE" and ("tool" in model or config.get("mode") == "ANY"):
        n = 2 if "parallel" in model else 1
        parts += [{"functionCall": {"name": name, "args": {"city": "Paris"}}} for name in allowed[:n]]
        if "sig" in model:  # thinking models sign their first call and want the signature back
            parts[0]["thoughtSignature"] = SIGNATURE
    elif gen.get("responseMimeType") == "application/json":
        parts.append({"text": orjson.dumps(sample(gen.get("responseSchema")) or {"ok": True}).decode()})
    elif "safety" not in model:
        reply = ("echo: " + _text(last)).split(" ")
        limit = gen.get("maxOutputTokens")
        if isinstance(limit, int) and limit < len(reply):
            reply, finish = reply[:limit], "MAX_TOKENS"
        text = " ".join(reply)
        for seq in gen.get("stopSequences") or ():
            if seq in text:
                text = text[: text.index(seq)]
        parts.append({"text": text})
    if "safety" in model:
        finish = "SAFETY"
    if "future" in model:
        parts.append({"executableCode": {"language": "PYTHON", "code": "print(1)"}})
        finish = "SOME_NEW_REASON"
    prompt = sum(words(_text(c)) for c in body["contents"])
    output = sum(words(p.get("text") or "x") for p in parts if not p.get("thought"))
    usage: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output,
    }
    if "cache" in model:
        usage["cachedContentTokenCount"] = 50
        usage["promptTokenCount"] += 50
        usage["totalTokenCount"] += 50
    if "think" in model:
        usage["thoughtsTokenCount"] = 3
    ratings = [{"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"}]
    cands = [
        {"content": {"parts": _own(parts, i, model), "role": "model"}, "finishReason": finish, "index": i}
        for i in range(int(gen.get("candidateCount") or 1))
    ]
    for cand in cands:
        cand["safetyRatings"] = ratings
    return cands, usage


def _own(parts: list[dict[str, Any]], i: int, model: str) -> list[dict[str, Any]]:
    """`*choices*`: each candidate's text ends with ` (candidate i)`, so candidates can be told apart."""
    if "choices" not in model:
        return parts
    return [{**p, "text": p["text"] + f" (candidate {i})"} if "text" in p else p for p in parts]


def _indexed(cand: dict[str, Any], index: int) -> dict[str, Any]:
    """A candidate as proto3 JSON writes it: `index` 0 is the default value, so it is left out."""
    return {**cand, "index": index} if index else cand


class FakeGemini(FakeServer):
    def __init__(self, api_key: str = "gm-fake") -> None:
        super().__init__(name="gemini")
        self.api_key = api_key

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1beta/models/{call}", self.call)]

    async def call(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["call"].partition(":")
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return error(400, "Invalid JSON payload received.")
        self.record(request, body)
        if refused := key_error(request, self.api_key):
            return refused
        if method not in ("generateContent", "streamGenerateContent"):
            return error(404, f"Method {method} not found")
        if msg := validate(body):
            return error(400, msg)
        if "sig" in model and (msg := signature_error(body["contents"])):
            return error(400, msg)
        if "error-" in model:
            code = int(model.rsplit("-", 1)[1])
            return error(code, "The model is overloaded. Please try again later." if code == 503 else f"fake {code}")
        if "blocked" in model:
            data: dict[str, Any] = {
                "promptFeedback": {"blockReason": "SAFETY"},
                "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3},
            }
            cands: list[dict[str, Any]] = []
        else:
            cands, usage = candidates(model, body)
            data = {"candidates": cands, "usageMetadata": usage}
        data.update(modelVersion=model, responseId="resp-fake-0001")
        if method == "generateContent":
            return web.Response(body=orjson.dumps(data), content_type="application/json")
        if request.query.get("alt") != "sse":
            return web.Response(body=orjson.dumps([data]), content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if "slow" in model:
            tick = {"candidates": [{"index": 0, "content": {"role": "model", "parts": [{"text": "tick "}]}}]}
            return await self.tick(resp, b"data: " + orjson.dumps(tick) + b"\r\n\r\n")
        events = self._events(data, cands)
        if "midstream" in model:  # some text, then the error Gemini sends inside a stream
            error_event = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
            events = [events[0], error_event]
        for event in events:
            await resp.write(b"data: " + orjson.dumps(event) + b"\r\n\r\n")
        return resp

    def _events(self, data: dict[str, Any], cands: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The response cut the way Gemini streams it: text in pieces, calls whole, finish on the last."""
        if not cands:
            return [data]
        meta = {"modelVersion": data["modelVersion"], "responseId": data["responseId"]}
        if "choices" in data["modelVersion"]:
            return self._interleaved(data, cands, meta)
        events = []
        for cand in cands:
            for part in cand["content"]["parts"]:
                pieces = [part]
                if isinstance(part.get("text"), str) and not part.get("thought"):
                    ws = part["text"].split(" ")
                    pieces = [{"text": w if k == 0 else " " + w} for k, w in enumerate(ws)]
                for piece in pieces:
                    events.append(
                        {
                            "candidates": [{"content": {"parts": [piece], "role": "model"}, "index": cand["index"]}],
                            "usageMetadata": {"promptTokenCount": data["usageMetadata"]["promptTokenCount"]},
                            **meta,
                        }
                    )
        last = {
            "candidates": [
                {
                    "content": {"parts": [{"text": ""}], "role": "model"},
                    "finishReason": c["finishReason"],
                    "index": c["index"],
                    "safetyRatings": c["safetyRatings"],
                }
                for c in cands
            ],
            "usageMetadata": data["usageMetadata"],
            **meta,
        }
        return [*events, last]

    def _interleaved(
        self, data: dict[str, Any], cands: list[dict[str, Any]], meta: dict[str, str]
    ) -> list[dict[str, Any]]:
        """`*choices*` with candidateCount > 1: one event per word of each candidate, the candidates taking
        turns, then one finishing event per candidate (the last with the usage); index 0 left out."""
        words_of = [" ".join(p.get("text", "") for p in c["content"]["parts"]).split(" ") for c in cands]
        prompt = {"promptTokenCount": data["usageMetadata"]["promptTokenCount"]}
        events: list[dict[str, Any]] = []
        for k in range(max(len(w) for w in words_of)):
            for i, ws in enumerate(words_of):
                if k < len(ws):
                    part = {"text": ws[k] if k == 0 else " " + ws[k]}
                    cand = _indexed({"content": {"parts": [part], "role": "model"}}, i)
                    events.append({"candidates": [cand], "usageMetadata": prompt, **meta})
        for i, c in enumerate(cands):
            end = {"content": {"parts": [{"text": ""}], "role": "model"}, "finishReason": c["finishReason"]}
            last = _indexed(end, i)
            usage = data["usageMetadata"] if i == len(cands) - 1 else prompt
            events.append({"candidates": [last], "usageMetadata": usage, **meta})
        return events


def key_error(request: web.Request, api_key: str) -> web.Response | None:
    """The Gemini API's answer to a request without its key (403) or with a wrong one (400), or None. The key
    comes in `x-goog-api-key` or the `key` query parameter."""
    key = request.headers.get("x-goog-api-key") or request.query.get("key")
    if key is None:
        return error(
            403,
            "Method doesn't allow unregistered callers. Please use API Key or other form of API consumer "
            "identity to call this API.",
        )
    if key != api_key:
        return error(400, "API key not valid. Please pass a valid API key.")
    return None
