"""One attempt at one deployment: capacity taken and given back, timeouts enforced, outcome recorded.

Time to first token is the wait for `call` itself (the pipeline pulls a stream's first chunk inside it);
after that, a stream is wrapped in `WatchedStream`, which bounds each gap between chunks (stall), the whole
attempt (total) and the request's deadline, and on its end (complete, failed or closed by the caller)
releases the deployment's slot, feeds the latency and token statistics, and reports failure or success to
the circuit breaker. It is a class, not a generator, so closing it works even before its first pull.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from inferplex.config import CooldownConfig
from inferplex.context import Attempt, Context
from inferplex.errors import GatewayError, UpstreamTimeout
from inferplex.responses import ChatCompletionChunk
from inferplex.routing.cooldown import Cooldowns
from inferplex.routing.gate import PriorityGate, RateWindow
from inferplex.routing.retry import Verdict, classify, status_of
from inferplex.routing.stats import DeploymentStats


@dataclass(slots=True)
class Slot:
    """What an attempt holds while it runs, and gives back exactly once."""

    key: str
    gate: PriorityGate
    window: RateWindow
    stats: DeploymentStats
    cooldowns: Cooldowns
    policy: CooldownConfig
    record: Attempt
    started: float
    ctx: Context
    released: bool = False
    ended: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.gate.release()
            self.stats.in_flight -= 1

    async def failed(self, err: BaseException, *, midstream: bool = False) -> None:
        """Log the failure and, unless the request was at fault, count it against the deployment."""
        self.release()
        self.record.outcome = "failed_midstream" if midstream else "error"
        self.record.status = status_of(err)
        self.record.error = str(err) or type(err).__name__
        if not midstream:
            self.record.latency_ms = (time.monotonic() - self.started) * 1000
        try:
            if isinstance(err, GatewayError) and classify(err) is not Verdict.FATAL:
                if await self.cooldowns.failure(self.key, self.policy):
                    self.ctx.hub.breaker(self.key, True)
        finally:
            self.end()

    def end(self) -> None:
        """Tell the hub the attempt is over (once: its record now says how it went)."""
        if not self.ended:
            self.ended = True
            self.ctx.hub.attempt_finished(self.ctx, self.record)


def _tokens(usage: Any) -> int:
    if isinstance(usage, dict):
        total = usage.get("total_tokens")
        if isinstance(total, int):
            return total
    return 0


def stamp(chunk: Any, tier: str) -> None:
    """Report the tier that served in a completion or chunk body (OpenAI's `service_tier` field)."""
    if isinstance(chunk, dict) and "choices" in chunk:
        chunk["service_tier"] = tier


class WatchedStream:
    """Bounds each wait for a chunk (stall) and the attempt's end, with one watchdog timer per stream.

    A timeout context per chunk costs about a tenth of a stream's CPU (docs/benchmarks.md). The watchdog
    instead wakes once per stall period, and only when the consumer has been waiting inside `__anext__`
    past the bound does it cancel the waiting task, which `__anext__` turns into an `UpstreamTimeout`.
    """

    def __init__(
        self,
        inner: AsyncIterator[ChatCompletionChunk],
        slot: Slot,
        *,
        stall: float,
        ends_at: float,
        tier: str,
    ) -> None:
        self._inner = inner
        self._slot = slot
        self._stall = stall
        self._ends_at = ends_at  # monotonic: the earlier of the attempt's total timeout and the deadline
        self._tier = tier
        self._first_at = time.monotonic()
        self._last_at = self._first_at
        self._pieces = 0
        self._tokens = 0
        self._done = False
        self._task: asyncio.Task[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._waiting_since: float | None = None
        self._expired: str | None = None

    def __aiter__(self) -> WatchedStream:
        return self

    def _watch(self) -> None:
        self._timer = None
        if self._done:
            return
        now = time.monotonic()
        since = self._waiting_since
        due = min((since if since is not None else now) + self._stall, self._ends_at)
        if since is not None and now >= due and self._task is not None:
            stalled = since + self._stall <= self._ends_at
            self._expired = f"no data for {self._stall:.3g}s (stalled)" if stalled else "the time allowed ran out"
            self._task.cancel()
            return
        self._timer = asyncio.get_running_loop().call_later(max(due - now, 0.0), self._watch)

    async def __anext__(self) -> ChatCompletionChunk:
        if self._done:
            raise StopAsyncIteration
        if self._task is None:  # the request's task consumes the whole stream: look it up once
            self._task = asyncio.current_task()
        self._waiting_since = time.monotonic()
        if self._timer is None:
            self._watch()
        try:
            chunk = await self._inner.__anext__()
        except StopAsyncIteration:
            await self._finish(None)
            raise
        except asyncio.CancelledError:
            if self._expired is None:
                await self._finish(None)
                raise
            if self._task is not None:
                self._task.uncancel()
            err = UpstreamTimeout(f"deployment {self._slot.key} stopped mid-stream: {self._expired}")
            await self._finish(err)
            raise err from None
        except GatewayError as err:
            await self._finish(err)
            raise
        except BaseException:
            await self._finish(None)
            raise
        finally:
            self._waiting_since = None
        self._last_at = time.monotonic()
        if any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or ()):
            self._pieces += 1
        if chunk.get("usage"):
            self._tokens = _tokens(chunk["usage"])
        stamp(chunk, self._tier)
        return chunk

    async def _finish(self, err: GatewayError | None) -> None:
        if self._done:
            return
        self._done = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        slot = self._slot
        try:
            aclose = getattr(self._inner, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            slot.window.note_tokens(self._tokens)
            if err is not None:
                await slot.failed(err, midstream=True)
            else:
                slot.release()
                if self._pieces >= 2:
                    slot.stats.observe_per_token((self._last_at - self._first_at) * 1000 / (self._pieces - 1))
                slot.end()

    async def aclose(self) -> None:
        await self._finish(None)
