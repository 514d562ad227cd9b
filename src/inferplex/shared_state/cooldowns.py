"""Breakers shared by a machine's workers through the coordinator (coordinator.py): a deployment opened by
failures seen on one worker is skipped by all of them.

Almost every check finds its breaker closed, so a worker remembers the breakers it found closed and asks
again only after it hears that one opened: the coordinator tells every connection of each opening, on the
same connection as its replies, so an opening is heard before any reply computed after it. The memory is
kept only while connected (a lost connection forgets it, and so does a new one). A coordinator that cannot
be reached reads as closed breakers, as Redis does (routing/cooldown.py): losing the shared view must not
take the gateway down; a restarted coordinator starts with every breaker closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from inferplex.batching import StoreObserver
from inferplex.config import CooldownConfig
from inferplex.routing.cooldown import BreakerState, Check, Gate, State
from inferplex.shared_state.link import TIMEOUT_S, Link

log = logging.getLogger("inferplex.shared_state")

_GATES = (Gate.CLOSED, Gate.PROBE, Gate.OPEN)
_NAMED: tuple[BreakerState, ...] = ("closed", "half_open", "open")
_CLOSED = Check(Gate.CLOSED)


class SharedCooldowns:
    def __init__(self, path: str, *, timeout_s: float = TIMEOUT_S) -> None:
        self._closed: set[str] = set()  # breakers found closed since the last opening we could have missed
        self._openings = 0  # bumped by every opening heard of, so a check that raced one keeps nothing
        self.link = Link(path, timeout_s=timeout_s, opened=self._opened, lost=self._forget)

    def _opened(self, key: str) -> None:
        self._openings += 1
        self._closed.discard(key)

    def _forget(self) -> None:
        self._openings += 1
        self._closed.clear()

    @staticmethod
    def _shape(policy: CooldownConfig) -> list[Any]:
        return [policy.failures, policy.window, policy.period]

    async def check(self, key: str, policy: CooldownConfig) -> Check:
        if key in self._closed:
            return _CLOSED
        openings = self._openings
        try:
            gate, wait = await self.link.call(["c", key, *self._shape(policy)])
        except asyncio.CancelledError:
            raise
        except Exception:  # the shared view is an optimisation; routing goes on without it (logged by the link)
            return _CLOSED
        if gate == 0 and openings == self._openings and self.link.connected:
            self._closed.add(key)
        return Check(_GATES[gate], float(wait))

    async def failure(self, key: str, policy: CooldownConfig) -> bool:
        self._openings += 1  # whatever the answer, the next check asks, and none racing keeps it
        self._closed.discard(key)
        try:
            return bool(await self.link.call(["x", key, *self._shape(policy)]))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("shared state coordinator unavailable: failure of %s not recorded", key)
            return False

    async def success(self, key: str) -> None:
        try:
            await self.link.call(["s", key])
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("shared state coordinator unavailable: success of %s not recorded", key)

    async def states(self, keys: Sequence[str]) -> list[State]:
        if not keys:
            return []
        try:
            found = await self.link.call(["z", list(keys)])
        except asyncio.CancelledError:
            raise
        except Exception:
            return [("closed", 0.0)] * len(keys)
        return [(_NAMED[state], float(wait)) for state, wait in found]

    def watch(self, observe: StoreObserver | None) -> None:
        """Report each round trip to the coordinator for breakers as the `breakers` store."""
        self.link.watch("breakers", observe)

    async def aclose(self) -> None:
        await self.link.aclose()
