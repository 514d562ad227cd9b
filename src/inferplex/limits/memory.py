"""The in-process limit store: the same arithmetic as the Redis scripts, on dicts, for a single replica."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from inferplex.limits import ROUNDING_S, Hold, Quota, Rate, Verdict, remaining


class MemoryLimits:
    def __init__(self) -> None:
        self._tat: dict[str, float] = {}
        self._windows: dict[str, dict[int, int]] = {}  # rolling windows: sub-window index -> amount
        self._holders: dict[str, set[str]] = {}

    def _window(self, r: Rate, now: float, force: bool) -> tuple[float, float, int]:
        """(seconds until `r` fits, what the window holds, the sub-window `r` is charged to), the
        sub-windows that left the window dropped on the way."""
        width = r.window_s / r.slots
        cur = int(now // width)
        subs = self._windows.setdefault(r.key, {})
        for idx in [i for i in subs if i <= cur - r.slots]:
            del subs[idx]
        total = sum(subs.values())
        wait = 0.0
        check = min(r.amount, r.limit)  # a single request bigger than the window passes when it is empty
        if not force and total + check > r.limit:
            wait, freed = (cur + r.slots) * width - now, 0
            for idx in sorted(subs):  # room comes back as the oldest sub-windows leave
                freed += subs[idx]
                if total - freed + check <= r.limit:
                    wait = (idx + r.slots) * width - now
                    break
        target = int((now - r.age_s) // width) if force else cur
        if target <= cur - r.slots:  # admitted before the window: output counts now, a refund has nothing left
            target = cur if r.amount > 0 else -1
        return wait, total, target

    def _apply(self, rates: Sequence[Rate], *, force: bool) -> tuple[float, int, float]:
        now = time.monotonic()
        wait, worst, used = 0.0, -1, 0.0
        updates: list[tuple[Rate, float]] = []
        for i, r in enumerate(rates):
            if r.slots:
                w, u, target = self._window(r, now, force)
                updates.append((r, target))
            else:
                interval = r.window_s / r.limit
                tat = max(self._tat.get(r.key, now), now)
                check = min(r.amount, r.limit)  # a single request bigger than the bucket passes when it is full
                w, u = tat + check * interval - r.window_s - now, (tat - now) / interval
                updates.append((r, max(tat + r.amount * interval, now)))  # a refund fills at most to full
            if w > wait:
                wait, worst, used = w, i, u
        if wait > ROUNDING_S and not force:
            return wait, worst, used
        for r, value in updates:
            if not r.slots:
                self._tat[r.key] = value
            elif value >= 0:  # a settlement of a sub-window already gone needs no correction
                subs = self._windows[r.key]
                subs[int(value)] = max(subs.get(int(value), 0) + r.amount, 0)
        return 0.0, -1, 0.0

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

    async def admit(self, rates: Sequence[Rate], holds: Sequence[Hold]) -> Verdict:
        wait, worst, used = self._apply(rates, force=False)
        if wait > 0:
            return Verdict(wait, worst, tuple(False for _ in holds), used)
        return Verdict(wait, worst, tuple([self._take(h.key, h.limit, h.holder) for h in holds]), 0.0)

    async def take(self, rate: Rate) -> Quota:
        wait, _, _ = self._apply([rate], force=False)
        now = time.monotonic()
        tat = max(self._tat.get(rate.key, now), now)
        return Quota(wait <= 0, remaining(tat, now, rate.limit, rate.window_s), tat - now, wait)

    def finish(self, charges: Sequence[Rate], releases: Sequence[tuple[str, str]]) -> asyncio.Future[None]:
        self._apply([r for r in charges if r.amount != 0], force=True)
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
