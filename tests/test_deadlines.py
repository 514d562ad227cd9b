"""`Deadline` behaves as `asyncio.timeout` does, with many deadlines sharing one timer."""

from __future__ import annotations

import asyncio
import time

import pytest

from inferplex.deadlines import Deadline


async def test_a_block_that_outlasts_its_deadline_raises_timeout_error_on_time() -> None:
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        with Deadline(0.05) as d:
            await asyncio.sleep(5)
    assert d.expired()
    assert 0.04 < time.monotonic() - start < 1
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the cancellation was taken back: later code unaffected


async def test_a_block_that_ends_in_time_is_left_alone_and_not_cancelled_later() -> None:
    with Deadline(0.05) as d:
        await asyncio.sleep(0.001)
    assert not d.expired()
    await asyncio.sleep(0.1)  # the deadline's moment passes: nothing may cancel this task now


async def test_a_cancel_from_outside_stays_a_cancel() -> None:
    async def victim() -> None:
        with Deadline(5):
            await asyncio.sleep(5)

    task = asyncio.create_task(victim())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_nested_deadlines_report_which_one_expired() -> None:
    with pytest.raises(TimeoutError):
        with Deadline(5) as outer:
            with Deadline(0.02) as inner:
                await asyncio.sleep(5)
    assert inner.expired() and not outer.expired()


async def test_deadlines_in_any_order_each_expire_at_their_own_time() -> None:
    # Later deadlines first, then earlier ones: the shared timer must be moved forward for those.
    outcome: dict[str, str] = {}
    start = time.monotonic()

    async def run(name: str, limit: float, work: float) -> None:
        try:
            with Deadline(limit):
                await asyncio.sleep(work)
            outcome[name] = "done"
        except TimeoutError:
            late = time.monotonic() - start - limit
            outcome[name] = "timed out" if late < 0.08 else f"timed out {late:.2f}s late"

    await asyncio.gather(
        run("late-done", 0.5, 0.01),
        run("late-timeout", 0.2, 1),
        run("early-timeout", 0.02, 1),
        run("early-done", 0.1, 0.01),
        run("earliest-timeout", 0.01, 1),
    )
    assert outcome == {
        "late-done": "done",
        "late-timeout": "timed out",
        "early-timeout": "timed out",
        "early-done": "done",
        "earliest-timeout": "timed out",
    }


async def test_many_finished_blocks_do_not_keep_a_pending_one_from_expiring() -> None:
    # Thousands of blocks that ended (their entries compacted away), around one that must still expire.
    async def waiter() -> bool:
        try:
            with Deadline(0.1):
                await asyncio.sleep(5)
        except TimeoutError:
            return True
        return False

    pending = asyncio.create_task(waiter())
    for _ in range(5000):
        with Deadline(60):
            await asyncio.sleep(0)
    assert await asyncio.wait_for(pending, 2)


async def test_outside_a_task_it_says_so() -> None:
    failure: list[str] = []

    def enter() -> None:  # a plain callback: no task is running
        try:
            with Deadline(1):
                pass
        except RuntimeError as exc:
            failure.append(str(exc))

    asyncio.get_running_loop().call_soon(enter)
    await asyncio.sleep(0.01)
    assert failure == ["Deadline must be entered inside a task"]
