"""The guard: admission before the upstream call (limits, credit reservation), settlement after it.

admit: requests per minute and an over-estimate of the prompt tokens against the key's and the account's
buckets; then a concurrency slot for each (waiting in a fair queue up to `max_queue_wait_s`); then the
worst-case cost reserved from the account in one atomic statement. While no other admission is under way
on this replica (a low, steady rate: nothing to batch with), the reservation is sent at once, beside the
limits' round trip instead of after it, so a request waits for one store round trip, not two in sequence;
if the limits then refuse, the reservation is given back (`_Overlap`). Under load the two stay in sequence,
as each batch then carries many requests' work and an extra task per request would cost throughput.
settle (exactly once): the real cost from the upstream's usage (or, for a stream cut before its usage
chunk, from the characters produced), the ledger adjusted to it, output tokens charged to the token
buckets, slots released, and one usage row queued. All of it is queued with the stores and not waited for,
so a caller who hangs up mid-stream cannot interrupt the bookkeeping, and an answer does not wait for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from inferplex.accounts.limits import LimitPlan, cap_refusal
from inferplex.accounts.pricing import (
    Tokens,
    cost_micros,
    estimate_output_tokens,
    media_cost_micros,
    tokens_of,
)
from inferplex.config import AccountsConfig, ModelConfig, Pricing
from inferplex.context import Context
from inferplex.errors import GatewayError, PermissionDenied, RateLimited, SpendingCapReached, Unavailable
from inferplex.families.base import Family
from inferplex.gateway_request import GatewayRequest
from inferplex.limits import Hold, LimitStore, LimitsUnavailable, Rate
from inferplex.limits.slots import FairSlots
from inferplex.observe.faults import error_type
from inferplex.pipeline import Admission, failure_error
from inferplex.responses import ChatCompletion, ChatCompletionChunk, EmbeddingList, Usage
from inferplex.routing.pricing import price_for
from inferplex.store.backend import StoreUnavailable
from inferplex.store.ledger import Ledger
from inferplex.store.moves import CapReached
from inferplex.translate.openai_shapes import completion_from_chunks
from inferplex.usage_log import UsageLog

log = logging.getLogger("inferplex.accounts")


def worst_case_price(model: ModelConfig) -> list[Pricing]:
    return [d.pricing or model.pricing for d in model.deployments] or [model.pricing]


def request_cost(ctx: Context) -> int | None:
    """The cost of what the request produced so far (usage if known, else estimated from the characters)."""
    if ctx.target is None:
        return None
    price = price_for(ctx.target, ctx.service_tier)
    return cost_micros(price, _tokens(ctx))


def _tokens(ctx: Context) -> Tokens:
    if ctx.usage:
        return tokens_of(ctx.usage)
    prompt = ctx.prompt_tokens_counted  # a cut stream's prompt, as the gateway counts it (pipeline.ChatStream)
    if prompt is None:
        prompt = ctx.prompt_tokens_estimate
    return Tokens(prompt, estimate_output_tokens(ctx.output_chars), estimated=True)


def _scope(family: Any) -> str:
    """The token scope a limit refusal names (Inferada's `scope`: chat is its `completions`, speech its `tts`,
    transcription and translation its `stt`)."""
    return _SCOPES.get(family.name, str(family.name))


_SCOPES = {"chat": "completions", "speech": "tts", "transcription": "stt", "translation": "stt"}


def _cap_reached(found: CapReached, amount: int, request_id: str, inferada: bool) -> SpendingCapReached:
    """The 402 for a reservation a monthly cap refused (store/moves.py): the cap, and the month's spend."""
    month = time.strftime("%Y-%m", time.gmtime())
    held = f", {found.reserved} micro-USD more is held by requests in flight" if found.reserved else ""
    return SpendingCapReached(
        f"Monthly spending cap reached: the {found.owner}'s cap is {found.cap} micro-USD and it has spent "
        f"{found.spent} micro-USD in {month} (UTC){held}; this request may cost up to {amount} micro-USD.",
        request_id=request_id,
        inferada=inferada,
    )


_FAILED = ("error", "failed_midstream")  # an attempt's outcomes that count against its deployment


