"""A Lua script that a batcher (batching.py) runs on a Redis connection of its own.

A batcher has at most one call in flight, so its script needs no connection pool. redis-py's general path
(take a connection from the pool, wrap the call in its retry policy, dispatch events, give the connection
back) cost about a third of the client CPU of each call (docs/benchmarks.md), and it is paid by every keyed
request, for its limits and for its deployment's breaker.

The script is loaded on first use, and again after a Redis restart forgets it. A call that fails or is
cancelled halfway drops the connection (redis-py's connection does so itself), so no later call can read a
reply that was meant for it. A connection that Redis closed while it sat idle (a restart, a proxy's idle
timeout) is found out only by the next call: that call connects again and runs once more, as redis-py's
own retry would. A call that fails on a fresh connection fails at once, so an outage costs one connect
timeout, not several.

The call is encoded here (`pack`): a batch carries a few keys and an argument for every request in it, and
redis-py's general encoder cost about 3 µs of CPU per request's share where this costs under 1.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError


def pack(args: Sequence[str | bytes | int | float]) -> bytes:
    """One command in RESP, as redis-py's encoder writes it (numbers as their repr, text as UTF-8)."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        raw = arg if isinstance(arg, bytes) else arg.encode() if isinstance(arg, str) else repr(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


class DedicatedScript:
    def __init__(self, client: aioredis.Redis, source: str) -> None:
        self._pool = client.connection_pool
        self._source = source
        self._sha = hashlib.sha1(source.encode()).hexdigest()
        self._conn: AbstractConnection | None = None
        self._read_timeout: float | None = self._pool.connection_kwargs.get("socket_timeout")

    async def _connected(self) -> AbstractConnection:
        """The connection, (re)connected if need be, with no timeout on writes: redis-py bounds a write with
        `asyncio.wait_for`, a task per call, which cost more than the rest of the call. A write only hands a
        few KiB to the kernel and does not block; every read (the handshake's here, each reply's in `_read`)
        keeps the client's socket timeout, so a Redis that stops answering is still found out within it."""
        if self._conn is None:
            self._conn = self._pool.make_connection()  # type: ignore[no-untyped-call]
        conn = self._conn
        if not conn.is_connected:
            conn.socket_timeout = self._read_timeout
            try:
                await conn.connect()
            finally:
                conn.socket_timeout = None
        return conn

    async def __call__(self, keys: Sequence[str], args: Sequence[Any]) -> Any:
        conn = self._conn
        fresh = conn is None or not conn.is_connected
        try:
            return await self._attempt(keys, args)
        except RedisConnectionError:
            if fresh:
                raise
        return await self._attempt(keys, args)

    async def _attempt(self, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One try, on the connection as it is. A transport that broke under the connection fails as
        whatever the event loop raises for it, not always as one of redis-py's errors: uvloop raises
        RuntimeError ("the handler is closed") for a write on a transport the peer reset, asyncio an
        OSError. Those are connection failures too: the connection is dropped and they are raised as
        redis-py's ConnectionError, so they are retried once like the others, and every caller sees one
        kind of error for a Redis that cannot be reached."""
        try:
            return await self._run(await self._connected(), keys, args)
        except TimeoutError:  # an OSError, but not a lost connection: `_read` has dropped it already
            raise
        except (OSError, RuntimeError, EOFError) as exc:
            if self._conn is not None:
                await self._conn.disconnect(nowait=True)
            raise RedisConnectionError(f"Redis connection lost: {type(exc).__name__}: {exc}") from exc

    async def _run(self, conn: AbstractConnection, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await self._evalsha(conn, keys, args)
        except NoScriptError:
            await conn.send_command("SCRIPT", "LOAD", self._source)
            await self._read(conn)
            return await self._evalsha(conn, keys, args)

    async def _evalsha(self, conn: AbstractConnection, keys: Sequence[str], args: Sequence[Any]) -> Any:
        await conn.send_packed_command(pack(["EVALSHA", self._sha, len(keys), *keys, *args]))
        return await self._read(conn)

    async def _read(self, conn: AbstractConnection) -> Any:
        """The reply, within the client's socket timeout. Bounded here, not by `read_response(timeout=...)`,
        which answers None on a timeout and keeps the connection, whose late reply the next call would then
        read as its own: a timeout here interrupts the read, and redis-py drops a connection whose read was
        interrupted."""
        try:
            async with asyncio.timeout(self._read_timeout):
                return await conn.read_response(timeout=math.inf)  # math.inf: no timeout of redis-py's own
        except TimeoutError:
            raise RedisTimeoutError("Timeout reading from Redis") from None

    async def aclose(self) -> None:
        if self._conn is not None:
            await self._conn.disconnect()
