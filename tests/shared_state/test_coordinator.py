"""The coordinator and a worker's stores on it, over a real Unix socket: the limit-store contract that the
in-memory and Redis stores pass (tests/accounts/test_limits_contract.py), and what is the coordinator's own:
slots freed with a dead worker's connection, slots declared again to a restarted coordinator, a stuck or
absent coordinator failing open or closed without hanging, breaker openings heard by every worker."""

from __future__ import annotations

import asyncio
import inspect
import signal
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import tests.accounts.test_limits_contract as contract
from inferplex.config import CooldownConfig
from inferplex.limits import Hold, LimitsUnavailable, Rate
from inferplex.routing.cooldown import Gate
from inferplex.shared_state.cooldowns import SharedCooldowns
from inferplex.shared_state.coordinator import Coordinator
from inferplex.shared_state.limits import SharedLimits
from inferplex.shared_state.wire import CALL, OPENED, REPLY, Frames, frame

# Every contract test that takes only a `store` runs here against a worker's store on the coordinator.
for _name, _test in vars(contract).items():
    if _name.startswith("test_") and list(inspect.signature(_test).parameters) == ["store"]:
        globals()[_name] = _test


async def _serve(path: str) -> tuple[Coordinator, asyncio.Server]:
    coordinator = Coordinator()
    return coordinator, await coordinator.serve(path)


@pytest.fixture
async def path(socket_dir: Path) -> str:
    return str(socket_dir / "c.sock")


@pytest.fixture
async def served(path: str) -> AsyncIterator[Coordinator]:
    coordinator, server = await _serve(path)
    yield coordinator
    server.close()


@pytest.fixture
async def store(served: Coordinator, path: str) -> AsyncIterator[SharedLimits]:
    s = SharedLimits(path)
    yield s
    await s.aclose()


async def test_two_workers_share_one_rate_exactly(served: Coordinator, path: str) -> None:
    one, two = SharedLimits(path), SharedLimits(path)
    rates = [Rate("k:rpm", 1, 10, 60)]
    verdicts = await asyncio.gather(*((one if i % 2 else two).admit(rates, []) for i in range(40)))
    assert sum(v.wait == 0 for v in verdicts) == 10
    await one.aclose()
    await two.aclose()


async def test_a_dead_workers_slots_are_freed_with_its_connection(served: Coordinator, path: str) -> None:
    dying, other = SharedLimits(path), SharedLimits(path)
    holds = [Hold("k:conc", 2, "r1"), Hold("k:conc", 2, "r2")]
    assert (await dying.admit([], holds)).taken == (True, True)
    assert not await other.try_acquire("k:conc", 2, "r3")
    await dying.link.aclose()  # what the kernel does to the socket of a worker that was killed
    for _ in range(100):
        if await other.in_use("k:conc") == 0:
            break
        await asyncio.sleep(0.01)
    assert await other.try_acquire("k:conc", 2, "r3")
    await other.aclose()


async def test_a_restarted_coordinator_hears_of_the_slots_running_requests_hold(path: str) -> None:
    _, server = await _serve(path)
    worker = SharedLimits(path)
    assert await worker.try_acquire("k:conc", 1, "running")
    await _close_hard(server, worker)
    _, server = await _serve(path)  # counts start afresh; the running request's slot is declared again
    other = SharedLimits(path)
    assert await worker.in_use("k:conc") == 1
    assert not await other.try_acquire("k:conc", 1, "new")
    await worker.release("k:conc", "running")
    assert await other.try_acquire("k:conc", 1, "new")
    await worker.aclose()
    await other.aclose()
    server.close()


async def _close_hard(server: asyncio.Server, *clients: SharedLimits) -> None:
    """The coordinator dies: its socket stops listening and every connection to it is cut."""
    server.close()
    for client in clients:
        connection = client.link._connection
        if connection is not None and connection.transport is not None:
            connection.transport.abort()
    await asyncio.sleep(0.05)


