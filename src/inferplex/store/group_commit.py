"""SQLite writes with group commit: every write that queued while the previous commit ran shares one commit.

Each write is one function of a `Connection`, run on the single writer thread inside its own SAVEPOINT of a
shared `BEGIN IMMEDIATE` transaction: a function that raises rolls back only its own changes, and its caller
gets the exception; the others are committed together, and each caller hears of its result only once that
COMMIT has returned. Under load a commit (the WAL write, and now and then a checkpoint) was the largest
CPU cost of a reservation and a settlement (docs/benchmarks.md); batching pays it once per batch. With no
concurrency a batch is one write, exactly as before.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import Connection

T = TypeVar("T")
log = logging.getLogger("inferplex.store")

_Job = tuple[Callable[[Connection], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


def _resolve(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


class GroupCommitWriter:
    def __init__(self, engine: Engine, thread: ThreadPoolExecutor) -> None:
        self._engine = engine
        self._thread = thread
        self._lock = threading.Lock()
        self._queued: list[_Job] = []
        self._drain_scheduled = False

    async def write(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` atomically; returns once it is committed (or raises what it raised, nothing written)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._queued.append((fn, future, loop))
            schedule = not self._drain_scheduled
            self._drain_scheduled = True
        if schedule:
            self._thread.submit(self._drain)
        return await future

    def _drain(self) -> None:
        """On the writer thread: everything queued so far, in one transaction."""
        with self._lock:
            batch, self._queued = self._queued, []
            self._drain_scheduled = False
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            with self._engine.begin() as conn:
                for fn, _, _ in batch:
                    savepoint = conn.begin_nested()
                    try:
                        value = fn(conn)
                    except Exception as exc:
                        savepoint.rollback()
                        outcomes.append((None, exc))
                    else:
                        savepoint.commit()
                        outcomes.append((value, None))
        except Exception as exc:  # BEGIN or COMMIT failed: none of the batch was written
            log.warning("a batch of %d writes failed to commit: %s", len(batch), exc)
            outcomes = [(None, exc) for _ in batch]
        for (_, future, loop), (value, error) in zip(batch, outcomes, strict=True):
            loop.call_soon_threadsafe(_resolve, future, value, error)
