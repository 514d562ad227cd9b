"""Rate and concurrency limits behind one small interface, in-process (memory.py) or shared (redis.py).

A rate is a token bucket in GCRA form (one number per key: the "theoretical arrival time"), so a limit of
N per minute admits a burst of N and then one every 60/N seconds, exactly, with no window edges (`rpm`,
`tpm`, InferExchange's per-route limits). A rate with `slots` is a rolling window instead (Inferada's rules):
what was taken in the last `window_s` seconds, kept in `slots` sub-windows, never more than `limit` in any
window; what a request took comes back when its sub-window leaves the window, so a limit of N per day is N
in any 24 hours (a bucket would admit N more over the day as it refills). A charge is counted from the start
of its sub-window, so room comes back up to one sub-window (1/slots of the window) late, never early. A
concurrency limit is a set of holders with leases. `slots.FairSlots` adds the FIFO wait on top.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import NamedTuple, Protocol

# A wait this short is the rounding of the bucket's floating-point arithmetic, not a limit: a request that
# exactly fills its bucket (a limit of 1 per minute, a prompt as large as the tpm) computes a wait of
# (now + window) - window - now, which is a few ulps either side of zero. One µs is also the resolution of
# Redis' clock.
ROUNDING_S = 1e-6


class Rate(NamedTuple):
    """`amount` against a bucket of `limit` per `window_s` seconds, stored under `key`."""

    key: str
    amount: int
    limit: int
    window_s: float
    slots: int = 0  # 0: a GCRA bucket; else a rolling window of this many sub-windows
    # A settlement's charge to a rolling window: seconds since the request was admitted, so a correction
    # lands in the sub-window its admission charged (and leaves the window with it).
    age_s: float = 0.0


class Verdict(NamedTuple):
    """What `LimitStore.admit` answers: `(0.0, -1, taken, 0.0)` when every rate admitted, else the seconds
    until all would, the index of the rate that waits longest and what that rate already holds."""

    wait: float
    worst: int
    taken: tuple[bool, ...]
    used: float


class Hold(NamedTuple):
    """One of `limit` concurrency slots under `key`, wanted by `holder`."""

    key: str
    limit: int
    holder: str


class Quota(NamedTuple):
    """What a bucket says after `LimitStore.take`, for headers a caller plans by (X-RateLimit-*): whether the
    request was admitted, how many more the bucket would admit at once, seconds until it is full again, and
    seconds until this request would have been admitted (0 when it was)."""

    admitted: bool
    remaining: int
    reset_s: float
    retry_s: float


def remaining(tat: float, now: float, limit: int, window_s: float) -> int:
    """How many more requests of one a GCRA bucket at `tat` admits at `now` (the ulps of ROUNDING_S kept)."""
    interval = window_s / limit
    return max(min(int((now + window_s - tat) / interval + ROUNDING_S), limit), 0)


class LimitsUnavailable(Exception):
    """The shared limit store cannot be reached and the configured policy is to fail closed."""


class LimitStore(Protocol):
    async def try_acquire(self, key: str, limit: int, holder: str) -> bool:
        """Take one of `limit` concurrency slots for `holder`, if one is free."""
        ...

    async def release(self, key: str, holder: str) -> None: ...

    async def admit(self, rates: Sequence[Rate], holds: Sequence[Hold]) -> Verdict:
        """One round trip for what a request needs before its call. The rates are all or nothing: `(0.0, -1)`
        if every one admits its amount (all are then charged), else the seconds until all would, the index
        of the rate that waits longest and what it holds, and nothing is charged (a request refused by its
        account's limit costs its key nothing). Only when the rates admitted, `try_acquire` each hold;
        returned: which were taken."""
        ...

    def finish(self, charges: Sequence[Rate], releases: Sequence[tuple[str, str]]) -> asyncio.Future[None]:
        """One round trip for what a request gives back: `charges` charged unconditionally (the tokens were
        already used: buckets may go into debt; a negative charge gives back an over-estimate, at most down to
        an empty bucket), then `release` each (key, holder). Queued before it
        returns, so it is applied even if the caller leaves; the future says when it was (or the error)."""
        ...

    async def take(self, rate: Rate) -> Quota:
        """`rate` alone, as `admit` takes it, answered with what the bucket has left: a client told its
        remaining requests and reset time needs them from the same atomic step that counted its request."""
        ...

    async def in_use(self, key: str) -> int: ...

    async def aclose(self) -> None: ...
