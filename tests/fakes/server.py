"""A real aiohttp server on 127.0.0.1 in a background thread: the base of the native-provider fakes.

Each fake adds its routes in `routes()` and records every request (path, query, headers, decoded body), so
tests assert on exactly what the gateway put on the wire.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Recorded:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    raw: bytes = b""


class BackgroundServer:
    """An aiohttp app on 127.0.0.1 (a free port), served from a thread with its own event loop."""

    def __init__(self, routes: list[web.RouteDef], name: str) -> None:
        self.routes = routes
        self.name = name
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        ready = threading.Event()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.add_routes(self.routes)
            runner = web.AppRunner(app, handle_signals=False)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            server = site._server
            assert server is not None
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True, name=f"fake-{self.name}")
        self._thread.start()
        ready.wait(10)
        return self.port

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)


@dataclass
class FakeServer:
    name: str = "fake"
    requests: list[Recorded] = field(default_factory=list)
    port: int = 0
    _server: BackgroundServer | None = None
    # when a client hung up on a stream that `tick` was writing (monotonic times)
    hangups: list[float] = field(default_factory=list)

    async def tick(self, resp: web.StreamResponse, piece: bytes) -> web.StreamResponse:
        """A slow stream: `piece` every 50 ms for 30 s, noting in `hangups` when the client went away."""
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                await resp.write(piece)
                await asyncio.sleep(0.05)
        except (ConnectionResetError, asyncio.CancelledError):
            self.hangups.append(time.monotonic())
            raise
        return resp

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def last(self, suffix: str = "") -> Recorded:
        return next(r for r in reversed(self.requests) if r.path.endswith(suffix))

    def routes(self) -> list[web.RouteDef]:
        raise NotImplementedError

    def record(self, request: web.Request, body: Any, raw: bytes = b"") -> None:
        self.requests.append(Recorded(request.path, dict(request.query), dict(request.headers), body, raw))

    def start(self) -> FakeServer:
        self._server = BackgroundServer(self.routes(), self.name)
        self.port = self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()


def words(text: str) -> int:
    return max(len(text.split()), 1)


def sample(schema: Any) -> Any:
    """A value that satisfies a (simple) JSON schema: what a model forced into that schema would produce."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if str(kind).lower() == "object" or "properties" in schema:
        return {k: sample(v) for k, v in (schema.get("properties") or {}).items()}
    if str(kind).lower() == "array":
        return [sample(schema.get("items"))]
    return {"string": "Paris", "integer": 3, "number": 1.5, "boolean": True}.get(str(kind).lower())
