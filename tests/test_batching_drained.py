"""`Batcher.drained` waits for what was queued before it, not for a queue that never empties: the admin
API reads the ledger after its own replica's settlements, and under steady load (or while each batch waits
out a database outage) that must not mean waiting for the load to stop."""

from __future__ import annotations

import asyncio

from inferplex.batching import Batcher


async def test_drained_waits_for_the_items_before_it_and_not_for_those_after() -> None:
    applied: list[int] = []

    async def run(items: list[int]) -> list[int]:
        await asyncio.sleep(0.02)
        applied.extend(items)
        return items

    batcher: Batcher[int, int] = Batcher(run)
    stop = asyncio.Event()

    posted: list[int] = []

    async def steady_load() -> None:
        while not stop.is_set():
            posted.append(len(posted))
            batcher.post(posted[-1], lambda result, error: None)
            await asyncio.sleep(0.005)

    load = asyncio.create_task(steady_load())
    await asyncio.sleep(0.05)
    before = len(posted)
    await asyncio.wait_for(batcher.drained(), 1.0)  # before the fix: waited until the load stopped
    assert set(range(before)) <= set(applied)
    stop.set()
    await load
    await batcher.aclose()
    assert applied == sorted(applied)  # in order, and all of them once the load stopped
