"""A fake OpenAI upstream for the serving tests: streams of a chosen length, at a steady pace.

`paced-<n>`: with `stream`, n content chunks (`tick <i> `) 100 ms apart, then usage (one completion token per
chunk) and `[DONE]`; buffered, the whole answer at once. Any other model: `ok` at once. The fake counts the
streams it finished and the ones whose caller left, so a test can tell a completed stream from a cut one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.server import BackgroundServer

PACE_S = 0.1


@dataclass
class Counts:
    finished: int = 0
    left: int = 0


def _frame(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    head = {"id": "chatcmpl-p", "object": "chat.completion.chunk", "created": 1, "model": model}
    return _frame({**head, "choices": [choice]})


class PacedUpstream:
    def __init__(self) -> None:
        self.counts = Counts()
        self._server = BackgroundServer([web.post("/v1/chat/completions", self.chat)], "paced")
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> PacedUpstream:
        self.port = self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        model: str = body["model"]
        n = int(model.split("-", 1)[1]) if model.startswith("paced-") else 1
        usage = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}
        if not body.get("stream"):
            message = {"role": "assistant", "content": "ok" if n == 1 else "tick " * n}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
            answer = {"id": "chatcmpl-p", "object": "chat.completion", "created": 1, "model": model}
            return web.json_response({**answer, "choices": [choice], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            await resp.write(_chunk(model, {"role": "assistant", "content": ""}))
            for i in range(n):
                await resp.write(_chunk(model, {"content": f"tick {i} "}))
                await asyncio.sleep(PACE_S)
            await resp.write(_chunk(model, {}, "stop"))
            usage_frame = {"id": "chatcmpl-p", "object": "chat.completion.chunk", "created": 1, "model": model}
            await resp.write(_frame({**usage_frame, "choices": [], "usage": usage}))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except ConnectionResetError:
            self.counts.left += 1  # the caller (the gateway) went away
            return resp
        self.counts.finished += 1
        return resp