def _failure_type(caught: BaseException | None) -> str | None:
    """The closed error type of a request that failed while routing: its router's error, or the caller's
    leaving (a cancelled request), else an upstream failure."""
    if isinstance(caught, GatewayError):
        return error_type(caught, caught.status)
    if isinstance(caught, asyncio.CancelledError):
        return "caller.disconnected"
    return "provider.upstream_error"


def _option(value: bool | None, default: bool) -> bool:
    """A log flag the request sent (its `GatewayOptions`, checked by the dialect), else the operator's."""
    return default if value is None else value


_REFUSED_FOR_S = 60.0  # how long a caller the limits refused is admitted in sequence (AccountGuard._overlaps)
_REFUSED_KEPT = 10_000


class _Overlap:
    """A reservation sent beside the limits' round trip (AccountGuard.admit). If the limits refuse the request
    (or its caller leaves meanwhile), whatever the reservation took is given back once it is known, as a
    settlement of zero cost, so the ledger holds a reservation and its release, and the balance is as
    before."""

    __slots__ = ("ctx", "guard", "task")

    def __init__(self, guard: AccountGuard, ctx: Context, reserve: Coroutine[Any, Any, int]) -> None:
        self.guard = guard
        self.ctx = ctx
        self.task: asyncio.Task[int] = asyncio.get_running_loop().create_task(reserve)

    def give_back(self) -> None:
        self.task.add_done_callback(self._given_back)

    def _given_back(self, task: asyncio.Task[int]) -> None:
        if task.cancelled() or task.exception() is not None:  # nothing was taken (or it was given back)
            return
        amount, p = task.result(), self.ctx.principal
        if amount and p.account_id is not None:
            then = partial(_settled, self.ctx.request_id, p.account_id)
            ledger = self.guard.ledger
            ledger.settle_later(p.account_id, amount, 0, request_id=self.ctx.request_id, key_id=p.key_id, then=then)


@dataclass(slots=True)
class _Held:
    key: str
    holder: str


@dataclass(frozen=True, slots=True)
class Deferred:
    """A reservation handed over to a durable job (jobs/): the request that made it has ended, and the job's
    row keeps this until the job completes (`AccountGuard.settle_deferred`) or fails (a release)."""

    account_id: str | None
    key_id: str | None
    reserved: int
    request_id: str


