"""The concurrency slots one replica holds in Redis: kept alive while their requests run, and given back
even when Redis could not be told at the time.

A slot is a member of a holders zset scored by its lease's expiry, so a crashed replica's slots come back by
themselves. That only works if a lease is short, and a short lease only works if it is renewed while the
request runs: `Leases` keeps the set of slots this replica holds, and one task per replica extends all of
them in one script call every third of a lease (not a task or a call per request).

A release that could not be sent (Redis reset, partitioned, or timing out) is kept and sent once Redis
answers again: at the next call that succeeds, or by the same task, which retries every `retry_s` while
releases are pending. Holders are request ids, unique per request, so a release sent twice, or for a slot
that was never taken (an admission whose reply was lost), removes nothing but that request's own entry:
it never frees another request's slot. A pending release is dropped once a whole lease has passed since it
was pended: that slot's lease, no longer renewed, has expired by then and Redis has freed it already, so the
pending set stays bounded by what one lease's worth of traffic can leave behind.

Renewal stops for a slot held longer than any request may run (`max_hold_s`: the longest deadline plus the
longest queue wait): a slot that was never given back (a bug, a path that forgot it) then expires within a
lease, as it would have without renewal, instead of being kept alive for as long as the replica runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from inferplex.limits import Hold
from inferplex.listening import stop

log = logging.getLogger("inferplex.limits")

Slot = tuple[str, str]  # (key, holder), as the limit store names them: the key without the store's prefix

# Sends one call: extend the lease of every slot in the first list, release every slot in the second.
Send = Callable[[Sequence[Slot], Sequence[Slot]], Awaitable[None]]

_MAX_CALL = 1000  # slots per script call, so one call never holds Redis for long


class Leases:
    def __init__(self, send: Send, lease_s: float, *, max_hold_s: float | None = None, retry_s: float = 1.0) -> None:
        self._send = send
        self.lease_s = lease_s
        self.renew_s = lease_s / 3  # two renewals may fail before a running request's lease runs out
        self.retry_s = min(retry_s, self.renew_s)
        self.max_hold_s = max_hold_s
        # slot -> when it was taken, at most one keeper round early (`_now`, set by the keeper each round:
        # reading the clock per request would cost more than the rest of `took`)
        self.held: dict[Slot, float] = {}
        self._now = time.monotonic()
        self.pending: dict[Slot, float] = {}  # slot -> when its release was pended (monotonic)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def took(self, slots: Sequence[Slot]) -> None:
        """These slots are (or may be) held in Redis by requests still running here: renew them."""
        if self._task is None:
            self._start()  # (first, so that `_now` is current)
        now = self._now
        for slot in slots:
            self.held[slot] = now

    def took_holds(self, holds: Sequence[Hold], taken: Sequence[bool]) -> None:
        """`took` for the holds an admission took (`taken[i]` for `holds[i]`). It runs for every admission
        with a slot, so it builds no list, and indexes rather than zips (a zip cost twice the rest here)."""
        if self._task is None:
            self._start()
        now, held = self._now, self.held
        for i in range(len(holds)):
            if taken[i]:
                hold = holds[i]
                held[hold.key, hold.holder] = now

    def giving_back(self, slots: Sequence[Slot]) -> None:
        """Their release is on its way: no longer renewed (renewing never re-creates a removed slot)."""
        held = self.held
        for slot in slots:
            held.pop(slot, None)

    def release_later(self, slots: Sequence[Slot]) -> None:
        """Their release could not be sent (or they may have been taken by a call whose reply was lost):
        send it once Redis answers."""
        now = time.monotonic()
        for slot in slots:
            self.held.pop(slot, None)
            self.pending[slot] = now
        if self._task is None:
            self._start()
        elif self._wake is not None:
            self._wake.set()

    def answered(self) -> None:
        """Redis just answered a call: if releases are pending, send them now rather than at the next retry."""
        if self.pending and self._wake is not None:
            self._wake.set()

    def _start(self) -> None:
        self._now = time.monotonic()
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._keep(), name="limits-leases")

    async def _keep(self) -> None:
        assert self._wake is not None
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.retry_s if self.pending else self.renew_s):
                    await self._wake.wait()
            self._wake.clear()
            self._now = time.monotonic()
            await self.once()

    async def once(self) -> bool:
        """One round: renew every slot held, send every pending release. True if Redis took all of it."""
        now = time.monotonic()
        for slot in [s for s, at in self.pending.items() if at < now - self.lease_s]:
            del self.pending[slot]  # its lease has run out in Redis already
        if self.max_hold_s is not None:
            stale = [s for s, at in self.held.items() if at < now - self.max_hold_s - self.renew_s]
            if stale:
                log.warning("%d concurrency slots held longer than any request runs: left to expire", len(stale))
                for slot in stale:
                    del self.held[slot]
        sending = list(self.pending)
        renewing = list(self.held)
        try:
            for i in range(0, max(len(renewing), len(sending)), _MAX_CALL):
                await self._send(renewing[i : i + _MAX_CALL], sending[i : i + _MAX_CALL])
        except Exception as exc:  # any failure of the client: keep everything, try again later
            if not self._failing:
                log.warning(
                    "redis limit store unavailable for lease renewal (%s: %s); %d slot releases kept to send later",
                    type(exc).__name__,
                    exc,
                    len(self.pending),
                )
            self._failing = True
            return False
        for slot in sending:
            self.pending.pop(slot, None)
        if self._failing and sending:
            log.info("redis limit store answers again: %d pending slot releases sent", len(sending))
        self._failing = False
        return True

    async def aclose(self) -> None:
        """Stop renewing; one last try to send what is pending (shutdown must not leak slots either)."""
        if self._task is not None:
            await stop(self._task)
            self._task = None
        if self.pending:
            await self.once()
