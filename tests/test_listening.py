"""Stopping a background task that talks to a store: shutdown must not wait for ever on it."""

from __future__ import annotations

import asyncio

from inferplex.listening import stop


async def test_stop_ends_a_task_whose_first_cancellation_was_lost() -> None:
    """A client racing its own read timeout against a cancellation can lose it (redis-py's pub/sub under
    Python 3.11), and the task reads on: cancelling once and awaiting it then waits for ever."""

    async def listener() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass  # lost, as inside such a client
        await asyncio.sleep(10)

    task = asyncio.create_task(listener())
    await asyncio.sleep(0)
    await asyncio.wait_for(stop(task), 2)
    assert task.cancelled()


async def test_stop_reports_nothing_for_a_task_that_already_ended() -> None:
    async def ended() -> None:
        return None

    task = asyncio.create_task(ended())
    await task
    await stop(task)