class AccountGuard:
    def __init__(
        self, ledger: Ledger, limits: LimitStore, slots: FairSlots, usage: UsageLog, config: AccountsConfig
    ) -> None:
        self.ledger = ledger
        self.limits = limits
        self.slots = slots
        self.usage = usage
        self.config = config
        self._admitting = 0  # admissions under way on this replica
        self._refused: dict[str, float] = {}  # callers the limits refused lately: never overlapped (_overlaps)

    async def admit(
        self, ctx: Context, family: Family[Any, Any, Any], model: ModelConfig, request: GatewayRequest[Any]
    ) -> Admission:
        p = ctx.principal
        if _option(request.options.log_response_body, self.config.log_response_body):
            ctx.streamed = []  # the response is kept for the usage log (a stream's chunks collected here)
        prompt = family.estimate_input(request.body)
        ctx.prompt_tokens_estimate = prompt
        plan = p.limits.for_request(model.name, model.limit_rules, request.body.user)
        held: list[_Held] = []
        self._admitting += 1
        try:
            if plan.caps:
                self._caps(ctx, family, model, request, plan, prompt)
            early: _Overlap | None = None
            if plan.buckets or plan.slots:
                if family.billed and self._overlaps(ctx):
                    early = _Overlap(self, ctx, self._reserve(ctx, family, model, request, prompt))
                try:
                    await self._limits(ctx, plan, prompt, held, (family, model, request))
                except BaseException as exc:
                    if early is not None:
                        early.give_back()
                    if isinstance(exc, RateLimited):
                        self._note_refused(ctx)
                    raise
            if early is not None:
                reserved = await early.task
            else:
                reserved = await self._reserve(ctx, family, model, request, prompt) if family.billed else 0
        except GatewayError as err:
            await self._release(held)
            self._log(ctx, model, request, err.status, Tokens(), 0, error_type(err, err.status))
            raise
        except LimitsUnavailable:
            await self._release(held)
            raise Unavailable(
                "Limits cannot be checked right now; try again shortly.", code="limits_unavailable"
            ) from None
        except StoreUnavailable as exc:
            await self._release(held)
            log.warning("request %s refused: %s", ctx.request_id, exc)
            raise Unavailable(
                "Credits cannot be checked right now; try again shortly.", code="store_unavailable"
            ) from None
        finally:
            self._admitting -= 1
        return _Admission(self, family, model, request, reserved, held, plan)

    def _overlaps(self, ctx: Context) -> bool:
        """Whether to reserve beside the limits' round trip: only for an account's caller, while this is the
        only admission under way, and not for a caller the limits refused in the last minute (a client
        retrying past its limit would otherwise book a reservation and its release for every refusal)."""
        p = ctx.principal
        if p.account_id is None or self._admitting != 1:
            return False
        until = self._refused.get(p.key_id or p.account_id)
        return until is None or until < time.monotonic()

    def _note_refused(self, ctx: Context) -> None:
        p = ctx.principal
        if p.account_id is None:
            return
        if len(self._refused) >= _REFUSED_KEPT:
            self._refused.clear()  # a bound, not a cache policy: the cost of forgetting is one overlap each
        self._refused[p.key_id or p.account_id] = time.monotonic() + _REFUSED_FOR_S

    def _caps(
        self,
        ctx: Context,
        family: Family[Any, Any, Any],
        model: ModelConfig,
        request: GatewayRequest[Any],
        plan: LimitPlan,
        prompt: int,
    ) -> None:
        """Per-request caps, on the call's worst case, before anything is taken or reserved."""
        worst = family.max_output(request.body, model, self.config.default_max_tokens)
        over = plan.over_cap(prompt, worst, family.unit.value)
        if over is not None:
            err = cap_refusal(*over, request_id=ctx.request_id, model=model.name, scope=_scope(family))
            err.inferada = request.options.processors.inferada
            raise err

    async def _limits(
        self,
        ctx: Context,
        plan: LimitPlan,
        prompt: int,
        held: list[_Held],
        call: tuple[Family[Any, Any, Any], ModelConfig, GatewayRequest[Any]],
    ) -> None:
        """Rate buckets, then concurrency slots: one store round trip when the slots are free, and a fair
        wait (FairSlots) only for a slot that is not, or that others on this replica already queue for."""
        rates = plan.rates(prompt, call[0].unit.value)
        eager = [Hold(key, limit, ctx.request_id) for key, limit in plan.slots if not self.slots.queued(key)]
        taken: tuple[bool, ...] = ()
        if rates or eager:
            wait, worst, taken, used = await self.limits.admit(rates, eager)
            if wait > 0:
                family, model, request = call
                amount = rates[worst].amount
                err = plan.refusal(
                    worst, wait, used, amount, request_id=ctx.request_id, model=model.name, scope=_scope(family)
                )
                err.inferada = request.options.processors.inferada
                raise err
        got = {h.key for h, ok in zip(eager, taken, strict=True) if ok}
        held += [_Held(key, ctx.request_id) for key in got]
        for key, limit in plan.slots:
            if key not in got:
                await self._slot(ctx, key, limit, held)

    async def _slot(self, ctx: Context, key: str, limit: int, held: list[_Held]) -> None:
        waited = await self.slots.acquire(key, limit, ctx.request_id, self.config.max_queue_wait_s)
        if waited is None:
            ctx.timings.queued_ms += self.config.max_queue_wait_s * 1000
            raise RateLimited(
                f"Too many concurrent requests (limit {limit}); waited {self.config.max_queue_wait_s:g}s for a slot.",
                retry_after=1.0,
            )
        ctx.timings.queued_ms += waited * 1000
        held.append(_Held(key, ctx.request_id))

    async def _reserve(
        self, ctx: Context, family: Family[Any, Any, Any], model: ModelConfig, request: GatewayRequest[Any], prompt: int
    ) -> int:
        p = ctx.principal
        if p.account_id is None:
            return 0
        if family.meter is not None:
            tokens, media = family.meter.worst(request.body, model)
            amount = max(media_cost_micros(price, tokens, media) for price in worst_case_price(model))
        else:
            tokens = Tokens(prompt, family.max_output(request.body, model, self.config.default_max_tokens))
            amount = max(cost_micros(price, tokens) for price in worst_case_price(model))
        if amount <= 0:
            return 0
        balance = await self.ledger.reserve(p.account_id, amount, request_id=ctx.request_id, key_id=p.key_id)
        if isinstance(balance, CapReached):
            raise _cap_reached(balance, amount, ctx.request_id, request.options.processors.inferada)
        if balance is None:
            raise PermissionDenied(
                f"Insufficient credits: this request may cost up to {amount} micro-USD "
                f"({tokens.prompt} prompt tokens estimated + {tokens.completion} output tokens at most), "
                "more than the account's balance.",
                code="insufficient_credits",
            )
        return amount

    async def settle_deferred(self, held: Deferred, cost: int | None, usage: dict[str, Any]) -> None:
        """Settle a job's reservation at `cost` (None: release it, the job failed or was cancelled), at most
        once per request id whoever calls it and however often: through `Ledger.replay`, which skips a request
        that already has a settlement (so a replica that died after settling and before marking its row
        settled costs nothing twice), under the account's row lock. A usage row is logged (`usage`: model,
        provider, deployment, status, tags...). Raises when the database cannot be reached: the caller tries
        again later."""
        await self.settle_deferred_many([(held, cost, usage)])

    async def settle_deferred_many(self, items: Sequence[tuple[Deferred, int | None, dict[str, Any]]]) -> None:
        """`settle_deferred` for several reservations in one ledger transaction (batch lines that ended
        together: batches/worker.py)."""
        moves = []
        for held, cost, _ in items:
            if held.account_id is not None and held.reserved:
                actual = cost or 0
                note = "released: job failed or cancelled" if cost is None else "settled: job completed"
                moves.append({"account_id": held.account_id, "amount": held.reserved - actual,
                              "request_id": held.request_id, "key_id": held.key_id, "note": note,
                              "if_reserved": True, "hold": -held.reserved, "spend": actual})  # fmt: skip
        if moves:
            await self.ledger.replay(moves)
        for held, cost, usage in items:
            row: dict[str, Any] = {
                "request_id": held.request_id, "created_at": time.time(), "key_id": held.key_id,
                "account_id": held.account_id, "prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0,
                "estimated": 0, "cost_micros": cost or 0, "total_ms": 0.0, "upstream_ms": 0.0, "ttft_ms": None,
                "queued_ms": 0.0, "tags": [], "end_user": None, "request_body": None, "response_body": None,
                "route": None, "operation": None, "attempts": [], "attempt_errors": 0,
            }  # fmt: skip
            row.update(usage)
            if "error_type" not in row:
                row["error_type"] = error_type(None, int(row.get("status") or 0))
            self.usage.record(row)

    async def _release(self, held: list[_Held]) -> None:
        for h in held:
            try:
                await self.slots.release(h.key, h.holder)
            except Exception:
                log.exception("could not release a concurrency slot")

    def _log(
        self,
        ctx: Context,
        model: ModelConfig,
        request: GatewayRequest[Any],
        status: int,
        tokens: Tokens,
        cost: int,
        kind: str | None = None,
    ) -> None:
        """Queue the request's usage row; `kind` is its closed error type when the caller knows it (else from
        a stream's mid-way failure, or the status)."""
        p = ctx.principal
        attempts = [a.view() for a in ctx.attempt_log]
        total_ms, upstream_ms = ctx.timings.spans_ms()
        target = ctx.target
        tags = [*p.tags, *request.options.tags]
        row: dict[str, Any] = {
            "request_id": ctx.request_id,
            "created_at": time.time(),
            "key_id": p.key_id,
            "account_id": p.account_id,
            "model": model.name,
            "provider": target.provider.name if target else None,
            "deployment": (target.deployment.id or target.upstream_model) if target else None,
            "status": status,
            "prompt_tokens": tokens.prompt,
            "completion_tokens": tokens.completion,
            "cached_tokens": tokens.cached,
            "estimated": int(tokens.estimated),
            "cost_micros": cost,
            "total_ms": total_ms,
            "upstream_ms": upstream_ms,
            "ttft_ms": ctx.timings.ttft_ms or None,
            "queued_ms": ctx.timings.queued_ms,
            "tags": tags,
            "end_user": request.body.user,
            "request_body": None,
            "response_body": None,
            "route": ctx.route_template or None,
            "operation": ctx.operation,
            "error_type": kind or error_type(ctx.failure, status),
            "attempts": attempts,
            "attempt_errors": sum(1 for a in ctx.attempt_log if a.outcome in _FAILED),
            "cache": ctx.cache.status if ctx.cache is not None else None,  # the response cache's outcome (H4)
        }
        if _option(request.options.log_query_body, self.config.log_query_body):
            row["request_body"] = request.body.model_dump(mode="json", exclude_none=True)
        if ctx.streamed is not None:  # admission decided to keep the response for the log
            if ctx.response is not None:
                row["response_body"] = ctx.response
            elif ctx.streamed:
                row["response_body"] = completion_from_chunks(ctx.streamed)
        if ctx.failure is not None:  # the error a stream's caller received after its first byte, and its charge
            row["response_body"] = {**(row["response_body"] or {}), "error": failure_error(ctx)}
        self.usage.record(row)


