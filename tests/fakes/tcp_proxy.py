"""A TCP forwarder a test can cut and restore: what a database outage looks like to the gateway.

Cut, the listener is closed and every forwarded connection is aborted, so the gateway's open connections
break and new ones are refused, as when PostgreSQL goes down; restored, it listens on the same port again.
Silenced, it is a network partition that drops packets without a reset: connections stay open, nothing
crosses in either direction and new connections hang before reaching the target; restored, what was held
is delivered, as TCP's retransmissions would deliver it once the partition heals.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from tests.gateway_server import free_port


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=f"tcp-proxy-{self.port}")
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._open: asyncio.Event | None = None  # cleared while silenced; made on the proxy's own loop

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        self.restore()
        return self

    def __exit__(self, *_: Any) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def silence(self) -> None:
        """Drops everything silently (no reset) until `restore`: a partition, not a crash."""

        async def close_gate() -> None:
            self._gate().clear()

        self._run(close_gate())

    def _gate(self) -> asyncio.Event:
        if self._open is None:
            self._open = asyncio.Event()
            self._open.set()
        return self._open

    def restore(self) -> None:
        async def listen() -> None:
            self._gate().set()
            if self._server is None:
                self._server = await asyncio.start_server(self._forward, "127.0.0.1", self.port)

        self._run(listen())

    def reset(self) -> None:
        """Aborts every forwarded connection (the peer sees a reset) but keeps listening: a flap."""

        async def abort() -> None:
            for writer in list(self._writers):
                writer.transport.abort()
            self._writers.clear()

        self._run(abort())

    def cut(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
                self._server = None
            for writer in list(self._writers):
                writer.transport.abort()
            self._writers.clear()

        self._run(close())

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        await self._gate().wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await src.read(65536):
                    await self._gate().wait()
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}
