"""The in-process limit store: the same arithmetic as the Redis scripts, on dicts, for a single replica."""

from __future__ import annotations

import time


class MemoryLimits:
    def __init__(self) -> None:
        self._tat: dict[str, float] = {}
        self._holders: dict[str, set[str]] = {}

    def _bucket(self, key: str, amount: int, limit: int, window_s: float, *, force: bool) -> float:
        now = time.monotonic()
        interval = window_s / limit
        tat = max(self._tat.get(key, now), now)
        check = min(amount, limit)  # a single request bigger than the bucket is let through when it is full
        allow_at = tat + check * interval - window_s
        if not force and allow_at > now:
            return allow_at - now
        self._tat[key] = tat + amount * interval
        return 0.0

    async def take(self, key: str, amount: int, limit: int, window_s: float) -> float:
        return self._bucket(key, amount, limit, window_s, force=False)

    async def charge(self, key: str, amount: int, limit: int, window_s: float) -> None:
        if amount > 0:
            self._bucket(key, amount, limit, window_s, force=True)

    async def try_acquire(self, key: str, limit: int, holder: str) -> bool:
        holders = self._holders.setdefault(key, set())
        if len(holders) >= limit:
            return False
        holders.add(holder)
        return True

    async def release(self, key: str, holder: str) -> None:
        holders = self._holders.get(key)
        if holders is not None:
            holders.discard(holder)
            if not holders:
                del self._holders[key]

    async def in_use(self, key: str) -> int:
        return len(self._holders.get(key, ()))

    async def aclose(self) -> None:
        return None
