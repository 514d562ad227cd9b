"""A fake OpenAI-compatible upstream whose behaviour a test flips at run time, for routing and resilience.

It is `FakeOpenAI` (same validation, same answers) plus a `mode` the test sets between requests:

- `ok`: answer normally;
- `delay:<s>`: wait, then answer normally (a slow deployment, or a slow first token);
- `status:<code>[:<retry-after>]`: answer that HTTP status with an OpenAI error body;
- `hang`: never answer;
- `drop`: close the connection before sending anything;
- `stall`: (streams) send the first chunk, then nothing;
- `die-after-first`: (streams) send two chunks, then drop the connection.

It also refuses any request that carries a gateway-only routing field, so leaks upstream fail loudly.
"""

from __future__ import annotations

import asyncio
import time

import orjson
from aiohttp import web

from tests.fakes.openai_upstream import FakeOpenAI, _chunk, _error

GATEWAY_ONLY = ("provider", "models", "endpoint_id", "region", "timeout")


async def _wait_unless_gone(request: web.Request, seconds: float) -> bool:
    """Sleep, but stop as soon as the client hangs up (so the server can shut down); False if it did."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if request.transport is None or request.transport.is_closing():
            return False
        await asyncio.sleep(0.02)
    return True


class FlipOpenAI(FakeOpenAI):
    def __init__(self, api_key: str = "sk-fake-upstream", mode: str = "ok") -> None:
        super().__init__(api_key)
        self.mode = mode
        self.times: int | None = None
        self.hits = 0
        self.bodies: list[dict[str, object]] = []

    def flip(self, mode: str, times: int | None = None) -> None:
        """Behave as `mode` from now on, or for the next `times` requests only (then `ok`)."""
        self.mode, self.times = mode, times

    def reset(self) -> None:
        self.flip("ok")
        self.hits = 0
        self.bodies.clear()

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        mode = self.mode
        if self.times is not None:
            self.times -= 1
            if self.times <= 0:
                self.mode, self.times = "ok", None
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _error(400, "We could not parse the JSON body of your request.")
        self.bodies.append(body)
        leaked = [k for k in GATEWAY_ONLY if k in body]
        if leaked:
            return _error(400, f"Unrecognized request argument supplied: {leaked[0]}", param=leaked[0])
        kind, _, arg = mode.partition(":")
        if kind == "delay":
            if not await _wait_unless_gone(request, float(arg)):
                return web.Response()
        elif kind == "status":
            code, _, retry_after = arg.partition(":")
            headers = {"retry-after": retry_after} if retry_after else None
            return _error(int(code), f"fake upstream failure {code}", "server_error", headers=headers)
        elif kind == "hang":
            await _wait_unless_gone(request, 3600)
            return web.Response()
        elif kind == "drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        elif kind in ("stall", "die-after-first") and body.get("stream"):
            return await self._broken_stream(request, str(body["model"]), kind)
        return await super().chat(request)

    async def _broken_stream(self, request: web.Request, model: str, kind: str) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_chunk(model, {"role": "assistant", "content": ""}))
        await resp.write(_chunk(model, {"content": "partial"}))
        if kind == "stall":  # send nothing more, and note when the client gives up on us
            await _wait_unless_gone(request, 3600)
            self.state.disconnects.append(time.monotonic())
            return resp
        assert request.transport is not None
        request.transport.close()
        return resp
