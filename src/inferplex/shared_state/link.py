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
import logging
from collections.abc import Callable
from typing import Any, cast

from inferplex.batching import Batcher, StoreObserver
from inferplex.shared_state.wire import CALL, OPENED, REPLY, Frames, frame

log = logging.getLogger("inferplex.shared_state")

Op = list[Any]

# How long a round trip may take before the coordinator counts as unavailable. It is a local process that
# answers in well under a millisecond; on a machine so loaded that it does not answer within a second, it is
# stuck (stopped, or starved), and the store's policy applies. Not `storage.redis_timeout_s` (0.25 s by
# default, for a network hop): a busy 2-core machine can stall a process longer than that, and each stall
# would then let a batch through unlimited.
TIMEOUT_S = 1.0


class _Connection(asyncio.Protocol):
    """One connection to the coordinator: replies resolve the call in flight, openings go to the link."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.frames = Frames()
        self.transport: asyncio.WriteTransport | None = None
        self.reply: asyncio.Future[list[Any]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.WriteTransport, transport)  # uvloop's is one, without subclassing it

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.frames.feed(data)
        except ConnectionError:
            if self.transport is not None:
                self.transport.abort()
            return
        for kind, payload in frames:
            if kind == REPLY:
                reply, self.reply = self.reply, None
                if reply is not None and not reply.done():
                    reply.set_result(payload)
            elif kind == OPENED and self.link.opened is not None:
                self.link.opened(payload)

    def connection_lost(self, exc: Exception | None) -> None:
        reply, self.reply = self.reply, None
        if reply is not None and not reply.done():
            reply.set_exception(ConnectionError("the coordinator closed the connection"))
        self.link.closed(self)


class Link:
    def __init__(
        self,
        path: str,
        *,
        timeout_s: float = TIMEOUT_S,
        hello: Callable[[], list[Op]] | None = None,
        opened: Callable[[str], None] | None = None,
        lost: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self.opened = opened
        self._hello = hello
        self._lost = lost
        self._connection: _Connection | None = None
        self._failing = False
        self._batch: Batcher[Op, Any] = Batcher(self._run)

    @property
    def connected(self) -> bool:
        return self._connection is not None

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
                connection = self._connection or await self._connect()
                return await _round_trip(connection, ops)
        except BaseException as exc:
            self._drop()
            if not self._failing and isinstance(exc, Exception):
                self._failing = True
                log.warning("shared state coordinator unavailable at %s (%s: %s)", self.path, type(exc).__name__, exc)
            raise

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_unix_connection(lambda: _Connection(self), self.path)
        self._connection = connection
        hello = self._hello() if self._hello is not None else []
        if hello:
            await _round_trip(connection, hello)
        if self._failing:
            log.info("shared state coordinator at %s answers again", self.path)
            self._failing = False
        return connection

    def closed(self, connection: _Connection) -> None:
        """The coordinator closed `connection` (it died, or was restarted): the next call opens another."""
        if self._connection is connection:
            self._connection = None
            if self._lost is not None:
                self._lost()

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            if connection.transport is not None:
                connection.transport.abort()
            if self._lost is not None:
                self._lost()

    async def aclose(self) -> None:
        await self._batch.aclose()
        connection, self._connection = self._connection, None
        if connection is not None and connection.transport is not None:
            connection.transport.close()


async def _round_trip(connection: _Connection, ops: list[Op]) -> list[Any]:
    assert connection.transport is not None
    reply: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
    connection.reply = reply
    connection.transport.write(frame(CALL, ops))
    results = await reply
    if len(results) != len(ops):
        raise ConnectionError(f"{len(ops)} calls got {len(results)} results")
    return results
