"""Adaptive batching: concurrent callers of a shared store share one round trip.

Under load, what a keyed request pays for its store calls is mostly the client's per-call work (asyncpg's
protocol and pool, redis-py's connection pool and parser, an event-loop wake-up per reply), not the
statement or script itself (docs/benchmarks.md). A `Batcher` sends the first call after an idle spell at
once (no timer, so no added latency when the gateway is quiet); calls made while a batch is in flight wait
for it and then go together, in arrival order, as the next one. It is group commit
(store/group_commit.py) one level up: for any store whose batch is one atomic operation (a PostgreSQL
function, a Lua script).

A caller cancelled while its item is in flight cannot take the item back: it is applied anyway. Its result
goes to `orphaned`, so the owner can give back what the item took (a credit reservation, a concurrency
slot) instead of leaking it.

An operator sees each store's round trips through `watch` (observe/metrics.py): one callback per batch with
its duration and whether it failed, so the cost is per round trip, not per item, and nothing while no one
watches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

I = TypeVar("I")  # noqa: E741 - the item type
O = TypeVar("O")  # noqa: E741 - the result type

log = logging.getLogger("inferplex.batching")

# Told of every round trip of a watched store: (store name, seconds, whether it succeeded).
StoreObserver = Callable[[str, float, bool], None]


class _Then(Generic[O]):
    """Stands in for the future of an item nobody awaits (`Batcher.post`): the batch hands the outcome
    straight to `then`, with no future, no done-callback and no pass of the event loop in between."""

    __slots__ = ("_done", "_then")

    def __init__(self, then: Callable[[O | None, BaseException | None], None]) -> None:
        self._then = then
        self._done = False

    def cancelled(self) -> bool:
        return False

    def done(self) -> bool:
        return self._done

    def set_result(self, result: O) -> None:
        self._settle(result, None)

    def set_exception(self, error: BaseException) -> None:
        self._settle(None, error)

    def cancel(self) -> None:  # shutdown cancelled the batch: told as a CancelledError, never applied
        self._settle(None, asyncio.CancelledError())

    def _settle(self, result: O | None, error: BaseException | None) -> None:
        self._done = True
        try:
            self._then(result, error)
        except Exception:
            log.exception("a batched item's callback failed")


class Batcher(Generic[I, O]):
    def __init__(
        self,
        run: Callable[[list[I]], Awaitable[Sequence[O]]],
        *,
        orphaned: Callable[[I, O], None] | None = None,
        max_batch: int = 500,
    ) -> None:
        self._run = run
        self._orphaned = orphaned
        self._max = max_batch
        self._queue: list[tuple[I, asyncio.Future[O] | _Then[O], bool]] = []
        self._drainer: asyncio.Task[None] | None = None
        self._added = 0  # items queued so far, ever
        self._done = 0  # of those, the ones whose batch is over (applied, failed, or skipped)
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []  # `drained` callers: (their `_added`, future)
        self._watch: tuple[str, StoreObserver] | None = None

    def watch(self, store: str, observe: StoreObserver | None) -> None:
        """Report each batch's round trip as `store` to `observe` (None: stop)."""
        self._watch = None if observe is None else (store, observe)

    def enqueue(self, item: I, *, keep: bool = False) -> asyncio.Future[O]:
        """Queue `item` now; its result (or the exception its batch raised) comes in the future. Lets a
        caller queue several items before it waits. Cancelling the future before the batch leaves takes the
        item back, unless `keep` (a settlement must be booked whether or not anyone still waits for it)."""
        future: asyncio.Future[O] = asyncio.get_running_loop().create_future()
        self._add(item, future, keep)
        return future

    def post(self, item: I, then: Callable[[O | None, BaseException | None], None]) -> None:
        """Queue `item` for a caller that does not wait for it (a settlement, a slot given back): once its
        batch is applied, `then(result, None)`, or `then(None, error)` if the batch failed, is called from
        the batch itself. Always kept, as `enqueue(keep=True)`. Saves the future, its done-callback and the
        pass of the event loop that runs it, per item (docs/benchmarks.md)."""
        self._add(item, _Then(then), True)

    def _add(self, item: I, future: asyncio.Future[O] | _Then[O], keep: bool) -> None:
        self._queue.append((item, future, keep))
        self._added += 1
        if self._drainer is None:
            self._drainer = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue[: self._max], self._queue[self._max :]
                try:
                    await self._apply(batch)
                finally:
                    self._done += len(batch)
                    self._wake()
        finally:
            self._drainer = None
            self._done = self._added
            self._wake()

    async def _apply(self, batch: list[tuple[I, asyncio.Future[O] | _Then[O], bool]]) -> None:
        """Run one batch and hand each item its outcome."""
        batch = [entry for entry in batch if entry[2] or not entry[1].cancelled()]  # nobody waits
        if not batch:
            return
        watch = self._watch
        started = time.perf_counter() if watch is not None else 0.0
        try:
            results = await self._run([item for item, _, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"a batch of {len(batch)} got {len(results)} results")
        except asyncio.CancelledError:  # shutdown: nobody will hear of these
            for _, future, _ in batch + self._queue:
                future.cancel()
            self._queue = []
            raise
        except Exception as exc:
            if watch is not None:
                _tell(watch, started, ok=False)
            for _, future, _ in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        if watch is not None:
            _tell(watch, started, ok=True)
        for (item, future, _), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
            elif self._orphaned is not None:
                try:
                    self._orphaned(item, result)
                except Exception:
                    log.exception("could not give back what a cancelled call took")

    def _wake(self) -> None:
        """Tell the `drained` callers whose items are all over (the batch before the next has returned)."""
        if self._waiters:
            done = self._done
            ready = [f for target, f in self._waiters if target <= done]
            self._waiters = [(target, f) for target, f in self._waiters if target > done]
            for f in ready:
                if not f.done():
                    f.set_result(None)

    async def drained(self) -> None:
        """Wait until everything queued so far has been applied (at once if nothing is). Items queued after
        this call are not waited for: under steady load, and while each batch waits out an outage, a reader
        (the admin API) waits for the batches before it, not for the queue to be empty."""
        if self._drainer is None or self._done >= self._added:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((self._added, waiter))
        await asyncio.shield(waiter)

    async def aclose(self) -> None:
        """At shutdown: everything queued is applied (or fails) before this returns; nothing is lost."""
        while self._drainer is not None:
            await asyncio.shield(self._drainer)


def _tell(watch: tuple[str, StoreObserver], started: float, *, ok: bool) -> None:
    try:
        watch[1](watch[0], time.perf_counter() - started, ok)
    except Exception:
        log.exception("a store observer failed")
