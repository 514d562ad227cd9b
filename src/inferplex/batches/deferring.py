"""The batch worker's guard: admits each line as the account's guard does, but keeps a succeeded line's
reservation held instead of settling it, so the line's result, its cost and the reservation are written
together first (batches/rows.py `end`), and the charge is settled after, once (`AccountGuard.settle_deferred`,
idempotent per request id). A worker that dies in between leaves a line that says what to settle; one that
dies before writing the result leaves a reservation with no result, which the store's orphan sweep releases
(store/recovery.py), and the line is run again under a new request id. A failed line is settled at once as a
failure: it costs nothing, so there is nothing to do exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from inferplex.accounts.guard import Deferred
from inferplex.config import ModelConfig
from inferplex.context import Context
from inferplex.families.base import Family
from inferplex.gateway_request import GatewayRequest
from inferplex.pipeline import Admission, Guard
from inferplex.responses import Usage


@runtime_checkable
class Later(Protocol):
    """An admission that can be priced now and settled later (accounts/guard._Admission)."""

    def settle_later(self, ctx: Context, usage: Usage | None) -> tuple[Deferred, int]: ...


@dataclass(frozen=True, slots=True)
class Held:
    """What a succeeded line's call left to settle: the reservation (None: nothing held, e.g. no account) and
    the cost it is to be settled at."""

    deferred: Deferred | None
    cost: int


class LineGuard:
    """Wraps the gateway's guard; `held` maps the request id of each line whose call succeeded to its `Held`,
    taken by the worker (`take`) once the call returns."""

    def __init__(self, inner: Guard) -> None:
        self.inner = inner
        self.held: dict[str, Held] = {}

    async def admit(
        self, ctx: Context, family: Family[Any, Any, Any], model: ModelConfig, request: GatewayRequest[Any]
    ) -> Admission:
        return _LineAdmission(self, await self.inner.admit(ctx, family, model, request))

    def take(self, request_id: str) -> Held | None:
        return self.held.pop(request_id, None)


class _LineAdmission:
    def __init__(self, guard: LineGuard, inner: Admission) -> None:
        self.guard = guard
        self.inner = inner

    async def settle(self, ctx: Context, usage: Usage | None, *, failed: bool) -> None:
        if failed or not isinstance(self.inner, Later):
            await self.inner.settle(ctx, usage, failed=failed)
            if not failed:
                self.guard.held[ctx.request_id] = Held(None, ctx.cost_micros or 0)
            return
        deferred, cost = self.inner.settle_later(ctx, usage)
        self.guard.held[ctx.request_id] = Held(deferred, cost)
