"""The coordinator: one process that holds every worker's limits and breakers, so they are global on one
machine without Redis.

It keeps the in-process stores a single gateway uses (limits/memory.py, routing/cooldown.py's
MemoryCooldowns) and applies each worker's batch of operations in turn, as one event-loop step: a frame is
never interleaved with another, so a rate admits exactly its limit across all workers, with one clock.

Concurrency slots belong to the connection that took them. When a worker dies, its connection closes and
its slots are freed at once (no lease to wait out). When a worker reconnects (the coordinator restarted, or
the link timed out), its first call re-declares the slots its running requests hold, so a restarted
coordinator knows them; that call takes ownership, and the old connection's close frees only what it still
owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any, cast

from inferplex.config import CooldownConfig
from inferplex.limits import Hold, Rate
from inferplex.limits.memory import MemoryLimits
from inferplex.routing.cooldown import Check, Gate, MemoryCooldowns
from inferplex.shared_state.wire import CALL, OPENED, REPLY, Frames, frame

log = logging.getLogger("inferplex.shared_state")

Slot = tuple[str, str]
_GATES = {Gate.CLOSED: 0, Gate.PROBE: 1, Gate.OPEN: 2}
_STATES = {"closed": 0, "half_open": 1, "open": 2}


def _ran(step: Coroutine[Any, Any, Any]) -> Any:
    """The result of a memory store's method: async for the interface's sake, it never waits, so it runs to
    its end in one step (and a frame is applied without a pass of the event loop in between)."""
    try:
        step.send(None)
    except StopIteration as done:
        return done.value
    step.close()
    raise RuntimeError("a memory store's method waited")


class _Peer(asyncio.Protocol):
    """One worker's connection: each frame it sends is applied whole and answered at once."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self.frames = Frames()
        self.transport: asyncio.WriteTransport | None = None
        self.slots: set[Slot] = set()
        self.hears_openings = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.WriteTransport, transport)  # uvloop's is one, without subclassing it
        self.coordinator.peers.add(self)
        self.coordinator.all_left.clear()

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        try:
            for kind, ops in self.frames.feed(data):
                if kind != CALL:
                    raise ConnectionError(f"unexpected frame {kind!r}")
                self.transport.write(frame(REPLY, [self.coordinator.apply(self, op) for op in ops]))
        except Exception:
            log.exception("shared state: a worker sent what could not be applied; its connection is closed")
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.coordinator.peers.discard(self)
        if not self.coordinator.peers:
            self.coordinator.all_left.set()
        self.coordinator.gone(self)

    def tell(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


class Coordinator:
    def __init__(self) -> None:
        self.limits = MemoryLimits()
        self.cooldowns = MemoryCooldowns()
        self._owner: dict[Slot, _Peer] = {}
        self.peers: set[_Peer] = set()
        self.all_left = asyncio.Event()  # set while no worker is connected
        self._policies: dict[tuple[int, float, float], CooldownConfig] = {}
        self._ops: dict[str, Callable[[_Peer, list[Any]], Any]] = {
            "a": self._admit,
            "f": self._finish,
            "t": self._try_acquire,
            "q": self._take,
            "u": self._in_use,
            "h": self._hold,
            "c": self._check,
            "x": self._failure,
            "s": self._success,
            "z": self._states,
        }

    async def serve(self, path: str) -> asyncio.Server:
        server = await asyncio.get_running_loop().create_unix_server(lambda: _Peer(self), path)
        os.chmod(path, 0o600)  # only the gateway's own user may talk to it
        return server

    def apply(self, peer: _Peer, op: list[Any]) -> Any:
        return self._ops[op[0]](peer, op)

    def gone(self, peer: _Peer) -> None:
        """A worker's connection closed: the slots it still owns are free (its requests are gone with it,
        or it re-declares them on a new connection, which then owns them)."""
        mine = [slot for slot in peer.slots if self._owner.get(slot) is peer]
        for slot in mine:
            del self._owner[slot]
        if mine:
            self.limits.finish((), mine)
            log.info("shared state: %d concurrency slots of a closed connection freed", len(mine))

    def _own(self, peer: _Peer, slot: Slot) -> None:
        peer.slots.add(slot)
        self._owner[slot] = peer

    def _disown(self, peer: _Peer, slot: Slot) -> None:
        peer.slots.discard(slot)
        if self._owner.get(slot) is not None:
            self._owner[slot].slots.discard(slot)
            del self._owner[slot]

    # Limits: ["a", rates, holds], ["f", charges, releases], ["t", key, limit, holder], ["q", rate],
    # ["u", key], ["h", slots]. A rate is [key, amount, limit, window_s, slots, age_s]; a hold [key, limit,
    # holder]; a slot or release [key, holder].

    def _admit(self, peer: _Peer, op: list[Any]) -> list[Any]:
        holds = [Hold(*h) for h in op[2]]
        verdict = _ran(self.limits.admit([Rate(*r) for r in op[1]], holds))
        for hold, taken in zip(holds, verdict.taken, strict=True):
            if taken:
                self._own(peer, (hold.key, hold.holder))
        return [verdict.wait, verdict.worst, verdict.taken, verdict.used]

    def _finish(self, peer: _Peer, op: list[Any]) -> int:
        releases = [(key, holder) for key, holder in op[2]]
        for slot in releases:
            self._disown(peer, slot)
        self.limits.finish([Rate(*r) for r in op[1]], releases)
        return 1

    def _try_acquire(self, peer: _Peer, op: list[Any]) -> bool:
        taken: bool = _ran(self.limits.try_acquire(op[1], op[2], op[3]))
        if taken:
            self._own(peer, (op[1], op[3]))
        return taken

    def _take(self, peer: _Peer, op: list[Any]) -> list[Any]:
        return list(_ran(self.limits.take(Rate(*op[1]))))

    def _in_use(self, peer: _Peer, op: list[Any]) -> int:
        count: int = _ran(self.limits.in_use(op[1]))
        return count

    def _hold(self, peer: _Peer, op: list[Any]) -> int:
        """A reconnecting worker's slots, held by requests still running there: taken whatever the limit (they
        were admitted under it), and owned by this connection from now on."""
        for key, holder in op[1]:
            _ran(self.limits.try_acquire(key, sys.maxsize, holder))
            self._own(peer, (key, holder))
        return len(op[1])

    # Breakers: ["c", key, failures, window, period], ["x", ...the same], ["s", key], ["z", keys].

    def _policy(self, op: list[Any]) -> CooldownConfig:
        shape = (int(op[2]), float(op[3]), float(op[4]))
        found = self._policies.get(shape)
        if found is None:
            found = self._policies[shape] = CooldownConfig(failures=shape[0], window=shape[1], period=shape[2])
        return found

    def _check(self, peer: _Peer, op: list[Any]) -> list[Any]:
        peer.hears_openings = True
        check: Check = _ran(self.cooldowns.check(op[1], self._policy(op)))
        return [_GATES[check.gate], check.retry_in]

    def _failure(self, peer: _Peer, op: list[Any]) -> bool:
        peer.hears_openings = True
        opened: bool = _ran(self.cooldowns.failure(op[1], self._policy(op)))
        if opened:
            told = frame(OPENED, op[1])
            for other in self.peers:
                if other.hears_openings and other is not peer:
                    other.tell(told)
        return opened

    def _success(self, peer: _Peer, op: list[Any]) -> None:
        _ran(self.cooldowns.success(op[1]))

    def _states(self, peer: _Peer, op: list[Any]) -> list[Any]:
        return [[_STATES[state], wait] for state, wait in _ran(self.cooldowns.states(op[1]))]


# After SIGTERM or SIGINT, how long the coordinator waits for its workers to disconnect before it exits anyway.
STOP_WAIT_S = 120.0


async def run(path: str, parent: int | None = None) -> None:
    """Serve on `path` until SIGTERM or SIGINT and then until no worker is connected, or, when `parent` is
    given, until that process is gone (a coordinator must not outlive its supervisor).

    Waiting for the workers matters because a stop signal often reaches the whole process group at once
    (Ctrl-C in a terminal, systemd's stop, a container's): the workers then drain their requests for up to
    `server.drain_s`, and those requests must still find their limits and breakers, not a closed socket."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a socket left by a coordinator that died; the caller checked none answers on it
    coordinator = Coordinator()
    server = await coordinator.serve(path)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    loop.add_signal_handler(signal.SIGHUP, _reload)  # a reload is the supervisor's: nothing changes here
    log.info("shared state coordinator listening on %s (pid %d)", path, os.getpid())
    try:
        async with server:
            while not stopping.is_set() and _parent_alive(parent):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), 1.0)
            if coordinator.peers and _parent_alive(parent):
                log.info("shared state coordinator stopping once %d workers have left", len(coordinator.peers))
                give_up = loop.time() + STOP_WAIT_S
                while coordinator.peers and _parent_alive(parent) and loop.time() < give_up:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(coordinator.all_left.wait(), 1.0)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _reload() -> None:
    log.info("shared state coordinator: SIGHUP ignored (it has no configuration; its state is kept)")


def _parent_alive(parent: int | None) -> bool:
    if parent is None or os.getppid() == parent:
        return True
    log.warning("shared state coordinator: its supervisor (pid %d) is gone; exiting", parent)
    return False
