"""Rate and concurrency limits behind one small interface, in-process (memory.py) or shared (redis.py).

A rate is a token bucket in GCRA form (one number per key: the "theoretical arrival time"), so a limit of
N per minute admits a burst of N and then one every 60/N seconds, exactly, with no window edges. A
concurrency limit is a set of holders with leases. `slots.FairSlots` adds the FIFO wait on top.
"""

from __future__ import annotations

from typing import Protocol


class LimitsUnavailable(Exception):
    """The shared limit store cannot be reached and the configured policy is to fail closed."""


class LimitStore(Protocol):
    async def take(self, key: str, amount: int, limit: int, window_s: float) -> float:
        """Admit `amount` against `limit` per `window_s`: 0.0 if admitted, else seconds until it would be."""
        ...

    async def charge(self, key: str, amount: int, limit: int, window_s: float) -> None:
        """Charge `amount` unconditionally (it was already used): may push the bucket into debt."""
        ...

    async def try_acquire(self, key: str, limit: int, holder: str) -> bool:
        """Take one of `limit` concurrency slots for `holder`, if one is free."""
        ...

    async def release(self, key: str, holder: str) -> None: ...

    async def in_use(self, key: str) -> int: ...

    async def aclose(self) -> None: ...
