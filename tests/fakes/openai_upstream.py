"""A fake OpenAI-compatible provider: a real HTTP server on 127.0.0.1 that validates what it receives.

It checks what OpenAI checks (auth header, JSON content type, model, messages and their roles, stream_options
only with stream) and answers with OpenAI's exact shapes, SSE framing and error bodies. Every request is
recorded so tests can assert on what the gateway actually sent. Behaviour is chosen by the model name, as
TensorZero's dummy provider does:

- any name: echo the last user message (`echo: <text>`); `max_tokens` truncates with finish_reason length
- `tool-*`: call the first tool in the request with `{"city": "Paris"}` arguments
- `agent-*`: as `tool-*` until the conversation ends with the tool's answer, then `tool said: <its content>`
  (an agent's loop); a tool message must answer a call of the assistant message before it, else a 400 as
  OpenAI's
- `error-<status>`: answer that HTTP status with an OpenAI error body (`retry-after: 7` on 429)
- `die-midstream`: stream two content chunks, then drop the connection
- `die-after-role`: stream the role chunk only, then drop the connection (nothing delivered)
- `garbled-midstream`: stream two content chunks, then one whose `choices` is not a list, then finish
- `slow-stream`: stream one chunk every 50 ms for 30 s, noting when the client went away
- `hang`: accept the request and never answer
- `echo-tiny-*`: echo the last user message verbatim (no prefix), streamed 1-3 characters per chunk
- `json-fix-*`: answer `not json` until the conversation holds an assistant turn, then `{"ok": true}`
- `sleep-<ms>`: wait that long, then echo; requests in flight are counted (`in_flight`, `max_in_flight`)
- `choices-*`: n choices, each its own text (`echo: <text> (choice i)`), streamed as OpenAI does: the
  choices' chunks interleaved under one id, each choice finishing once
- `cut-*`: echo, stopped at the provider's own output limit of 3 words (`finish_reason: length` whatever the
  request's `max_tokens`; a smaller `max_tokens` cuts sooner)
- `late-eof-*`: echo, streamed, the body's end (the chunked encoding's last chunk) 20 ms after `data: [DONE]`
  (`late-eof-<ms>`: that many ms), as a network may deliver it: a client that closes the response at
  `[DONE]` closes its connection

Each request is recorded with the client's address and port (`Recorded.peer`): requests from one peer came
over one connection, so tests can count the connections a gateway opened.
"""

from __future__ import annotations

import asyncio
import base64
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.server import BackgroundServer

VALID_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    peer: tuple[str, int] | None = None  # the client's (address, port): one per connection


@dataclass
class FakeState:
    api_key: str
    requests: list[Recorded] = field(default_factory=list)
    disconnects: list[float] = field(default_factory=list)
    stream_started: list[float] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    def last(self, path_suffix: str = "/chat/completions") -> Recorded:
        return next(r for r in reversed(self.requests) if r.path.endswith(path_suffix))

    def peers(self, since: int = 0) -> set[tuple[str, int] | None]:
        """The connections the requests from index `since` on came over (each a client address and port)."""
        return {r.peer for r in self.requests[since:]}


