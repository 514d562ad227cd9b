"""What makes the books converge after a store outage: the spool written back, orphaned reservations released.

- Every `flush_s` (storage.spool_flush_s), whatever the spool holds (settlements and releases a failed
  ledger batch left, usage rows a failed batch left, also by an earlier process with the same data
  directory) is written, idempotently (`Ledger.replay`, `UsageStore.append_each`), then forgotten. While
  the database is unreachable each try costs one failed call per `flush_s`.
- Every `sweep_s`, reservations older than `orphan_after_s` with no settlement are released, exactly once
  (`Ledger.orphans`, then `replay`, which skips a request settled meanwhile). They are what a replica that
  died between reserving and settling (or whose disk was lost with its spool) leaves. The bound must
  exceed the longest a request can hold its reservation: its deadline (`routing.max_deadline`), plus the
  time its settlement may sit in a spool; a settlement arriving after its reservation was released is
  skipped, so the request is then not charged. Every replica sweeps; the account's row lock makes it safe.
- Every third of `storage.redis_lease_s`, this replica renews its liveness lease, and releases what a
  replica whose lease lapsed held (store/liveness.py): a replica killed outright costs its reservations
  that lease, not the orphan bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

from inferplex.config import Config
from inferplex.store.backend import unreachable
from inferplex.store.ledger import Ledger
from inferplex.store.liveness import Liveness
from inferplex.store.spool import MOVE, USAGE, Spool
from inferplex.store.usage import UsageStore

log = logging.getLogger("inferplex.store")

_BATCH = 500  # spooled items written per transaction (ledger) or per call (usage)
_WINDOWS = 200  # ledger windows (5,000 ids each) the sweeper may look at per sweep
SPOOL_FILE = "spool.db"  # in server.data_dir
ORPHAN_MARGIN_S = 600.0  # beyond the longest request deadline: a spooled settlement's time to be written


def orphan_bound(config: Config) -> float:
    """`storage.orphan_release_s`, or the longest a reservation may rightly stay open plus `ORPHAN_MARGIN_S`:
    a request's (the largest `routing.max_deadline`, which caps every request's deadline, queueing and stream
    included) or, with video models, a durable job's (`jobs.max_job_s`), so no running job is released
    (and left unbilled) under its feet. Config refuses an `orphan_release_s` below a job's bound."""
    if config.storage.orphan_release_s is not None:
        return config.storage.orphan_release_s
    longest = max((m.routing.max_deadline for m in config.models), default=3600.0)
    if any(m.type == "video" for m in config.models):
        longest = max(longest, config.jobs.max_job_s)
    return longest + ORPHAN_MARGIN_S


class Recovery:
    def __init__(
        self,
        ledger: Ledger,
        usage: UsageStore,
        spool: Spool,
        *,
        flush_s: float,
        orphan_after_s: float,
        sweep_s: float | None = None,
        liveness: Liveness | None = None,
    ) -> None:
        self.ledger = ledger
        self.usage = usage
        self.spool = spool
        self.flush_s = flush_s
        self.orphan_after_s = orphan_after_s
        self.sweep_s = sweep_s if sweep_s is not None else min(60.0, orphan_after_s / 4)
        self.liveness = liveness
        self._swept_to = 0  # ledger ids up to here hold no reservation left to release
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    def configured(cls, config: Config, ledger: Ledger, usage: UsageStore, spool: Spool) -> Recovery:
        liveness = Liveness(ledger.db, ledger, config.storage.redis_lease_s)
        flush_s, orphan_after_s = config.storage.spool_flush_s, orphan_bound(config)
        return cls(ledger, usage, spool, flush_s=flush_s, orphan_after_s=orphan_after_s, liveness=liveness)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self.flush_s, self.flush), name="spool-flusher"),
            loop.create_task(self._every(self.sweep_s, self.sweep), name="orphan-sweeper"),
        ]
        if self.liveness is not None:
            self._tasks.append(loop.create_task(self.liveness.run(), name="replica-liveness"))

    async def _every(self, seconds: float, step: object) -> None:
        assert callable(step)
        while True:
            try:
                await step()
            except Exception as exc:
                if unreachable(exc) is None:
                    log.exception("%s failed", getattr(step, "__name__", "a recovery step"))
                else:
                    log.debug("the database is still unreachable (%s)", type(exc).__name__)
            await asyncio.sleep(seconds)

    async def flush(self) -> None:
        """Write what the spool holds (raises if the database cannot be reached: the rest waits)."""
        while items := self.spool.take(MOVE, _BATCH):
            await self.ledger.replay([item for _, item in items])
            self.spool.forget(MOVE, [i for i, _ in items])
            log.info("wrote %d spooled settlements and releases", len(items))
        while rows := self.spool.take(USAGE, _BATCH):
            written = await self.usage.append_each([row for _, row in rows])
            self.spool.forget(USAGE, [i for i, _ in rows])
            log.info("wrote %d spooled usage rows (%d were already written)", written, len(rows) - written)

    async def sweep(self) -> None:
        """Release the reservations older than `orphan_after_s` that have no settlement."""
        before = time.time() - self.orphan_after_s
        for _ in range(_WINDOWS):
            releases, upto = await self.ledger.orphans(self._swept_to, before)
            if releases:
                await self.ledger.replay(releases)
                log.warning(
                    "released %d reservations with no settlement after %gs (requests %s)",
                    len(releases),
                    self.orphan_after_s,
                    ", ".join(str(r["request_id"]) for r in releases[:10]),
                )
            if upto == self._swept_to:
                return
            self._swept_to = upto

    async def aclose(self) -> None:
        """Stop, after one last try at the spool (what it cannot write stays for the next start)."""
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        try:
            await self.flush()
        except Exception as exc:
            log.warning("%d settlements and %d usage rows stay in the spool for the next start (%s)",
                        self.spool.pending(MOVE), self.spool.pending(USAGE), type(exc).__name__)  # fmt: skip
        if self.liveness is not None:
            await self.liveness.aclose(settled=self.spool.pending(MOVE) == 0)
        self.spool.close()


def spool_path(config: Config) -> Path:
    return Path(config.server.data_dir) / SPOOL_FILE
