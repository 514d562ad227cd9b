"""An SSE response that notices when the caller leaves, even while the upstream is silent.

Starlette's StreamingResponse only listens for `http.disconnect` on old ASGI spec versions; on current
servers a caller who hangs up is noticed only at the next write, which may be minutes away behind a stalled
upstream. This response races the body against a disconnect listener (Starlette's original design), so the
upstream request is cancelled within moments of the caller leaving.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

from starlette.types import Receive, Scope, Send


class SSEResponse:
    def __init__(self, body: AsyncIterator[bytes], headers: Mapping[str, str], status_code: int = 200) -> None:
        self.body = body
        self.status_code = status_code
        raw = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", **headers}
        raw.setdefault("x-accel-buffering", "no")
        self.raw_headers = [(k.lower().encode(), v.encode()) for k, v in raw.items()]
        self._left = False

    @property
    def left(self) -> bool:
        """Whether the caller went away before the stream ended (the edge reports the request as 499)."""
        return self._left

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The body runs in this task; a watcher task cancels it when the caller leaves. (An anyio task group
        # did the same with two tasks and cancel scopes, at about 7% of a stream's CPU.)
        task = asyncio.current_task()
        assert task is not None
        watcher = asyncio.create_task(self._watch(receive, task))
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for chunk in self.body:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not self._left:
                raise  # cancelled from outside (server shutdown): not ours to swallow
            task.uncancel()
        except OSError:
            self._left = True  # the caller went away between our checks; nothing left to send to
        finally:
            watcher.cancel()  # from here on the watcher can no longer cancel this task
            aclose = getattr(self.body, "aclose", None)
            if aclose is not None:
                await asyncio.shield(aclose())

    async def _watch(self, receive: Receive, task: asyncio.Task[object]) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self._left = True
                task.cancel()
                return
