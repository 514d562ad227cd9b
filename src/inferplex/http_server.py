"""The HTTP/1.1 protocol uvicorn serves the gateway with: uvicorn's httptools protocol, with a response's
head and body leaving in one write.

uvicorn writes a response's status line and headers to the socket as soon as the app sends
`http.response.start`, and its body as a second write on `http.response.body`. On a connection with
TCP_NODELAY (uvloop sets it) each write is a send system call and a TCP segment of its own, and on the
kernel's side the second segment costs about as much as the first: measured end to end, a tenth of a
keyed request's CPU (docs/benchmarks.md). The app sends both messages within one step of its task, so the
writes made in one pass of the event loop are held and leave together at the end of it: one call and one
segment for a buffered answer, and a stream's head with its first chunk.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescingTransport:
    """A connection's transport whose writes made in one pass of the loop leave as one. Everything else is
    the transport's own; closing sends what is held first."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self._held is None:
            self._held = [data]
            self._loop.call_soon(self._flush)
        else:
            self._held.append(data)

    def writelines(self, lines: list[bytes]) -> None:
        for data in lines:
            self.write(data)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GatewayHTTPProtocol(HttpToolsProtocol):
    """uvicorn's `http=` protocol for `inferplex serve` (and the tests' and benchmarks' servers)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