def _error(
    status: int,
    message: str,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json", headers=headers)


def _words(text: str) -> int:
    return max(len(text.split()), 1)


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _validate_chat(body: Any) -> web.Response | None:
    if not isinstance(body, dict):
        return _error(400, "body must be an object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        return _error(400, "you must provide a model parameter", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return _error(400, "'messages' must be a non-empty array", param="messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in VALID_ROLES:
            return _error(400, f"Invalid value for 'messages[{i}].role'", param=f"messages[{i}].role")
    if "stream_options" in body and not body.get("stream"):
        return _error(400, "stream_options is only allowed when stream is true", param="stream_options")
    if "provider" in body:
        return _error(400, "Unrecognized request argument supplied: provider", param="provider")
    if body["model"].startswith("agent-"):
        return _unanswered_tool_message(messages)
    return None


def _unanswered_tool_message(messages: list[dict[str, Any]]) -> web.Response | None:
    """OpenAI's 400 for a tool message that answers no call of the assistant message before it."""
    called: set[str] = set()
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            called = {c["id"] for c in m.get("tool_calls") or ()}
        elif m["role"] == "tool" and m.get("tool_call_id") not in called:
            message = "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
            return _error(400, message + "'tool_calls'.", param=f"messages.[{i}].role")
    return None


def _calls_tool(body: dict[str, Any]) -> bool:
    """`tool-*` always calls the first tool; `agent-*` until the conversation ends with the tool's answer."""
    if not body.get("tools"):
        return False
    model: str = body["model"]
    return model.startswith("tool-") or (model.startswith("agent-") and body["messages"][-1]["role"] != "tool")


def _reply(body: dict[str, Any]) -> tuple[str, str, int, int]:
    """(content, finish_reason, prompt_tokens, completion_tokens) for the echo behaviour."""
    last_user = next((m for m in reversed(body["messages"]) if m["role"] == "user"), body["messages"][-1])
    words = ["echo:", *_text_of(last_user).split()]
    limit = body.get("max_tokens") or body.get("max_completion_tokens")
    if body["model"].startswith("cut-"):  # the provider's own limit
        limit = min(limit, 3) if isinstance(limit, int) else 3
    finish = "stop"
    if isinstance(limit, int) and limit < len(words):
        words, finish = words[:limit], "length"
    prompt_tokens = sum(_words(_text_of(m)) for m in body["messages"])
    return " ".join(words), finish, prompt_tokens, len(words)


def _verbatim(body: dict[str, Any]) -> str | None:
    """The answer of the verbatim behaviours (`echo-tiny-*`, `json-fix-*`), or None for the others."""
    model = body["model"]
    if model.startswith("echo-tiny"):
        last_user = next((m for m in reversed(body["messages"]) if m["role"] == "user"), body["messages"][-1])
        return _text_of(last_user)
    if model.startswith("json-fix"):
        return '{"ok": true}' if any(m["role"] == "assistant" for m in body["messages"]) else "not json"
    if model.startswith("agent-") and body["messages"][-1]["role"] == "tool":
        return "tool said: " + _text_of(body["messages"][-1])
    return None


def _tiny_pieces(text: str) -> list[str]:
    pieces, at, size = [], 0, 1
    while at < len(text):
        pieces.append(text[at : at + size])
        at += size
        size = size % 3 + 1
    return pieces


def _completion(body: dict[str, Any]) -> dict[str, Any]:
    model = body["model"]
    created = int(time.time())
    usage_extra = {"prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0}}
    if _calls_tool(body):
        name = body["tools"][0]["function"]["name"]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [
                {"id": "call_abc123", "type": "function", "function": {"name": name, "arguments": '{"city": "Paris"}'}}
            ],
        }
        finish, pt, ct = "tool_calls", 20, 9
    else:
        content, finish, pt, ct = _reply(body)
        verbatim = _verbatim(body)
        if verbatim is not None:
            content, finish, ct = verbatim, "stop", _words(verbatim)
        message = {"role": "assistant", "content": content, "refusal": None, "annotations": []}
    n = body.get("n") or 1
    messages = [message] * n
    if model.startswith("choices-"):
        messages = [{**message, "content": text} for text in _choice_texts(body)]
    return {
        "id": "chatcmpl-fake123",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": i, "message": m, "logprobs": None, "finish_reason": finish} for i, m in enumerate(messages)
        ],
        "usage": {"prompt_tokens": pt, "completion_tokens": ct * n, "total_tokens": pt + ct * n, **usage_extra},
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }


def _choice_texts(body: dict[str, Any]) -> list[str]:
    """`choices-*`: the text of each of the n choices, each its own."""
    content = _reply(body)[0]
    return [f"{content} (choice {i})" for i in range(body.get("n") or 1)]


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None, usage: bool = False, index: int = 0) -> bytes:
    data: dict[str, Any] = {
        "id": "chatcmpl-fake123",
        "object": "chat.completion.chunk",
        "created": 1735689600,
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if usage:
        data["usage"] = None
    return b"data: " + orjson.dumps(data) + b"\n\n"


def _peer(request: web.Request) -> tuple[str, int] | None:
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    return (peer[0], peer[1]) if peer else None


class FakeOpenAI:
    def __init__(self, api_key: str = "sk-fake-upstream") -> None:
        self.state = FakeState(api_key)
        self.port = 0
        self._server: BackgroundServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _check_auth(self, request: web.Request) -> web.Response | None:
        if request.headers.get("Authorization") != f"Bearer {self.state.api_key}":
            return _error(401, "Incorrect API key provided", "invalid_request_error", code="invalid_api_key")
        if request.content_type != "application/json":
            return _error(400, "Content-Type must be application/json")
        return None

    async def chat(self, request: web.Request) -> web.StreamResponse:
        denied = self._check_auth(request)
        if denied:
            return denied
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _error(400, "We could not parse the JSON body of your request.")
        self.state.requests.append(Recorded(request.path, dict(request.headers), body, _peer(request)))
        bad = _validate_chat(body)
        if bad:
            return bad
        model: str = body["model"]
        if model.startswith("error-"):
            status = int(model.split("-", 1)[1])
            headers = {"retry-after": "7"} if status == 429 else None
            return _error(status, f"fake upstream failure {status}", "server_error", headers=headers)
        if model == "hang":
            await asyncio.sleep(3600)
        if model.startswith("sleep-"):
            self.state.in_flight += 1
            self.state.max_in_flight = max(self.state.max_in_flight, self.state.in_flight)
            try:
                await asyncio.sleep(int(model.split("-", 1)[1]) / 1000)
            finally:
                self.state.in_flight -= 1
        if not body.get("stream"):
            return web.Response(body=orjson.dumps(_completion(body)), content_type="application/json")
        return await self._stream(request, body)

    async def _stream(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        model = body["model"]
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        self.state.stream_started.append(time.monotonic())
        try:
            await resp.write(_chunk(model, {"role": "assistant", "content": "", "refusal": None}, usage=include_usage))
            if model == "slow-stream":
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    await resp.write(_chunk(model, {"content": "tick "}, usage=include_usage))
                    await asyncio.sleep(0.05)
            elif model.startswith("choices-"):
                await self._choices(resp, body, include_usage)
                return resp
            elif model == "die-after-role":
                assert request.transport is not None
                request.transport.close()
                return resp
            elif model == "garbled-midstream":
                await resp.write(_chunk(model, {"content": "partial "}, usage=include_usage))
                await resp.write(_chunk(model, {"content": "answer "}, usage=include_usage))
                await resp.write(b'data: {"id": "chatcmpl-fake123", "choices": "garbled"}\n\n')
                await self._finish(resp, model, include_usage, 5, 2)
                return resp
            elif model == "die-midstream":
                await resp.write(_chunk(model, {"content": "partial "}, usage=include_usage))
                await resp.write(_chunk(model, {"content": "answer "}, usage=include_usage))
                assert request.transport is not None
                request.transport.close()
                return resp
            elif _calls_tool(body):
                name = body["tools"][0]["function"]["name"]
                call = {
                    "index": 0,
                    "id": "call_abc123",
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }
                await resp.write(_chunk(model, {"tool_calls": [call]}, usage=include_usage))
                for piece in ('{"city"', ': "Par', 'is"}'):
                    delta = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
                    await resp.write(_chunk(model, delta, usage=include_usage))
                await resp.write(_chunk(model, {}, "tool_calls", usage=include_usage))
                await self._finish(resp, model, include_usage, 20, 9)
                return resp
            content, finish, pt, ct = _reply(body)
            verbatim = _verbatim(body)
            if verbatim is not None:
                finish, ct = "stop", _words(verbatim)
                for piece in _tiny_pieces(verbatim):
                    await resp.write(_chunk(model, {"content": piece}, usage=include_usage))
            else:
                for i, word in enumerate(content.split(" ")):
                    await resp.write(_chunk(model, {"content": word if i == 0 else " " + word}, usage=include_usage))
            await resp.write(_chunk(model, {}, finish, usage=include_usage))
            await self._finish(resp, model, include_usage, pt, ct)
        except (ConnectionResetError, asyncio.CancelledError):
            self.state.disconnects.append(time.monotonic())
            raise
        return resp

    async def _choices(self, resp: web.StreamResponse, body: dict[str, Any], include_usage: bool) -> None:
        """n choices streamed word by word, taking turns (the role chunk above was choice 0's)."""
        model = body["model"]
        texts = [t.split(" ") for t in _choice_texts(body)]
        for i in range(1, len(texts)):
            await resp.write(_chunk(model, {"role": "assistant", "content": ""}, usage=include_usage, index=i))
        for k in range(max(len(t) for t in texts)):
            for i, ws in enumerate(texts):
                if k < len(ws):
                    piece = ws[k] if k == 0 else " " + ws[k]
                    await resp.write(_chunk(model, {"content": piece}, usage=include_usage, index=i))
        for i in range(len(texts)):
            await resp.write(_chunk(model, {}, "stop", usage=include_usage, index=i))
        prompt = sum(_words(_text_of(m)) for m in body["messages"])
        await self._finish(resp, model, include_usage, prompt, sum(len(t) for t in texts))

    async def _finish(self, resp: web.StreamResponse, model: str, include_usage: bool, pt: int, ct: int) -> None:
        if include_usage:
            usage = {
                "prompt_tokens": pt,
                "completion_tokens": ct,
                "total_tokens": pt + ct,
                "prompt_tokens_details": {"cached_tokens": 0},
            }
            data = {
                "id": "chatcmpl-fake123",
                "object": "chat.completion.chunk",
                "created": 1735689600,
                "model": model,
                "choices": [],
                "usage": usage,
            }
            await resp.write(b"data: " + orjson.dumps(data) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        if model.startswith("late-eof"):
            pause = model.removeprefix("late-eof-")
            await asyncio.sleep(int(pause) / 1000 if pause.isdigit() else 0.02)
        await resp.write_eof()

    async def embeddings(self, request: web.Request) -> web.Response:
        denied = self._check_auth(request)
        if denied:
            return denied
        body = orjson.loads(await request.read())
        self.state.requests.append(Recorded(request.path, dict(request.headers), body, _peer(request)))
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs:
            return _error(400, "'input' must be a non-empty string or array", param="input")
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64"):
            return _error(400, "encoding_format must be float or base64", param="encoding_format")
        data = []
        for i, text in enumerate(inputs):
            vector = [float(len(str(text))), float(i), 0.5]
            emb: Any = base64.b64encode(struct.pack("<3f", *vector)).decode() if fmt == "base64" else vector
            data.append({"object": "embedding", "index": i, "embedding": emb})
        tokens = sum(_words(str(t)) for t in inputs)
        out = {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return web.Response(body=orjson.dumps(out), content_type="application/json")

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """`POST /v1/responses`: OpenAI's Responses API (tests/fakes/openai_responses_upstream.py)."""
        from tests.fakes.openai_responses_upstream import serve

        return await serve(self, request)

    def start(self) -> FakeOpenAI:
        routes = [web.post("/v1/chat/completions", self.chat), web.post("/v1/embeddings", self.embeddings)]
        routes.append(web.post("/v1/responses", self.responses))
        self._server = BackgroundServer(routes, "openai")
        self.port = self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
