"""Waiting for a concurrency slot in arrival order, for at most a configured time.

Within a replica, waiters for a key form a FIFO queue and only its head asks the store for a slot, so a
newcomer never overtakes someone already waiting. The head is woken by a local release at once, and
otherwise re-asks the store every `poll_s` (slots freed by another replica are only seen that way).

Operators see the queue (observe/metrics.py): `waiting` at each scrape, and `on_wait` told of each wait that
queued (the seconds, and whether a slot came), so the uncontended path reports nothing and costs nothing.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import time
from collections.abc import Callable

from inferplex.limits import LimitStore


class _Waiter:
    __slots__ = ("event", "seq")

    def __init__(self, seq: int) -> None:
        self.event = asyncio.Event()
        self.seq = seq


class FairSlots:
    def __init__(self, store: LimitStore, poll_s: float = 0.01) -> None:
        self.store = store
        self.poll_s = poll_s
        self._queues: dict[str, list[_Waiter]] = {}
        self._arrivals = itertools.count()
        # Told of each wait that queued: (seconds waited, whether a slot came). Set by the metrics sink.
        self.on_wait: Callable[[float, bool], None] | None = None

    @property
    def waiting(self) -> int:
        """Requests on this replica queued for a slot, over every key."""
        return sum(len(q) for q in self._queues.values())

    async def acquire(self, key: str, limit: int, holder: str, max_wait_s: float) -> float | None:
        """Seconds waited once a slot is held, or None if none came free within `max_wait_s`."""
        me = _Waiter(next(self._arrivals))  # numbered on arrival, before any await
        start = time.monotonic()
        if not self._queues.get(key) and await self.store.try_acquire(key, limit, holder):
            return 0.0  # nobody waiting and a slot free: the common, uncontended case costs one call
        # Queue in arrival order, even if the store answered our first try after a later arrival's.
        queue = self._queues.setdefault(key, [])
        bisect.insort(queue, me, key=lambda w: w.seq)
        try:
            while True:
                if queue[0] is me and await self.store.try_acquire(key, limit, holder):
                    return self._waited(time.monotonic() - start, True)
                remaining = start + max_wait_s - time.monotonic()
                if remaining <= 0:
                    self._waited(max_wait_s, False)
                    return None
                me.event.clear()
                try:
                    await asyncio.wait_for(me.event.wait(), min(self.poll_s, remaining))
                except TimeoutError:
                    pass
        finally:
            was_head = queue[0] is me
            queue.remove(me)
            if not queue:
                self._queues.pop(key, None)
            elif was_head:
                queue[0].event.set()

    def _waited(self, seconds: float, acquired: bool) -> float:
        if self.on_wait is not None:
            self.on_wait(seconds, acquired)
        return seconds

    def queued(self, key: str) -> bool:
        """Whether requests on this replica wait for `key`: a newcomer must then queue behind them."""
        return bool(self._queues.get(key))

    async def release(self, key: str, holder: str) -> None:
        await self.store.release(key, holder)
        self.released(key)

    def released(self, key: str) -> None:
        """A slot of `key` was given back (by `release` or the store directly): wake the head waiter."""
        queue = self._queues.get(key)
        if queue:
            queue[0].event.set()
