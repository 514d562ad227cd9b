"""The usage log: one row per request, written off the request path in batches.

`record` only appends to an in-memory queue; a background task drains it into the database in batches, so
a slow database never slows a request. `aclose` (called from the app's shutdown) drains what is left, so a
graceful shutdown loses no rows. If the queue is full, the oldest rows are kept and new ones are dropped
with a warning rather than growing memory without bound; a batch leaves the queue every `interval_s`, so the
queue fills only if the writer itself is stuck.

A batch the database refuses is written again row by row (`append_each`), so one bad row costs one row. A
batch that cannot reach the database (or stays silent past `storage.timeout_s`) goes to the spool on local
disk (store/spool.py), written once the database is back (store/recovery.py), also after a restart. Without
a spool (tests of the log alone), a failed batch is retried twice, then dropped with an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from inferplex.store.backend import unreachable
from inferplex.store.spool import USAGE, Spool

log = logging.getLogger("inferplex.usage")


class UsageSink(Protocol):
    async def append(self, rows: list[dict[str, Any]]) -> None: ...

    async def append_each(self, rows: list[dict[str, Any]]) -> int: ...


class UsageLog:
    def __init__(
        self,
        sink: UsageSink,
        *,
        batch_size: int = 500,
        interval_s: float = 0.2,
        max_queued: int = 100_000,
        spool: Spool | None = None,
    ):
        self.sink = sink
        self.spool = spool
        self.batch_size = batch_size
        self.interval_s = interval_s
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(max_queued)
        self._task: asyncio.Task[None] | None = None
        self._pending: list[dict[str, Any]] = []  # taken from the queue, not yet written
        self._lock = asyncio.Lock()
        self.dropped = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="usage-log-flusher")

    def record(self, row: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait(row)
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("usage log queue full: dropped the row for request %s", row.get("request_id"))

    async def _run(self) -> None:
        while True:
            row = await self._queue.get()
            # Only now look up the list: a flush while we waited replaced it, and appending to the list it
            # took (`self._pending.append(await ...)` binds it first) would lose the row.
            self._pending.append(row)
            await asyncio.sleep(self.interval_s)  # let a batch gather
            # shielded: a shutdown cancelling this task never interrupts a write; aclose then waits for it.
            await asyncio.shield(self.flush())

    async def flush(self) -> None:
        """Write everything queued so far (also called by readers that want their own rows visible)."""
        async with self._lock:
            rows, self._pending = self._pending, []
            while not self._queue.empty():
                rows.append(self._queue.get_nowait())
            for i in range(0, len(rows), self.batch_size):
                await self._write(rows[i : i + self.batch_size])

    async def _write(self, rows: list[dict[str, Any]]) -> None:
        if self.spool is None:
            return await self._retried(rows)
        try:
            await self.sink.append(rows)
            return
        except Exception as exc:
            if unreachable(exc) is not None:
                return self._keep(rows, exc)
            log.warning("a batch of %d usage rows was refused (%s); writing them one by one", len(rows), exc)
        try:
            await self.sink.append_each(rows)
        except Exception as exc:  # the database went away meanwhile: the rest rows already written are skipped later
            self._keep(rows, exc)

    def _keep(self, rows: list[dict[str, Any]], error: BaseException) -> None:
        assert self.spool is not None
        try:
            self.spool.put(USAGE, rows)
        except Exception:
            log.exception("could not keep %d usage rows in the spool; they are lost", len(rows))
            return
        log.warning("could not write %d usage rows (%s); kept in the spool", len(rows), type(error).__name__)

    async def _retried(self, rows: list[dict[str, Any]]) -> None:
        for attempt in range(3):
            try:
                await self.sink.append(rows)
                return
            except Exception:
                if attempt == 2:
                    log.exception("could not write %d usage rows; they are lost", len(rows))
                    return
                log.warning("could not write %d usage rows; retrying", len(rows), exc_info=True)
                await asyncio.sleep(0.1 * (attempt + 1))

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()
