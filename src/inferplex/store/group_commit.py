"""SQLite writes with group commit: every write that queued while the previous commit ran shares one commit.

Each write is one function, run on the single writer thread inside its own SAVEPOINT of a shared `BEGIN
IMMEDIATE` transaction: a function that raises rolls back only its own changes, and its caller gets the
exception; the others are committed together, and each caller hears of its result only once that COMMIT
has returned. Under load a commit (the WAL write, and now and then a checkpoint) was the largest CPU cost of
a reservation and a settlement (docs/benchmarks.md); batching pays it once per batch. With no concurrency a
batch is one write, exactly as before.

A write is a function of a SQLAlchemy `Connection` (the admin API's statements), or, for the writes every
request makes (the ledger's moves, the usage rows), of the `sqlite3` connection itself (`raw`): those run
in a transaction of their own on a connection kept open for them, without SQLAlchemy's transaction and
savepoint machinery, which cost about 220 µs of CPU per batch, several times the batch's own statements.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import Connection

T = TypeVar("T")
log = logging.getLogger("inferplex.store")

_Outcome = tuple[Any, BaseException | None]


class _Job(NamedTuple):
    fn: Callable[[Any], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    raw: bool


def _resolve(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


class GroupCommitWriter:
    def __init__(self, engine: Engine, pool: ThreadPoolExecutor) -> None:
        self._engine = engine
        self._pool = pool
        self._lock = threading.Lock()
        self._queued: list[_Job] = []
        self._drain_scheduled = False
        self._raw: Any = None  # the pooled connection the raw writes use, opened on the writer thread

    async def write(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` atomically; returns once it is committed (or raises what it raised, nothing written)."""
        return await self._submit(fn, raw=False)

    async def write_raw(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`write` for a function of the sqlite3 connection itself."""
        return await self._submit(fn, raw=True)

    async def _submit(self, fn: Callable[[Any], T], *, raw: bool) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._queued.append(_Job(fn, future, loop, raw))
            schedule = not self._drain_scheduled
            self._drain_scheduled = True
        if schedule:
            self._pool.submit(self._drain)
        return await future

    def _drain(self) -> None:
        """On the writer thread: everything queued so far, in one transaction (one per kind of write)."""
        with self._lock:
            batch, self._queued = self._queued, []
            self._drain_scheduled = False
        outcomes: dict[int, _Outcome] = {}
        for raw, run in ((True, self._run_raw), (False, self._run_sqlalchemy)):
            jobs = [(i, job.fn) for i, job in enumerate(batch) if job.raw is raw]
            if jobs:
                for (i, _), outcome in zip(jobs, run([fn for _, fn in jobs]), strict=True):
                    outcomes[i] = outcome
        for i, job in enumerate(batch):
            job.loop.call_soon_threadsafe(_resolve, job.future, *outcomes[i])

    def _run_sqlalchemy(self, fns: list[Callable[[Connection], Any]]) -> list[_Outcome]:
        outcomes: list[_Outcome] = []
        try:
            with self._engine.begin() as conn:
                for fn in fns:
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
            log.warning("a batch of %d writes failed to commit: %s", len(fns), exc)
            outcomes = [(None, exc) for _ in fns]
        return outcomes

    def _run_raw(self, fns: list[Callable[[sqlite3.Connection], Any]]) -> list[_Outcome]:
        outcomes: list[_Outcome] = []
        try:
            if self._raw is None:
                self._raw = self._engine.raw_connection()  # the engine's pragmas; autocommit (we BEGIN)
            conn: sqlite3.Connection = self._raw.driver_connection
            conn.execute("BEGIN IMMEDIATE")
            try:
                for fn in fns:
                    conn.execute("SAVEPOINT write")
                    try:
                        value = fn(conn)
                    except Exception as exc:
                        conn.execute("ROLLBACK TO write")
                        outcomes.append((None, exc))
                    else:
                        outcomes.append((value, None))
                    conn.execute("RELEASE write")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except Exception as exc:  # BEGIN or COMMIT failed: none of the batch was written
            log.warning("a batch of %d writes failed to commit: %s", len(fns), exc)
            outcomes = [(None, exc) for _ in fns]
        return outcomes

    def close(self) -> None:
        """On the writer thread: give back the raw writes' connection."""
        if self._raw is not None:
            self._raw.close()
            self._raw = None
