"""The JSON request log (issue 24): one line per request, when its last byte has gone out.

A line says who asked (key and account ids, client address: never a key or an Authorization header), what
for (route template, method, dialect, operation, model), who answered (provider, deployment, every attempt),
how it went (status, the closed fault-prefixed error type, the error's code and message), how long each
part took, the tokens and the cost. Bodies only with `request_log.bodies` (the request as parsed, and the
response: the buffered answer, or a stream's chunks when the usage log kept them).

The request path pays for building the dict and one `orjson.dumps`; nothing on it writes. Lines wait in a
list for at most `flush_s` (or 64 KiB), then go as one chunk to a writer thread, which does the blocking
write, so a slow disk or a full stdout pipe never stalls the event loop. A file destination is appended to
and reopened when logrotate moves it away.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

import orjson

from inferplex.config import Config
from inferplex.observe.faults import of_request
from inferplex.observe.hub import Env, Sink
from inferplex.observe.settings import RequestLogConfig
from inferplex.translate.openai_shapes import completion_from_chunks

if TYPE_CHECKING:
    from inferplex.context import Context

log = logging.getLogger("inferplex.observe")

FLUSH_BYTES = 64 * 1024
MAX_QUEUED_BYTES = 64 * 1024 * 1024  # past this (a writer that cannot keep up), lines are dropped and counted
_MESSAGE_CHARS = 500


def sink(config: Config) -> Sink | None:
    settings = config.observability.request_log
    return AccessLog(settings) if settings.enabled else None


def _ms(value: float) -> float:
    return round(value, 2)


def line(ctx: Context, method: str, status: int, streaming: bool, bodies: bool) -> dict[str, Any]:
    """The request's log record (a plain dict: orjson writes it in one call)."""
    timings, target, usage, principal = ctx.timings, ctx.target, ctx.usage, ctx.principal
    now = time.perf_counter()
    err = ctx.failure or ctx.error
    total_ms = (now - timings.start) * 1000
    upstream_ms = ((timings.upstream_end or now) - timings.upstream_start) * 1000 if timings.upstream_start else None
    details = usage.get("prompt_tokens_details") if usage else None
    record: dict[str, Any] = {
        "time": _stamp(time.time() - total_ms / 1000),
        "request_id": ctx.request_id,
        "method": method,
        "route": ctx.route_template,
        "dialect": ctx.dialect,
        "operation": ctx.operation,
        "status": status,
        "error_type": of_request(ctx, status),
        "error": None if err is None else {"code": err.code, "message": err.message[:_MESSAGE_CHARS]},
        "key_id": principal.key_id,
        "account_id": principal.account_id,
        "model": ctx.model.name if ctx.model is not None else None,
        "provider": target.provider.name if target is not None else None,
        "deployment": target.key if target is not None else None,
        "upstream_model": target.upstream_model if target is not None else None,
        "attempts": [a.view() for a in ctx.attempt_log],
        "stream": streaming,
        "timings": {
            "total_ms": _ms(total_ms),
            "upstream_ms": None if upstream_ms is None else _ms(upstream_ms),
            "ttft_ms": _ms(timings.ttft_ms) if timings.first_token else None,
            "queued_ms": _ms(timings.queued_ms),
        },
        "tokens": {
            "input": usage.get("prompt_tokens") if usage else None,
            "output": usage.get("completion_tokens") if usage else None,
            "cached": details.get("cached_tokens") if isinstance(details, dict) else None,
        },
        "cost_micros": ctx.cost_micros,
        "cache": ctx.cache.status if ctx.cache is not None else None,  # the response cache's outcome
        "client_ip": ctx.client_ip,
    }
    if bodies:
        record["request_body"] = _request_body(ctx)
        record["response_body"] = _response_body(ctx)
    return record


def _request_body(ctx: Context) -> Any:
    """The body as the gateway parsed it (what the usage log keeps with `log_query_body`); the caller's
    headers, and so their key, are never part of it."""
    body = getattr(ctx.request, "body", None)
    dump = getattr(body, "model_dump", None)
    return dump(mode="json", exclude_none=True) if dump is not None else None


def _response_body(ctx: Context) -> Any:
    if ctx.response is not None:
        return ctx.response
    if ctx.streamed:
        return completion_from_chunks(ctx.streamed)
    return None


_second: list[Any] = [None, ""]  # the last second formatted, and its text: strftime is a third of a line's cost


def _stamp(epoch: float) -> str:
    """RFC 3339, UTC, milliseconds."""
    second, ms = divmod(int(epoch * 1000), 1000)
    if second != _second[0]:
        _second[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))]
    return f"{_second[1]}.{ms:03d}Z"


class AccessLog(Sink):
    def __init__(self, config: RequestLogConfig) -> None:
        self.bodies = config.bodies
        self.writer = LineWriter(config.destination, config.flush_s)

    async def start(self, env: Env) -> None:
        self.writer.start()

    async def aclose(self) -> None:
        await self.writer.aclose()

    def finished(self, ctx: Context, method: str, status: int, streaming: bool) -> None:
        data = orjson.dumps(line(ctx, method, status, streaming, self.bodies), option=orjson.OPT_APPEND_NEWLINE)
        self.writer.add(data)


class LineWriter:
    """Lines gathered on the event loop, written by a thread of their own."""

    def __init__(self, destination: str, flush_s: float) -> None:
        self.destination = destination
        self.flush_s = flush_s
        self._lines: list[bytes] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._queued = 0  # bytes handed to the thread and not yet written (approximate: two threads count it)
        self._dropped = 0
        self._thread: threading.Thread | None = None
        self._fd: int | None = None
        self._inode: tuple[int, int] | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="request-log-writer", daemon=True)
        self._thread.start()

    def add(self, data: bytes) -> None:
        self._lines.append(data)
        self._size += len(data)
        if self._size >= FLUSH_BYTES:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.flush_s, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._lines:
            return
        chunk = b"".join(self._lines)
        count = len(self._lines)
        self._lines.clear()
        self._size = 0
        if self._queued + len(chunk) > MAX_QUEUED_BYTES:
            if not self._dropped:
                log.warning("the request log cannot keep up with %s: dropping lines", self.destination)
            self._dropped += count
            return
        self._queued += len(chunk)
        self._queue.put(chunk)

    async def aclose(self) -> None:
        self.flush()
        self._queue.put(None)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)
        if self._dropped:
            log.warning("the request log dropped %d lines its writer could not keep up with", self._dropped)

    # ---- the writer thread ----------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while (chunk := self._queue.get()) is not None:
                try:
                    self._write(chunk)
                except OSError as exc:
                    log.warning("writing the request log to %s failed: %s", self.destination, exc)
                    self._close_file()
                finally:
                    self._queued -= len(chunk)
        finally:
            self._close_file()

    def _write(self, chunk: bytes) -> None:
        fd = self._target()
        view = memoryview(chunk)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def _target(self) -> int:
        if self.destination == "stdout":
            return 1
        if self.destination == "stderr":
            return 2
        if self._fd is not None:
            try:
                st = os.stat(self.destination)
                moved = (st.st_dev, st.st_ino) != self._inode
            except FileNotFoundError:
                moved = True
            if not moved:
                return self._fd
            self._close_file()  # rotated away: the next line starts the new file
        self._fd = os.open(self.destination, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        st = os.fstat(self._fd)
        self._inode = (st.st_dev, st.st_ino)
        return self._fd

    def _close_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
