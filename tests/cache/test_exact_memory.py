"""The in-process backend's own promises, beyond the backends' shared contract (test_backends.py): bounded
by bytes with the least recently used entry evicted first, expiry on read; and the service's outage log,
once per burst."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from inferplex.cache.backends.memory import OVERHEAD, MemoryBackend
from inferplex.cache.base import Entry
from inferplex.cache.service import Outages


def entry(n: int, size: int = 1000, ttl: float = 60.0) -> Entry:
    now = time.time()
    return Entry(f"{n:064x}", b"x" * size, now, now + ttl, "m", "open")


ONE = 1000 + 64 + OVERHEAD  # what one entry of `entry(n)` counts against the bound


async def test_the_least_recently_used_entry_goes_first() -> None:
    backend = MemoryBackend(3 * ONE)
    for n in (1, 2, 3):
        await backend.put(entry(n))
    assert await backend.get(entry(1).id) is not None  # 1 is now the most recently used
    await backend.put(entry(4))
    assert [await backend.get(entry(n).id) is not None for n in (1, 2, 3, 4)] == [True, False, True, True]
    stats = await backend.stats()
    assert (stats.entries, stats.bytes, stats.max_bytes) == (3, 3 * ONE, 3 * ONE)


async def test_a_large_entry_evicts_as_many_as_it_needs_and_one_above_the_bound_is_not_kept() -> None:
    backend = MemoryBackend(3 * ONE)
    for n in (1, 2, 3):
        await backend.put(entry(n))
    await backend.put(entry(9, size=2 * ONE - 64 - OVERHEAD))  # counts as two entries
    assert [await backend.get(entry(n).id) is not None for n in (1, 2, 3, 9)] == [False, False, True, True]
    await backend.put(entry(10, size=4 * ONE))
    assert await backend.get(entry(10).id) is None and (await backend.stats()).entries == 2


async def test_replacing_an_entry_counts_its_bytes_once() -> None:
    backend = MemoryBackend(10 * ONE)
    for _ in range(5):
        await backend.put(entry(1))
    assert (await backend.stats()).bytes == ONE


async def test_an_expired_entry_is_dropped_when_read() -> None:
    backend = MemoryBackend(10 * ONE)
    await backend.put(entry(1, ttl=0.1))
    await asyncio.sleep(0.15)
    assert await backend.get(entry(1).id) is None
    assert (await backend.stats()).entries == 0


def test_an_outage_is_logged_once_per_burst(caplog: pytest.LogCaptureFixture) -> None:
    outages = Outages(every_s=0.2)
    with caplog.at_level(logging.WARNING, logger="inferplex"):
        for _ in range(50):
            outages.report("reading entry abc", ConnectionError("down"))
        time.sleep(0.25)
        outages.report("reading entry abc", ConnectionError("still down"))
    lines = [r.getMessage() for r in caplog.records if "response cache" in r.getMessage()]
    assert len(lines) == 2 and "49 more since the last report" in lines[1]