async def test_without_a_coordinator_limits_fail_open_or_closed_as_configured(path: str) -> None:
    opened, closed = SharedLimits(path, fail_open=True), SharedLimits(path, fail_open=False)
    verdict = await opened.admit([Rate("k", 1, 1, 60)], [Hold("c", 1, "h")])
    assert verdict.wait == 0 and verdict.taken == (True,)
    with pytest.raises(LimitsUnavailable):
        await closed.admit([Rate("k", 1, 1, 60)], [])
    await opened.aclose()
    await closed.aclose()


async def test_a_stuck_coordinator_costs_a_request_at_most_the_timeout(path: str) -> None:
    """A coordinator that accepts but never answers (stopped, wedged): the call gives up after `timeout_s`."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    store = SharedLimits(path, fail_open=False, timeout_s=0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(LimitsUnavailable):
        await store.admit([Rate("k", 1, 1, 60)], [])
    assert loop.time() - started < 1.0
    await store.aclose()
    listener.close()


async def _eventually(check: Callable[[], Any]) -> None:
    for _ in range(200):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never")


async def test_a_breaker_opened_through_one_worker_is_open_for_the_other(served: Coordinator, path: str) -> None:
    policy = CooldownConfig(failures=2, window=30, period=30)
    one, two = SharedCooldowns(path), SharedCooldowns(path)
    assert (await two.check("dep", policy)).gate is Gate.CLOSED  # remembered as closed from now on
    assert not await one.failure("dep", policy)
    assert await one.failure("dep", policy)

    async def open_for_two() -> bool:
        return (await two.check("dep", policy)).gate is Gate.OPEN

    await _eventually(open_for_two)  # the opening reaches it: its memory of "closed" is dropped
    assert (await one.states(["dep", "other"]))[1] == ("closed", 0.0)
    assert (await one.states(["dep"]))[0][0] == "open"
    await one.aclose()
    await two.aclose()


async def test_a_worker_reconnects_by_itself_after_the_coordinator_is_back(path: str) -> None:
    store = SharedLimits(path, fail_open=False, timeout_s=0.2)
    with pytest.raises(LimitsUnavailable):
        await store.admit([Rate("k", 1, 5, 60)], [])
    _, server = await _serve(path)
    assert (await store.admit([Rate("k", 1, 5, 60)], [])).wait == 0
    await store.aclose()
    server.close()


def test_frames_are_cut_whole_from_any_pieces_of_the_stream() -> None:
    """A socket hands over any number of bytes: part of a frame, or several frames and a part."""
    stream = frame(CALL, [["a", [["k", 1, 10, 60.0, 0, 0.0]], []]]) + frame(OPENED, "dep") + frame(REPLY, [1])
    for size in (1, 7, len(stream)):
        frames, got = Frames(), []
        for at in range(0, len(stream), size):
            got += frames.feed(stream[at : at + size])
        assert got == [(CALL, [["a", [["k", 1, 10, 60.0, 0, 0.0]], []]]), (OPENED, "dep"), (REPLY, [1])]
    with pytest.raises(ConnectionError):
        Frames().feed(b"\xff\xff\xff\xff" + CALL)  # no peer sends 4 GiB: the connection is closed


async def test_a_stopped_coordinator_serves_its_workers_until_they_have_left(coordinator: Any) -> None:
    """SIGHUP changes nothing. SIGTERM (or Ctrl-C) reaches the whole process group at once: the workers
    drain their requests, which still find their limits; the coordinator exits once the last worker has
    disconnected."""
    worker = SharedLimits(coordinator.path, fail_open=False)
    coordinator.proc.send_signal(signal.SIGHUP)  # the supervisor's reload: nothing here changes
    await asyncio.sleep(0.3)
    assert (await worker.admit([Rate("k", 1, 2, 60)], [])).wait == 0
    coordinator.proc.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.3)
    assert (await worker.admit([Rate("k", 1, 2, 60)], [])).wait == 0  # still counted: 2 of 2
    assert (await worker.admit([Rate("k", 1, 2, 60)], [])).wait > 0
    assert coordinator.proc.poll() is None
    await worker.aclose()
    await asyncio.to_thread(coordinator.proc.wait, 10)
    assert coordinator.proc.returncode == 0
