"""The limit store of a worker among several (`inferplex serve --workers N`): every decision is made by the
coordinator (coordinator.py), so rates, rolling windows and concurrency slots are global on the machine.

A coordinator that cannot be reached (refused at once, or silent for `link.TIMEOUT_S`) follows
`storage.redis_failure`, as Redis does (limits/redis.py): `open` admits with nothing enforced, `closed`
refuses with a 503. The worker remembers which slots its running requests hold and declares them again on
every new connection, so a restarted coordinator knows them: concurrency limits survive its restart; rate
counts do not (they start afresh, so a key may get up to one more window's worth in the window the
coordinator died in).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from inferplex.batching import StoreObserver
from inferplex.limits import Hold, LimitsUnavailable, Quota, Rate, Verdict
from inferplex.shared_state.link import TIMEOUT_S, Link, Op

log = logging.getLogger("inferplex.shared_state")

Slot = tuple[str, str]


class SharedLimits:
    def __init__(self, path: str, *, fail_open: bool = True, timeout_s: float = TIMEOUT_S) -> None:
        self.fail_open = fail_open
        self.held: set[Slot] = set()  # slots this worker's running requests hold
        self.link = Link(path, timeout_s=timeout_s, hello=self._hello)

    def _hello(self) -> list[Op]:
        return [["h", [list(slot) for slot in self.held]]] if self.held else []

    def _failed(self, what: str, exc: Exception) -> None:
        if not self.fail_open:
            raise LimitsUnavailable(f"shared state coordinator unavailable during {what}: {exc}") from exc

    async def try_acquire(self, key: str, limit: int, holder: str) -> bool:
        try:
            taken = bool(await self.link.call(["t", key, limit, holder]))
        except asyncio.CancelledError:
            self.finish((), [(key, holder)])  # it may have been taken: give it back after it
            raise
        except Exception as exc:
            self._failed("acquire", exc)
            taken = True  # failing open: held as if taken, so a new coordinator hears of it
        if taken:
            self.held.add((key, holder))
        return taken

    async def release(self, key: str, holder: str) -> None:
        await self.finish((), [(key, holder)])

    async def admit(self, rates: Sequence[Rate], holds: Sequence[Hold]) -> Verdict:
        if not rates and not holds:
            return Verdict(0.0, -1, (), 0.0)
        op: Op = ["a", [tuple(r) for r in rates], [tuple(h) for h in holds]]
        try:
            wait, worst, taken, used = await self.link.call(op)
        except asyncio.CancelledError:
            if holds:  # applied anyway if it was in flight: give back what it took, after it (same queue)
                self.finish((), [(h.key, h.holder) for h in holds])
            raise
        except Exception as exc:
            self._failed("admit", exc)
            self.held.update((h.key, h.holder) for h in holds)
            return Verdict(0.0, -1, tuple(True for _ in holds), 0.0)  # failing open: nothing is enforced
        if wait > 0:
            return Verdict(wait, worst, tuple(False for _ in holds), used)
        for hold, took in zip(holds, taken, strict=True):
            if took:
                self.held.add((hold.key, hold.holder))
        return Verdict(0.0, -1, tuple(taken), 0.0)

    def finish(self, charges: Sequence[Rate], releases: Sequence[Slot]) -> asyncio.Future[None]:
        """Charges and releases, sent with the next round trip. A release is forgotten here at once: if the
        coordinator cannot be told, the connection is gone, and with it the slot (coordinator.py)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        charges = [r for r in charges if r.amount != 0]
        if not charges and not releases:
            done.set_result(None)
            return done
        for slot in releases:
            self.held.discard(slot)
        op: Op = ["f", [tuple(r) for r in charges], [list(s) for s in releases]]
        self.link.post(op, lambda _, error: _finished(done, error))
        return done

    async def take(self, rate: Rate) -> Quota:
        try:
            admitted, left, reset_s, retry_s = await self.link.call(["q", tuple(rate)])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failed("take", exc)
            return Quota(True, rate.limit - 1, 0.0, 0.0)  # failing open: the bucket is as if full
        return Quota(bool(admitted), int(left), float(reset_s), float(retry_s))

    async def in_use(self, key: str) -> int:
        result: Any = await self.link.call(["u", key])
        return int(result)

    def watch(self, observe: StoreObserver | None) -> None:
        """Report each round trip to the coordinator (every request's admit and finish) as `limits`."""
        self.link.watch("limits", observe)

    async def aclose(self) -> None:
        await self.link.aclose()


def _finished(done: asyncio.Future[None], error: BaseException | None) -> None:
    """A finish the coordinator did not take: its output tokens are not counted (a limit fails open; money
    is the ledger's, not this store's)."""
    if error is not None and not isinstance(error, asyncio.CancelledError):
        log.warning("shared state coordinator unavailable during finish: %s: %s", type(error).__name__, error)
    if not done.done():
        done.set_result(None)
