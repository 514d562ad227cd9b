"""A fake Anthropic Messages API: a real HTTP server that rejects what Anthropic rejects.

Wire formats follow Anthropic's API reference and the official SDK's types (`anthropic.types`): the
Message object, the SSE event grammar (message_start, content_block_start/delta/stop, ping, message_delta,
message_stop, error), and error bodies `{"type":"error","error":{...},"request_id":...}`. It refuses a
missing `x-api-key` or `anthropic-version`, a missing `max_tokens`, unknown top-level fields, a `system`
role inside messages, a first message that is not `user`, roles that do not alternate, empty text
blocks, tool results without a matching tool_use, and temperature above 1. Behaviour by model name:

- any: `echo: <last user text>` (+ ` images=N` when images were sent); max_tokens truncates; a stop
  sequence in the answer cuts it (stop_reason stop_sequence)
- `*tool*`: calls the forced tool, or the first tool (`*parallel*`: the first two, unless
  disable_parallel_tool_use); after a tool_result, answers `tool said: <result>`
- `*think*`: a thinking block (with signature) before the text
- `*cache*`: usage with cache reads (100) and writes (20)
- `*refusal*`: stop_reason refusal; `*future*`: an unknown block type and stop reason
- `*error-<status>`: that HTTP status with Anthropic's error type (529 overloaded, 429 with retry-after)
- `*midstream*`: a stream that fails after some text with an `overloaded_error` event
- `*slow*`: streams "tick " every 50 ms for 30 s, recording when the client hangs up
- `*numbered*`: `echo: <text> #<k>`, k counting the numbered answers so far (tells parallel calls apart)
- `output_config.format`: answers with JSON matching the schema

Every message gets an id of its own (`msg_fake0001`, ...), as Anthropic's do.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.server import FakeServer, sample, words

ALLOWED = {
    "model",
    "messages",
    "max_tokens",
    "system",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "metadata",
    "thinking",
    "output_config",
    "service_tier",
    "container",
    "mcp_servers",
    "cache_control",
    "context_management",
    "inference_geo",
    "speed",
}
BLOCK_TYPES = {
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "search_result",
    "server_tool_use",
    "web_search_tool_result",
}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    body = {
        "type": "error",
        "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message},
        "request_id": "req_fake0001",
    }
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json", headers=headers)


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def validate(body: Any, *, count: bool = False) -> str | None:
    """Anthropic's message for the first thing wrong with a request body, or None."""
    if not isinstance(body, dict):
        return "body: Input should be an object"
    allowed = (
        ALLOWED
        - {"max_tokens", "stream", "stop_sequences", "temperature", "top_p", "top_k", "metadata", "service_tier"}
        if count
        else ALLOWED
    )
    for key in body:
        if key not in allowed:
            return f"{key}: Extra inputs are not permitted"
    if not isinstance(body.get("model"), str):
        return "model: Field required"
    if not count and not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    if not count and not 0 <= body.get("temperature", 0) <= 1:
        return "temperature: Input should be less than or equal to 1"
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens", 0)
        if budget < 1024:
            return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        if not count and budget >= body["max_tokens"]:
            return "`max_tokens` must be greater than `thinking.budget_tokens`."
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: Field required"
    previous_tool_ids: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "system":
            return (
                'messages: Unexpected role "system". The Messages API accepts a top-level `system` '
                'parameter, not "system" as an input message role.'
            )
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        if i == 0 and role != "user":
            return 'messages: first message must use the "user" role'
        if i > 0 and messages[i - 1]["role"] == role:
            return (
                f'messages: roles must alternate between "user" and "assistant", but found multiple "{role}" '
                "roles in a row"
            )
        tool_ids = set()
        for j, block in enumerate(_blocks(m.get("content"))):
            kind = block.get("type")
            if kind not in BLOCK_TYPES:
                return f"messages.{i}.content.{j}.type: Input tag '{kind}' is not one of the expected tags"
            if kind == "text" and not block.get("text"):
                return "messages: text content blocks must be non-empty"
            if kind == "tool_use":
                tool_ids.add(block["id"])
                if not isinstance(block.get("input"), dict):
                    return f"messages.{i}.content.{j}.tool_use.input: Input should be a valid dictionary"
            if kind == "tool_result" and block.get("tool_use_id") not in previous_tool_ids:
                return (
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message."
                )
            if (
                kind == "image"
                and block["source"].get("type") == "base64"
                and block["source"].get("media_type") not in ("image/jpeg", "image/png", "image/gif", "image/webp")
            ):
                return f"messages.{i}.content.{j}.image.source.base64.media_type: Input should be 'image/jpeg'"
        previous_tool_ids = tool_ids
    for i, tool in enumerate(body.get("tools") or ()):
        if "type" not in tool and not isinstance(tool.get("input_schema"), dict):
            return f"tools.{i}.custom.input_schema: Field required"
    choice = body.get("tool_choice")
    if choice is not None and choice.get("type") not in ("auto", "any", "tool", "none"):
        return "tool_choice.type: Input tag is not one of the expected tags"
    if choice is not None and not body.get("tools") and choice.get("type") != "none":
        return "tool_choice: tool_choice may only be specified while providing tools."
    return None


