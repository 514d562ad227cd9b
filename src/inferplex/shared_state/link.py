"""A worker's connection to the coordinator: concurrent calls share one round trip, and a lost connection is
opened again by the next call.

Calls go through a `Batcher` (batching.py): the first call after an idle spell is sent at once, and calls made
while it is in flight go together as the next frame, so under load one round trip serves many requests and
at a low rate nothing waits for a timer. Each round trip, the connect included, is bounded by `timeout_s`:
a coordinator that is down (refused at once) or stuck (timed out) fails the batch, and the store above
applies its policy (fail open or closed). A timed-out connection is closed, since a late reply would answer
the wrong call; the coordinator then frees what the connection held, and `hello` (the calls a store makes
first on every new connection) declares it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from inferplex.batching import Batcher, StoreObserver
from inferplex.listening import stop
from inferplex.shared_state.wire import CALL, OPENED, REPLY, frame, read_frame

log = logging.getLogger("inferplex.shared_state")

Op = list[Any]


class Link:
    def __init__(
        self,
        path: str,
        *,
        timeout_s: float = 0.25,
        hello: Callable[[], list[Op]] | None = None,
        opened: Callable[[str], None] | None = None,
        lost: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self._hello = hello
        self._opened = opened
        self._lost = lost
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._reply: asyncio.Future[list[Any]] | None = None
        self._failing = False
        self._batch: Batcher[Op, Any] = Batcher(self._run)

    @property
    def connected(self) -> bool:
        return self._writer is not None

    def call(self, op: Op) -> asyncio.Future[Any]:
        """`op`'s result, from the next round trip (or the exception that failed it)."""
        return self._batch.enqueue(op)

    def post(self, op: Op, then: Callable[[Any, BaseException | None], None]) -> None:
        """Send `op` with the next round trip and tell `then` how it went; nobody waits for it."""
        self._batch.post(op, then)

    def watch(self, store: str, observe: StoreObserver | None) -> None:
        self._batch.watch(store, observe)

    async def _run(self, ops: list[Op]) -> list[Any]:
        try:
            async with asyncio.timeout(self.timeout_s):
                writer = self._writer or await self._connect()
                return await self._round_trip(writer, ops)
        except BaseException as exc:
            self._drop()
            if not self._failing and isinstance(exc, Exception):
                self._failing = True
                log.warning("shared state coordinator unavailable at %s (%s: %s)", self.path, type(exc).__name__, exc)
            raise

    async def _round_trip(self, writer: asyncio.StreamWriter, ops: list[Op]) -> list[Any]:
        reply: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._reply = reply
        writer.write(frame(CALL, ops))
        results = await reply
        if len(results) != len(ops):
            raise ConnectionError(f"{len(ops)} calls got {len(results)} results")
        return results

    async def _connect(self) -> asyncio.StreamWriter:
        reader, writer = await asyncio.open_unix_connection(self.path)
        self._writer = writer
        self._reader_task = asyncio.get_running_loop().create_task(self._read(reader), name="shared-state-link")
        hello = self._hello() if self._hello is not None else []
        if hello:
            await self._round_trip(writer, hello)
        if self._failing:
            log.info("shared state coordinator at %s answers again", self.path)
            self._failing = False
        return writer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                kind, payload = await read_frame(reader)
                if kind == REPLY:
                    reply, self._reply = self._reply, None
                    if reply is not None and not reply.done():
                        reply.set_result(payload)
                elif kind == OPENED and self._opened is not None:
                    self._opened(payload)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the coordinator went away (or sent nonsense): the next call reconnects
            reply, self._reply = self._reply, None
            if reply is not None and not reply.done():
                reply.set_exception(ConnectionError(f"coordinator connection lost: {type(exc).__name__}"))
            self._reader_task = None  # this task ends here; `_drop` must not cancel it
            self._drop()

    def _drop(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            if self._lost is not None:
                self._lost()
        task, self._reader_task = self._reader_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def aclose(self) -> None:
        await self._batch.aclose()
        task, self._reader_task = self._reader_task, None
        if task is not None:
            await stop(task)
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
