"""The uvicorn server every serving process runs, draining on SIGTERM instead of stopping at once.

uvicorn on SIGTERM stops accepting at once, waits for connections without a bound unless told one, then
cancels what is left, and re-raises the signal after its shutdown (an exit code of -15, which a supervisor
or an orchestrator reads as a failure). A gateway behind a load balancer must instead:

1. turn not ready at once (`/health/ready` 503, serving/readiness.py) and keep accepting for `drain_delay_s`,
   so that the balancer's health checks take it out of rotation before it stops accepting (else the
   connections the balancer opens meanwhile are refused);
   Meanwhile every response says `Connection: close` (DrainingProtocol), moving keep-alive clients off;
2. stop accepting, close idle keep-alive connections, and tell busy ones to close after their response;
3. let in-flight requests and streams finish within `drain_s`;
4. cut what is still open then by closing its connection: the request sees its caller leave, so a stream
   is settled exactly as for a caller who hung up (streaming.py), and nothing is lost; wait for those
   settlements (bounded), then run the app's shutdown (stores flushed), and exit 0.

A second SIGINT (Ctrl+C twice) skips the waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Generator
from types import FrameType
from typing import Any

import uvicorn

from inferplex.http_server import GatewayHTTPProtocol
from inferplex.serving.collector import ClockedCollector
from inferplex.serving.readiness import Readiness

log = logging.getLogger("inferplex")

# How long requests cut at the end of the grace get to settle (their usage and credits) before the app's
# shutdown runs; settling a cut request is a few store calls, not a wait on an upstream.
SETTLE_S = 5.0
TICK_S = 0.05


IDLE_CLOSE_S = 0.2


class DrainingProtocol(GatewayHTTPProtocol):
    """The gateway's HTTP protocol, which answers `Connection: close` once its server drains.

    A client that keeps a connection alive learns that it must open a new one (on another replica or worker)
    from a response, rather than from a close that can cross its next request on the wire: closing a
    keep-alive connection the moment it is idle drops the request a busy client is sending on it just then.
    """

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        if getattr(self.server_state, "draining", False):
            self.cycle.keep_alive = False


def _close_idle(connections: set[Any], idle_since: dict[object, tuple[float, object]], now: float) -> None:
    """Close each connection idle (between two requests) for IDLE_CLOSE_S: a busy client sends its next request
    within that (and is answered `Connection: close`); one that sent nothing is done with it."""
    for connection in list(connections):
        cycle = getattr(connection, "cycle", None)
        if cycle is not None and not cycle.response_complete:
            cycle.keep_alive = False
            idle_since.pop(connection, None)
            continue
        seen = idle_since.get(connection)
        if seen is None or seen[1] is not cycle:
            idle_since[connection] = (now, cycle)
        elif now - seen[0] >= IDLE_CLOSE_S:
            connection.transport.close()


class DrainingServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        readiness: Readiness,
        drain_delay_s: float,
        drain_s: float,
        on_started: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self.readiness = readiness
        self.drain_delay_s = drain_delay_s
        self.drain_s = drain_s
        self.on_started = on_started
        self._stop_accepting_at: float | None = None
        self._collector = ClockedCollector(time.monotonic())  # cycles' garbage bounded (serving/collector.py)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._stop_accepting_at is None:
            self.readiness.draining = True  # at once: the next health check already sees it
            self.server_state.draining = True  # type: ignore[attr-defined]  # read by DrainingProtocol
            self._stop_accepting_at = time.monotonic() + self.drain_delay_s
            # A signal handler may interrupt the logging machinery itself: log from the loop, not from here.
            name = signal.Signals(sig).name
            with contextlib.suppress(RuntimeError):
                loop = asyncio.get_running_loop()
                loop.call_soon_threadsafe(self._log_draining, name)
        elif sig == signal.SIGINT:
            self.force_exit = True
            self.should_exit = True

    def _log_draining(self, name: str) -> None:
        log.warning(
            "%s: draining (not ready now; accepting for %.1f s more, then up to %.1f s for requests in flight)",
            name,
            self.drain_delay_s,
            self.drain_s,
        )

    def _no_reload(self, sig: int, frame: FrameType | None) -> None:
        # SIGHUP would end the process by default: a reload is the supervisor's (`--workers` 2 or more);
        # a single process (a fleet's replica) is replaced by its orchestrator instead, after a drain.
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().call_soon_threadsafe(
                log.warning, "SIGHUP ignored: a single process does not reload (restart it, or serve --workers 2+)"
            )

    def drain(self) -> None:
        """Start draining as SIGTERM does (for a caller in the same process: tests, an embedding program)."""
        self.handle_exit(signal.SIGTERM, None)

    async def on_tick(self, counter: int) -> bool:
        now = time.monotonic()
        self._collector.tick(now)
        if self._stop_accepting_at is not None and now >= self._stop_accepting_at:
            self.should_exit = True
        return await super().on_tick(counter)

    async def main_loop(self) -> None:
        # uvicorn's loop, at a finer tick: the drain delay ends within TICK_S of when it should.
        counter = 0
        while not await self.on_tick(counter):
            await asyncio.sleep(TICK_S)
            counter = (counter + 1) % 864_000

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self.on_started is not None:
            self.on_started()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        state = self.server_state
        for server in self.servers:
            server.close()  # no new connections (with a shared socket: this process's copy only)
        for sock in sockets or []:
            sock.close()
        loop = asyncio.get_running_loop()
        grace = loop.time() + self.drain_s
        if state.connections:
            log.info("waiting up to %.1f s for %d connection(s) to finish", self.drain_s, len(state.connections))
        idle_since: dict[object, tuple[float, object]] = {}
        while state.connections and not self.force_exit and loop.time() < grace:
            _close_idle(state.connections, idle_since, loop.time())
            await asyncio.sleep(TICK_S)
        if state.connections:
            log.warning("drain grace over: cutting %d connection(s) still open", len(state.connections))
            for connection in list(state.connections):
                transport = getattr(connection, "transport", None)
                if transport is not None:
                    transport.close()  # the request sees its caller leave, and settles as for one
        if state.tasks and not self.force_exit:
            await asyncio.wait(list(state.tasks), timeout=SETTLE_S)
        for task in list(state.tasks):
            task.cancel(msg="not settled within the drain")
        if not self.force_exit:
            await self.lifespan.shutdown()
        log.info("drained")

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # uvicorn's, except that the signal is not raised again after the shutdown: a drained exit is a
        # clean one (exit code 0), which is what a supervisor or an orchestrator must read.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        if signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:  # a process of its own (a worker ignores it)
            original[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._no_reload)
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)