def _last_user_text(body: dict[str, Any]) -> tuple[str, int, list[dict[str, Any]]]:
    last = next(m for m in reversed(body["messages"]) if m["role"] == "user")
    blocks = _blocks(last["content"])
    text = " ".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    images = sum(
        1 for m in body["messages"] if m["role"] == "user" for b in _blocks(m["content"]) if b.get("type") == "image"
    )
    return text, images, [b for b in blocks if b.get("type") == "tool_result"]


_numbered = itertools.count(1)


def answer(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str, str | None, dict[str, Any]]:
    """(content blocks, stop_reason, stop_sequence, usage) for a valid request."""
    model: str = body["model"]
    text, images, results = _last_user_text(body)
    if "numbered" in model:
        text += f" #{next(_numbered)}"
    input_tokens = sum(
        words(" ".join(b.get("text", "") for b in _blocks(m["content"]) if b.get("type") == "text"))
        for m in body["messages"]
    )
    blocks: list[dict[str, Any]] = []
    stop_reason, stop_seq = "end_turn", None
    choice = body.get("tool_choice") or {}
    tools = body.get("tools") or []
    fmt = (body.get("output_config") or {}).get("format")
    if "think" in model:
        blocks.append({"type": "thinking", "thinking": "Let me think.", "signature": "sig-abc"})
    if results:
        content = results[0].get("content")
        said = content if isinstance(content, str) else " ".join(b.get("text", "") for b in content or ())
        blocks.append({"type": "text", "text": f"tool said: {said}"})
    elif tools and choice.get("type") != "none" and ("tool" in model or choice.get("type") in ("any", "tool")):
        picked = [t for t in tools if t["name"] == choice.get("name")] if choice.get("type") == "tool" else tools
        n = 2 if "parallel" in model and not choice.get("disable_parallel_tool_use") else 1
        for k, tool in enumerate(picked[:n]):
            blocks.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_0{k + 1}",
                    "name": tool["name"],
                    "input": sample(tool["input_schema"]) if "json" in tool["name"] else {"city": "Paris"},
                }
            )
        stop_reason = "tool_use"
    elif isinstance(fmt, dict):
        blocks.append({"type": "text", "text": orjson.dumps(sample(fmt["schema"])).decode()})
    else:
        reply = "echo: " + text + (f" images={images}" if images else "")
        for seq in body.get("stop_sequences") or ():
            if seq in reply:
                reply, stop_reason, stop_seq = reply[: reply.index(seq)], "stop_sequence", seq
                break
        out = reply.split(" ")
        if body.get("max_tokens", 1 << 30) < len(out):
            out, stop_reason = out[: body["max_tokens"]], "max_tokens"
        blocks.append({"type": "text", "text": " ".join(out)})
    if "refusal" in model:
        stop_reason = "refusal"
    if "future" in model:
        blocks.append({"type": "mystery_block", "payload": 1})
        stop_reason = "brand_new_reason"
    output = sum(words(b.get("text", "") or orjson.dumps(b.get("input", "")).decode()) for b in blocks)
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    if "cache" in model:
        usage.update(cache_creation_input_tokens=20, cache_read_input_tokens=100)
    return blocks, stop_reason, stop_seq, usage


