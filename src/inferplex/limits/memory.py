"""The in-process limit store: the same arithmetic as the Redis scripts, on dicts, for a single replica."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from inferplex.limits import ROUNDING_S, Hold, Quota, Rate, remaining


class MemoryLimits:
    def __init__(self) -> None:
        self._tat: dict[str, float] = {}
        self._holders: dict[str, set[str]] = {}

    def _apply(self, rates: Sequence[Rate], *, force: bool) -> tuple[float, int]:
        now = time.monotonic()
        wait, worst = 0.0, -1
        updates: list[tuple[str, float]] = []
        for i, r in enumerate(rates):
            interval = r.window_s / r.limit
            tat = max(self._tat.get(r.key, now), now)
            check = min(r.amount, r.limit)  # a single request bigger than the bucket passes when it is full
            w = tat + check * interval - r.window_s - now
            if w > wait:
                wait, worst = w, i
            updates.append((r.key, tat + r.amount * interval))
        if wait > ROUNDING_S and not force:
            return wait, worst
        self._tat.update(updates)
        return 0.0, -1

    def _take(self, key: str, limit: int, holder: str) -> bool:
        holders = self._holders.setdefault(key, set())
        if len(holders) >= limit:
            return False
        holders.add(holder)
        return True

    async def try_acquire(self, key: str, limit: int, holder: str) -> bool:
        return self._take(key, limit, holder)

    async def release(self, key: str, holder: str) -> None:
        await self.finish((), [(key, holder)])

    async def admit(self, rates: Sequence[Rate], holds: Sequence[Hold]) -> tuple[float, int, tuple[bool, ...]]:
        wait, worst = self._apply(rates, force=False)
        if wait > 0:
            return wait, worst, tuple(False for _ in holds)
        return wait, worst, tuple([self._take(h.key, h.limit, h.holder) for h in holds])

    async def take(self, rate: Rate) -> Quota:
        wait, _ = self._apply([rate], force=False)
        now = time.monotonic()
        tat = max(self._tat.get(rate.key, now), now)
        return Quota(wait <= 0, remaining(tat, now, rate.limit, rate.window_s), tat - now, wait)

    def finish(self, charges: Sequence[Rate], releases: Sequence[tuple[str, str]]) -> asyncio.Future[None]:
        self._apply([r for r in charges if r.amount > 0], force=True)
        for key, holder in releases:
            holders = self._holders.get(key)
            if holders is not None:
                holders.discard(holder)
                if not holders:
                    del self._holders[key]
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def in_use(self, key: str) -> int:
        return len(self._holders.get(key, ()))

    async def aclose(self) -> None:
        return None
