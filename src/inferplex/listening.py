"""Keeping a listening connection (PostgreSQL's LISTEN, Redis's SUBSCRIBE) up for as long as the app runs.

Both caches that stay valid by hearing of changes (store/key_cache.py, routing/cooldown.py) need the same
loop: hold a connection until it is lost, say so at once (the cache must stop trusting itself), and try
again after a short wait that grows while attempts keep failing. `stop` ends such a task for certain.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("inferplex")


async def keep_listening(
    listen: Callable[[Callable[[], None]], Awaitable[None]],
    lost: Callable[[], None],
    *,
    what: str,
    max_delay_s: float,
) -> None:
    """Run `listen` again and again until cancelled. Each run holds one connection until it is lost (by
    returning or raising) and calls the function it is handed once the connection is up; `lost` runs after
    every run. The next attempt waits 0.1 s, doubling up to `max_delay_s` while attempts fail before they
    are up."""
    delay = 0.1

    def up() -> None:
        nonlocal delay
        delay = 0.1

    while True:
        try:
            await listen(up)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s unavailable: %s", what, exc)
        finally:
            lost()
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay_s)


async def stop(task: asyncio.Task[None]) -> None:
    """Cancel a background task that talks to a store (a `keep_listening` loop, a lease keeper) and wait
    until it has ended. A cancellation can be lost inside a client that races its own read timeout against
    it (seen with redis-py's pub/sub reading under `asyncio.timeout` on Python 3.11: the listener went on
    reading, and shutdown waited for ever), so the task is cancelled again until it ends."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=0.1)
    if not task.cancelled() and task.exception() is not None:
        log.warning("%s ended with an error: %s", task.get_name(), task.exception())