def frame(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **data}) + b"\n\n"


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class FakeAnthropic(FakeServer):
    def __init__(self, api_key: str = "sk-ant-fake") -> None:
        super().__init__(name="anthropic")
        self.api_key = api_key
        self.disconnects: list[float] = []
        self._ids = itertools.count(1)

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/messages", self.messages), web.post("/v1/messages/count_tokens", self.count)]

    def _denied(self, request: web.Request) -> web.Response | None:
        key = request.headers.get("x-api-key")
        if key is None:
            return error(401, "x-api-key header is required")
        if key != self.api_key:
            return error(401, "invalid x-api-key")
        if "anthropic-version" not in request.headers:
            return error(400, "anthropic-version: header is required")
        return None

    async def count(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.record(request, body)
        bad = self._denied(request) or (error(400, msg) if (msg := validate(body, count=True)) else None)
        if bad:
            return bad
        total = sum(words(orjson.dumps(m["content"]).decode()) for m in body["messages"])
        return web.json_response({"input_tokens": total + 7})

    async def messages(self, request: web.Request) -> web.StreamResponse:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return error(400, "There was an issue with your request body: invalid JSON")
        self.record(request, body)
        bad = self._denied(request) or (error(400, msg) if (msg := validate(body)) else None)
        if bad:
            return bad
        model: str = body["model"]
        if "error-" in model:
            status = int(model.rsplit("-", 1)[1])
            headers = {"retry-after": "7"} if status == 429 else None
            return error(status, "Overloaded" if status == 529 else f"fake failure {status}", headers)
        blocks, stop_reason, stop_seq, usage = answer(body)
        message_id = f"msg_fake{next(self._ids):04d}"
        if not body.get("stream"):
            message = {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": blocks,
                "stop_reason": stop_reason,
                "stop_sequence": stop_seq,
                "usage": usage,
            }
            return web.json_response(message, dumps=lambda o: orjson.dumps(o).decode())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        start = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        }
        await resp.write(frame("message_start", {"message": start}))
        await resp.write(frame("ping", {}))
        if "slow" in model:
            return await self._slow(request, resp)
        for i, block in enumerate(blocks):
            await self._block(resp, i, block)
            if "midstream" in model:
                await resp.write(frame("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}}))
                return resp
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_seq}
        await resp.write(frame("message_delta", {"delta": delta, "usage": {"output_tokens": usage["output_tokens"]}}))
        await resp.write(frame("message_stop", {}))
        return resp

    async def _slow(self, request: web.Request, resp: web.StreamResponse) -> web.StreamResponse:
        """A text block that grows every 50 ms for 30 s; notes when the gateway hangs up."""
        await resp.write(frame("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}))
        try:
            for _ in range(600):
                await resp.write(
                    frame("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "tick "}})
                )
                await asyncio.sleep(0.05)
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnects.append(time.monotonic())
            raise
        return resp

    async def _block(self, resp: web.StreamResponse, i: int, block: dict[str, Any]) -> None:
        kind = block["type"]
        if kind == "text":
            await resp.write(frame("content_block_start", {"index": i, "content_block": {"type": "text", "text": ""}}))
            for piece in _pieces(block["text"]):
                await resp.write(
                    frame("content_block_delta", {"index": i, "delta": {"type": "text_delta", "text": piece}})
                )
                await asyncio.sleep(0)
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            await resp.write(frame("content_block_start", {"index": i, "content_block": start}))
            await resp.write(
                frame(
                    "content_block_delta",
                    {"index": i, "delta": {"type": "thinking_delta", "thinking": block["thinking"]}},
                )
            )
            await resp.write(
                frame(
                    "content_block_delta",
                    {"index": i, "delta": {"type": "signature_delta", "signature": block["signature"]}},
                )
            )
        elif kind == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            await resp.write(frame("content_block_start", {"index": i, "content_block": start}))
            for piece in ["", *_pieces(orjson.dumps(block["input"]).decode(), 5)]:
                await resp.write(
                    frame(
                        "content_block_delta",
                        {"index": i, "delta": {"type": "input_json_delta", "partial_json": piece}},
                    )
                )
        else:
            await resp.write(frame("content_block_start", {"index": i, "content_block": block}))
        await resp.write(frame("content_block_stop", {"index": i}))