class _Admission:
    def __init__(
        self,
        guard: AccountGuard,
        family: Family[Any, Any, Any],
        model: ModelConfig,
        request: GatewayRequest[Any],
        reserved: int,
        held: list[_Held],
        plan: LimitPlan,
    ) -> None:
        self.guard = guard
        self.family = family
        self.model = model
        self.request = request
        self.reserved = reserved
        self.held = held
        self.plan = plan
        self.admitted_at = time.monotonic()  # a rolling window's correction lands where admission counted

    def _priced(self, ctx: Context, usage: Usage | None) -> tuple[Tokens, int]:
        """What the answer used and what it costs, at the price of the deployment and tier that served."""
        if ctx.target is not None:
            price = price_for(ctx.target, ctx.service_tier)
        elif ctx.cache is not None and ctx.cache.pricing is not None:  # a hit: as the stored answer was priced
            price = ctx.cache.pricing
        else:
            price = self.model.pricing
        meter = self.family.meter
        if meter is not None:
            tokens, media = meter.used(self.request.body, ctx.answer)
            return tokens, media_cost_micros(price, tokens, media)
        tokens = _tokens(ctx) if usage is None else tokens_of(usage)
        return tokens, cost_micros(price, tokens)

    async def settle(self, ctx: Context, usage: Usage | None, *, failed: bool) -> None:
        tokens, cost = (Tokens(), 0) if failed else self._priced(ctx, usage)
        if ctx.cache is not None:  # a hit costs what the operator set (free, a fraction, full): cache/settings.py
            cost = ctx.cache.charge(cost)
        ctx.cost_micros = cost
        status, kind = 200, None
        if failed:
            last = ctx.attempt_log[-1].status if ctx.attempt_log else None
            status = last if last and last >= 400 else 502
            # The router's error, not the upstream's status alone, says whose fault it was (a timeout, no
            # deployment left, the caller gone): Pipeline.routed keeps it on the context.
            kind = _failure_type(ctx.failure or ctx.routing_error)
        elif ctx.failure is not None:  # a stream that failed mid-way, billed for what it delivered
            status = ctx.failure.status
        age = time.monotonic() - self.admitted_at
        corrections = self.plan.corrections(ctx.prompt_tokens_estimate, tokens.prompt, tokens.completion, age)
        if self._books(ctx, corrections, cost):
            await self._book(ctx, tokens, cost, status, corrections, kind)
        else:  # nothing for a store
            self.guard._log(ctx, self.model, self.request, status, tokens, cost, kind)

    def settle_later(self, ctx: Context, usage: Usage | None) -> tuple[Deferred, int]:
        """Price the request as `settle` would, but book nothing: the reservation stays held and is handed back
        with the cost, for a caller that must first record the result durably and then settle it once
        (`AccountGuard.settle_deferred`, idempotent per request id): a batch line (batches/worker.py)."""
        cost = self._priced(ctx, usage)[1]
        ctx.cost_micros = cost = ctx.cache.charge(cost) if ctx.cache is not None else cost
        return self.defer(ctx), cost

    def defer(self, ctx: Context) -> Deferred:
        """End the request but not its reservation: slots are given back now, and what the job's row must
        keep to settle the reservation later (`AccountGuard.settle_deferred`) is returned. Instead of
        `settle`, for a request that started a durable job (a video)."""
        g, p = self.guard, ctx.principal
        if self.held:
            finished = g.limits.finish([], [(h.key, h.holder) for h in self.held])
            released = partial(_released, g.slots, [h.key for h in self.held])
            if finished.done():
                released(finished)
            else:
                finished.add_done_callback(released)
            self.held = []
        # The job's row keeps the reservation from here (whichever replica picks the job up settles it), so
        # this replica's liveness record stops counting it as its own (store/holding.py).
        g.ledger.holding.refused(ctx.request_id)
        return Deferred(p.account_id, p.key_id, self.reserved if p.account_id is not None else 0, ctx.request_id)

    def _books(self, ctx: Context, corrections: list[Rate], cost: int) -> bool:
        """Whether settlement has to touch a store: the ledger, a token bucket or a concurrency slot."""
        if self.held or (ctx.principal.account_id is not None and (self.reserved or cost)):
            return True
        return bool(corrections)

    async def _book(
        self,
        ctx: Context,
        tokens: Tokens,
        cost: int,
        status: int,
        corrections: list[Rate],
        kind: str | None = None,
    ) -> None:
        """Queued with the stores (batching.py), not awaited: the answer's cost is already known, and a
        buffered answer need not wait a round trip for the books. The stores apply a replica's items in the
        order they were queued, so the caller's next request (a reservation, a slot) comes after this
        settlement, and the ledger's readers wait for what is queued (Ledger.account). How it went is
        logged (`_settled`; the limit store logs its own)."""
        g, p = self.guard, ctx.principal
        if p.account_id is not None and (self.reserved or cost):
            then = partial(_settled, ctx.request_id, p.account_id)
            g.ledger.settle_later(
                p.account_id, self.reserved, cost, request_id=ctx.request_id, key_id=p.key_id, then=then
            )
        # Token buckets corrected to the real usage and slots given back in one round trip.
        finished = g.limits.finish(corrections, [(h.key, h.holder) for h in self.held])
        if self.held:  # then the head waiter for each slot on this replica may ask for it
            released = partial(_released, g.slots, [h.key for h in self.held])
            if finished.done():  # the in-process store: no need to go round the event loop
                released(finished)
            else:
                finished.add_done_callback(released)
        g._log(ctx, self.model, self.request, status, tokens, cost, kind)


def _settled(request_id: str, account_id: str, balance: int | None, error: BaseException | None) -> None:
    if isinstance(error, asyncio.CancelledError):  # shutdown cancelled its batch: nothing to tell
        return
    if isinstance(error, StoreUnavailable):  # kept in the spool (store/ledger.py), written when it is back
        log.warning("settlement of request %s deferred: %s", request_id, error)
    elif error is not None:
        log.error("settlement failed for request %s", request_id, exc_info=error)
    elif balance is None:
        log.error("settlement of request %s found no account %s", request_id, account_id)


def _released(slots: FairSlots, keys: list[str], _: object) -> None:
    for key in keys:
        slots.released(key)


def add_cost(response: ChatCompletion | ChatCompletionChunk | EmbeddingList, ctx: Context) -> None:
    """Add `"cost": {"currency": "USD", "micros": N}` to a response body, unless the cost is unknown.

    Buffered responses carry the settled cost; a stream's final chunk carries the cost of its usage, which is
    exactly what settlement then books."""
    micros = ctx.cost_micros if ctx.cost_micros is not None else request_cost(ctx)
    if micros is not None:
        response["cost"] = {"currency": "USD", "micros": micros}
