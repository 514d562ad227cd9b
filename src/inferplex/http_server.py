"""The HTTP/1.1 protocol uvicorn serves the gateway with: uvicorn's httptools protocol, with the writes of
each pass of the event loop sent at its end.

uvicorn writes to the socket at once: a response's head on `http.response.start` and its body on
`http.response.body`, each a send system call. Sending at once wakes the peer right then, and when the
peer runs on another core, waking it is an inter-processor interrupt charged to the gateway's core (in a
VM, an exit to the hypervisor): measured under load, one per response. Holding the writes until the end of
the loop's pass sends a response's head and body as one, and the responses of one pass back to back, so
the peer is woken once for many: a tenth of an interrupt per response, and 13% more requests per second
on the master key (docs/benchmarks.md). Sending a response's head with its body alone, at once, saved the
system call but not the interrupt, and no throughput. A write waits at most for the rest of the pass it
was made in (for a stream whose upstream chunks are already buffered, the chunks of that pass).
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
