"""Adaptive batching (inferplex.batching): what concurrent callers of a store see."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from inferplex.batching import Batcher


class Store:
    """Doubles each item; each batch takes one 'round trip' (a few loop turns) and is recorded."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.fail_on = fail_on
        self.orphans: list[tuple[int, int]] = []

    async def run(self, items: list[int]) -> list[int]:
        self.batches.append(items)
        for _ in range(3):
            await asyncio.sleep(0)
        if self.fail_on in items:
            raise ConnectionError("store went away")
        return [2 * i for i in items]

    def orphaned(self, item: int, result: int) -> None:
        self.orphans.append((item, result))


async def submit(batcher: Batcher[int, int], item: int) -> int:
    """A call as a coroutine of its own (for `create_task`): queued when the task first runs."""
    return await batcher.enqueue(item)


async def test_the_first_call_goes_at_once_and_later_ones_share_the_next_round_trip() -> None:
    store = Store()
    batcher = Batcher(store.run)
    first = asyncio.create_task(submit(batcher, 1))
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # the first is in flight, alone
    rest = [asyncio.create_task(submit(batcher, i)) for i in range(2, 7)]
    assert await asyncio.gather(first, *rest) == [2, 4, 6, 8, 10, 12]
    assert store.batches == [[1], [2, 3, 4, 5, 6]]
    assert await submit(batcher, 7) == 14  # idle again: alone, at once
    assert store.batches[-1] == [7]


async def test_a_failed_batch_fails_each_of_its_callers_and_the_next_batch_still_runs() -> None:
    store = Store(fail_on=2)
    batcher = Batcher(store.run)
    first = asyncio.create_task(submit(batcher, 1))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    doomed = [asyncio.create_task(submit(batcher, i)) for i in (2, 3)]
    assert await first == 2
    for task in doomed:
        with pytest.raises(ConnectionError):
            await task
    assert await submit(batcher, 4) == 8


async def test_a_caller_cancelled_in_flight_leaves_its_result_to_orphaned() -> None:
    store = Store()
    batcher = Batcher(store.run, orphaned=store.orphaned)
    waiting = asyncio.create_task(submit(batcher, 5))
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # in flight
    waiting.cancel()
    never_sent = asyncio.create_task(submit(batcher, 6))
    await asyncio.sleep(0)
    never_sent.cancel()  # cancelled before its batch left: not sent at all
    await batcher.aclose()
    assert store.orphans == [(5, 10)]
    assert store.batches == [[5]]


async def test_a_kept_item_is_sent_even_if_its_future_is_cancelled_before_its_batch_leaves() -> None:
    store = Store()
    batcher = Batcher(store.run, orphaned=store.orphaned)
    first = batcher.enqueue(1)  # in flight
    await asyncio.sleep(0)
    dropped, kept = batcher.enqueue(2), batcher.enqueue(3, keep=True)
    dropped.cancel()
    kept.cancel()
    await batcher.aclose()
    assert await first == 2
    assert store.batches == [[1], [3]] and store.orphans == [(3, 6)]


async def test_posted_items_go_in_queue_order_and_their_outcome_reaches_then_within_the_batch() -> None:
    store = Store(fail_on=5)
    batcher = Batcher(store.run)
    heard: list[tuple[int, int | None, str | None]] = []

    def then(item: int) -> Callable[[int | None, BaseException | None], None]:
        def record(result: int | None, error: BaseException | None) -> None:
            heard.append((item, result, type(error).__name__ if error else None))
            if item == 2:
                raise RuntimeError("a callback that fails must not stop the others")

        return record

    first = batcher.enqueue(1)
    batcher.post(2, then(2))
    waited = batcher.enqueue(3)
    batcher.post(4, then(4))
    assert await first == 2
    assert heard == [(2, 4, None), (4, 8, None)]  # told by the batch itself, before the awaited caller resumes
    assert await waited == 6
    assert store.batches == [[1, 2, 3, 4]]
    batcher.post(5, then(5))
    await batcher.drained()
    assert heard[-1] == (5, None, "ConnectionError")  # a failed batch reaches `then` as its error


async def test_a_posted_item_whose_batch_is_cancelled_at_shutdown_hears_so() -> None:
    """A task cancelled at shutdown stops the batch in flight: those waiting get a cancelled future, and a
    posted item's `then` a CancelledError (so a limit store's `finish` future still completes)."""
    batcher = Batcher(Store().run)
    heard: list[BaseException | None] = []
    waiting = batcher.enqueue(1)
    batcher.post(2, lambda _, error: heard.append(error))
    await asyncio.sleep(0)  # the batch is in flight
    drainer = batcher._drainer
    assert drainer is not None
    drainer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert len(heard) == 1 and isinstance(heard[0], asyncio.CancelledError)
