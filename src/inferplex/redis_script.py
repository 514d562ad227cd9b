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

On a Redis Cluster (redis_connect.py) the connection is to the master of the slot the call's keys live on
(every key of one call shares a slot: each store's keys share a hash tag). A MOVED reply (the slot moved, or
its master failed over to a replica) updates redis-py's slot map and the call runs again on the new master's
connection; an ASK or TRYAGAIN (the slot is being migrated) is left to redis-py's `RedisCluster`, which
knows the ASKING dance, for that one call. A lost connection or CLUSTERDOWN makes the next call refresh the
slot map first, so a failed-over master is found as soon as the cluster has promoted its replica. Behind
Sentinel the connection is the Sentinel pool's own kind: each connect asks the sentinels for the master, and
a write that meets a demoted master is turned into a lost connection by redis-py, so the retry below reaches
the new one. A demoted master that is still up is not read-only at once, though: Sentinel reconfigures it
(and closes its clients) only seconds after promoting its replica, and writes sent to it meanwhile are lost.
So from the first call on, the sentinels are asked where the master is every `MASTER_CHECK_S`, in the
background (one small round trip a second), and a connection to any other address is dropped before the next
call: writes follow a failover within about that long of the sentinels naming the new master.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
from collections.abc import Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import AskError, ClusterDownError, MovedError, NoScriptError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from inferplex.redis_connect import Client

# How many MOVED replies one call follows before it gives up (a slot moves once per failover or reshard).
_MAX_MOVES = 3
# Behind Sentinel: how often the sentinels are asked where the master is.
MASTER_CHECK_S = 1.0


def pack(args: Sequence[str | bytes | int | float]) -> bytes:
    """One command in RESP, as redis-py's encoder writes it (numbers as their repr, text as UTF-8)."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        raw = arg if isinstance(arg, bytes) else arg.encode() if isinstance(arg, str) else repr(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


class DedicatedScript:
    def __init__(self, client: Client, source: str) -> None:
        self._cluster = client if isinstance(client, RedisCluster) else None
        self._pool = None if isinstance(client, RedisCluster) else client.connection_pool
        self._source = source
        self._sha = hashlib.sha1(source.encode()).hexdigest()
        self._conn: AbstractConnection | None = None
        self._node = ""  # on a cluster: the node `_conn` is to
        self._stale = False  # on a cluster: refresh the slot map before the next connect
        kwargs = (
            client.connection_kwargs if isinstance(client, RedisCluster) else client.connection_pool.connection_kwargs
        )
        self._read_timeout: float | None = kwargs.get("socket_timeout")
        self._sentinel = self._pool if isinstance(self._pool, SentinelConnectionPool) else None
        self._master: tuple[str, int] | None = None  # behind Sentinel: where the sentinels last said it is
        self._watching: asyncio.Task[None] | None = None

    async def _connection(self, keys: Sequence[str]) -> AbstractConnection:
        """The connection to use for a call on `keys`: one of our own, made by the client's pool, or on a
        cluster to the master of the keys' slot (a new one when that master changed)."""
        cluster = self._cluster
        if cluster is None:
            if self._conn is None:
                self._conn = self._pool.make_connection()  # type: ignore[union-attr]
            if self._sentinel is not None:
                await self._follow_master(self._conn)
            return self._conn
        await cluster.initialize()  # at once when done already
        if self._stale:
            await cluster.nodes_manager.initialize()
            self._stale = False
        slot = cluster.keyslot(keys[0]) if keys else None
        node = cluster.get_default_node() if slot is None else cluster.nodes_manager.get_node_from_slot(slot)
        if self._conn is not None and self._node != node.name:
            await self._conn.disconnect(nowait=True)
            self._conn = None
        if self._conn is None:
            self._conn = node.connection_class(**node.connection_kwargs)
            self._node = node.name
        return self._conn

    async def _follow_master(self, conn: AbstractConnection) -> None:
        """Behind Sentinel: drop a connection to an address the sentinels no longer call the master. The first
        call starts the watch that asks them every `MASTER_CHECK_S` (module docstring)."""
        if self._watching is None:
            self._watching = asyncio.get_running_loop().create_task(self._watch(), name="sentinel-master-watch")
        master = self._master
        if master is not None and conn.is_connected and (conn.host, conn.port) != master:  # type: ignore[attr-defined]
            await conn.disconnect(nowait=True)

    async def _watch(self) -> None:
        assert self._sentinel is not None
        while True:
            try:
                self._master = await self._sentinel.get_master_address()  # type: ignore[no-untyped-call]
            except Exception:  # sentinels down: the calls themselves find the outage out, and say so
                pass
            await asyncio.sleep(MASTER_CHECK_S)

    async def _connected(self, keys: Sequence[str]) -> AbstractConnection:
        """The connection, (re)connected if need be, with no timeout on writes: redis-py bounds a write with
        `asyncio.wait_for`, a task per call, which cost more than the rest of the call. A write only hands a
        few KiB to the kernel and does not block; every read (the handshake's here, each reply's in `_read`)
        keeps the client's socket timeout, so a Redis that stops answering is still found out within it."""
        conn = await self._connection(keys)
        if not conn.is_connected:
            conn.socket_timeout = self._read_timeout
            try:
                await conn.connect()  # type: ignore[no-untyped-call]
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
            return await self._redirected(keys, args)
        except (TimeoutError, RedisTimeoutError, RedisConnectionError, RedisClusterException, ClusterDownError):
            self._stale = self._cluster is not None  # the slot's master may be gone: ask the cluster again
            raise
        except (OSError, RuntimeError, EOFError) as exc:
            self._stale = self._cluster is not None
            if self._conn is not None:
                await self._conn.disconnect(nowait=True)
            raise RedisConnectionError(f"Redis connection lost: {type(exc).__name__}: {exc}") from exc

    async def _redirected(self, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run on the keys' node, following MOVED to the slot's new master (module docstring)."""
        for _ in range(_MAX_MOVES):
            try:
                return await self._run(await self._connected(keys), keys, args)
            except MovedError as moved:
                if self._cluster is None:
                    raise
                await self._cluster.nodes_manager.move_slot(moved)
            except (AskError, TryAgainError):
                if self._cluster is None:
                    raise
                return await self._through_cluster(keys, args)
        raise ClusterDownError(f"the keys' slot moved more than {_MAX_MOVES} times in one call")

    async def _through_cluster(self, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One call through redis-py's cluster client, which handles a slot in migration (ASK, TRYAGAIN)."""
        cluster = self._cluster
        assert cluster is not None
        command = ("EVALSHA", self._sha, len(keys), *keys, *args)
        try:
            return await cluster.execute_command(*command)
        except NoScriptError:
            await cluster.script_load(self._source)
            return await cluster.execute_command(*command)

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
        if self._watching is not None:
            self._watching.cancel()
            with contextlib.suppress(BaseException):
                await self._watching
        if self._conn is not None:
            await self._conn.disconnect()
