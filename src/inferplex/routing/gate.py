"""Per-deployment capacity: a concurrency limit where `flex` yields to `default`, and RPM/TPM windows.

When a deployment is saturated, waiting requests queue by tier first and arrival second, so a `default`
request that arrives later is served before a `flex` one that has been waiting: flex is the cheap tier that
runs on spare capacity. Capacity is counted per replica (each replica enforces its share of the limit).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable

TIER_RANK = {"default": 0, "flex": 1}
WINDOW = 60.0


class PriorityGate:
    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.in_use = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    @property
    def waiting(self) -> int:
        return sum(1 for *_, f in self._waiters if not f.done())

    @property
    def saturated(self) -> bool:
        return self.limit is not None and (self.in_use >= self.limit or self.waiting > 0)

    def try_acquire(self) -> bool:
        """Take a slot if one is free now, without queueing (the common, unsaturated case)."""
        if self.saturated:
            return False
        self.in_use += 1
        return True

    async def acquire(self, tier: str, within: float | None) -> None:
        """Take a slot, queueing by tier; raises TimeoutError if none frees up `within` seconds."""
        if not self.saturated:
            self.in_use += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (TIER_RANK.get(tier, 0), next(self._seq), future))
        try:
            async with asyncio.timeout(within):
                await future
        except BaseException:
            if future.done() and not future.cancelled():
                self.release()  # the slot was handed over just as we gave up: pass it on
            else:
                future.cancel()
            raise

    def release(self) -> None:
        self.in_use -= 1
        while self._waiters:
            *_, future = heapq.heappop(self._waiters)
            if not future.done():
                self.in_use += 1
                future.set_result(None)
                return


class RateWindow:
    """Requests and tokens seen in the last minute, against optional RPM and TPM limits."""

    def __init__(self, rpm: int | None, tpm: int | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.rpm, self.tpm = rpm, tpm
        self._clock = clock
        self._requests: deque[float] = deque()
        self._tokens: deque[tuple[float, int]] = deque()
        self._token_sum = 0

    def _trim(self, now: float) -> None:
        while self._requests and self._requests[0] <= now - WINDOW:
            self._requests.popleft()
        while self._tokens and self._tokens[0][0] <= now - WINDOW:
            self._token_sum -= self._tokens.popleft()[1]

    def full(self) -> float | None:
        """Seconds until there is room again, or None when there is room now."""
        now = self._clock()
        self._trim(now)
        if self.rpm is not None and len(self._requests) >= self.rpm:
            return self._requests[0] + WINDOW - now
        if self.tpm is not None and self._token_sum >= self.tpm:
            return self._tokens[0][0] + WINDOW - now
        return None

    def used(self) -> tuple[int, int]:
        """(requests, tokens) counted in the last minute: only those a limit is set for are counted."""
        self._trim(self._clock())
        return len(self._requests), self._token_sum

    def note_request(self) -> None:
        if self.rpm is not None:
            self._requests.append(self._clock())

    def note_tokens(self, tokens: int) -> None:
        if self.tpm is not None and tokens > 0:
            self._tokens.append((self._clock(), tokens))
            self._token_sum += tokens
