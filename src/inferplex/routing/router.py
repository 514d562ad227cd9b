"""The routing stage: choose a deployment, call it, and on failure retry, fail over and fall back.

A request's plan is a list of groups: the requested model's deployments (narrowed by `endpoint_id`,
`region` and the `provider` preferences), then each fallback model's (the request's `models`, else the
model's `routing.fallbacks`). Within a group the strategy ranks deployments; those whose breaker is open or
whose RPM/TPM window is full are skipped, and a saturated one is used only when no other has room (then
the request queues on it, `flex` behind `default`). A retryable failure moves to a fresh deployment at once,
or retries the same one after a backoff (honouring `Retry-After` when it fits); every group gets
`retries + 1` attempts, and all of it must fit in the request's deadline.

If every deployment of every group is cooling down, the one that reopens soonest is tried once anyway: the
breaker steers traffic to healthy deployments, it never refuses a request on its own, unless the model's
`routing.cooldown.when_all_open` is `refuse` (then a 503 with `Retry-After`).

The router never settles money: the pipeline settles once per request, and a failed attempt costs nothing.
It records each attempt on `ctx.attempt_log` and reports the deployment that served and the tier used.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

from inferplex import shared_state
from inferplex.catalog import Catalog, Resolved
from inferplex.config import Config, CooldownConfig, ModelConfig, Timeouts
from inferplex.context import Attempt, Context
from inferplex.deadlines import Deadline
from inferplex.errors import (
    GatewayError,
    InvalidRequest,
    NotFound,
    ProcessorRejected,
    RateLimited,
    Unavailable,
    UpstreamTimeout,
)
from inferplex.providers.http import deployment_timeouts
from inferplex.routing.attempt import Slot, WatchedStream, stamp
from inferplex.routing.cooldown import Cooldowns, Gate, MemoryCooldowns, RedisCooldowns
from inferplex.routing.gate import PriorityGate, RateWindow
from inferplex.routing.options import RouteOptions
from inferplex.routing.pricing import comparable_price
from inferplex.routing.retry import Verdict, classify, wait_before_retry
from inferplex.routing.stats import Stats
from inferplex.routing.strategies import SORT_STRATEGY, Candidate, apply_order, rank
from inferplex.shared_state.cooldowns import SharedCooldowns
from inferplex.targets import Target

T = TypeVar("T")

Group = tuple[ModelConfig, list[Target]]


class _Exhausted(Exception):
    def __init__(self, error: GatewayError | None, cooling: list[tuple[float, Target]], rate_wait: float | None):
        self.error, self.cooling, self.rate_wait = error, cooling, rate_wait


class Router:
    def __init__(
        self,
        catalog: Catalog,
        cooldowns: Cooldowns | None = None,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.catalog = catalog
        self.cooldowns: Cooldowns = cooldowns or MemoryCooldowns()
        self.stats = Stats()
        self._rng = rng or random.Random()
        self._gates: dict[str, PriorityGate] = {}
        self._windows: dict[str, RateWindow] = {}
        self._timeouts: dict[str, Timeouts] = {}

    async def aclose(self) -> None:
        await self.cooldowns.aclose()

    # ---- capacity and per-deployment state ------------------------------------------------------------

    def gate(self, target: Target) -> PriorityGate:
        key = target.key
        found = self._gates.get(key)
        if found is None:
            found = self._gates[key] = PriorityGate(target.deployment.max_concurrent)
        return found

    def window(self, target: Target) -> RateWindow:
        key = target.key
        found = self._windows.get(key)
        if found is None:
            found = self._windows[key] = RateWindow(target.deployment.rpm, target.deployment.tpm)
        return found

    def _attempt_timeouts(self, target: Target) -> Timeouts:
        """What the adapter is handed for an attempt (`CallInfo.timeouts`): the provider's timeouts with the
        deployment's own connect applied, worked out once per deployment (`http.deployment_timeouts`)."""
        if target.deployment.timeouts.connect is None:
            return target.provider.timeouts
        key = f"{target.model.name}\0{target.key}"
        found = self._timeouts.get(key)
        if found is None:
            found = self._timeouts[key] = deployment_timeouts(target)
        return found

    # ---- the plan ---------------------------------------------------------------------------------------

    def plan(self, ctx: Context, resolved: Resolved, opts: RouteOptions) -> list[Group]:
        if opts.endpoint_id is not None:
            for t in resolved.targets:
                d = t.deployment
                if d.id == opts.endpoint_id and (not d.dedicated or ctx.principal.may_use(d.id)):
                    if opts.location is not None and t.location != opts.location:
                        raise ProcessorRejected(
                            f"The endpoint `{d.id}` does not run {opts.location.replace('_', '-')}.",
                            param="endpoint_id",
                        )
                    return [(resolved.model, [t])]
            raise NotFound(
                f"The endpoint `{opts.endpoint_id}` does not exist for model `{resolved.model.name}` "
                "or you do not have access to it.",
                param="endpoint_id",
                code="endpoint_not_found",
            )
        primary = self._narrow([t for t in resolved.targets if not t.deployment.dedicated], opts)
        if not primary:
            raise self._nothing_serves(resolved, opts)
        groups: list[Group] = [(resolved.model, primary)]
        explicit = opts.models is not None
        names = list(opts.models or ()) if explicit else list(resolved.model.routing.fallbacks)
        if not explicit and not opts.prefs.allow_fallbacks:
            names = []
        for name in names:
            if name == resolved.model.name or any(m.name == name for m, _ in groups):
                continue
            try:
                other = self.catalog.resolve(name, kind=resolved.model.type)
            except GatewayError as err:
                if explicit:
                    err.param = "models"
                    raise
                continue
            if not ctx.principal.may_use(other.model.name):
                if explicit:
                    ctx.principal.require_model(other.model.name)
                continue
            targets = self._narrow([t for t in other.targets if not t.deployment.dedicated], opts)
            if targets:
                groups.append((other.model, targets))
        return groups

    @staticmethod
    def _narrow(targets: list[Target], opts: RouteOptions) -> list[Target]:
        prefs = opts.prefs
        out = [
            t
            for t in targets
            if (opts.region is None or t.deployment.region == opts.region)
            and (opts.location is None or t.location == opts.location)
            and (prefs.only is None or t.provider.name in prefs.only)
            and t.provider.name not in prefs.ignore
        ]
        if prefs.order and not prefs.allow_fallbacks:
            out = [t for t in out if t.provider.name in prefs.order]
        return out

    @staticmethod
    def _nothing_serves(resolved: Resolved, opts: RouteOptions) -> GatewayError:
        name = resolved.model.name
        if opts.location is not None and not any(t.location == opts.location for t in resolved.targets):
            return ProcessorRejected(
                f"No deployment of `{name}` runs {opts.location.replace('_', '-')}.", param="model"
            )
        if opts.region is not None and not any(t.deployment.region == opts.region for t in resolved.targets):
            return InvalidRequest(
                f"No deployment of `{name}` serves the region `{opts.region}`.",
                param="region",
                code="region_not_available",
            )
        if opts.prefs != type(opts.prefs)() or opts.region is not None:
            return InvalidRequest(
                f"No deployment of `{name}` matches the requested provider preferences.",
                param="provider",
                code="no_matching_provider",
            )
        return Unavailable(f"The model `{name}` has no shared deployment; name a dedicated one with endpoint_id.")

    # ---- the run ----------------------------------------------------------------------------------------

    async def run(self, ctx: Context, resolved: Resolved, call: Callable[[Target], Awaitable[T]]) -> T:
        opts = ctx.route if ctx.route is not None else RouteOptions()
        ctx.service_tier = opts.service_tier
        policy = resolved.model.routing
        budget = min(opts.timeout or policy.deadline, policy.max_deadline)
        deadline = time.monotonic() + budget
        groups = self.plan(ctx, resolved, opts)
        error: GatewayError | None = None
        cooling: list[tuple[float, Target]] = []
        rate_wait: float | None = None
        for model, targets in groups:
            try:
                return await self._group(ctx, model, targets, opts, deadline, call)
            except _Exhausted as ex:
                error = ex.error or error
                cooling += ex.cooling
                if ex.rate_wait is not None:
                    rate_wait = ex.rate_wait if rate_wait is None else min(rate_wait, ex.rate_wait)
        if ctx.attempts == 0 and cooling:
            reopens, target = min(cooling, key=lambda c: c[0])
            refuse = opts.refuse_when_all_open
            if refuse or (refuse is None and policy.cooldown.when_all_open == "refuse"):
                raise Unavailable(
                    f"Every deployment of `{resolved.model.name}` is cooling down after failures; "
                    f"try again in {max(reopens, 0.0):.0f} s.",
                    retry_after=max(reopens, 1.0),
                )
            return await self._attempt(ctx, target, opts, deadline, call, probe=True)
        if error is not None:
            raise error
        if rate_wait is not None:
            raise RateLimited(
                f"Every deployment of `{resolved.model.name}` is at its request or token limit.",
                retry_after=rate_wait,
                code="deployment_rate_limited",
            )
        raise Unavailable(f"No deployment of `{resolved.model.name}` could serve the request.")

    async def _group(
        self,
        ctx: Context,
        model: ModelConfig,
        targets: list[Target],
        opts: RouteOptions,
        deadline: float,
        call: Callable[[Target], Awaitable[T]],
    ) -> T:
        policy = model.routing
        strategy = SORT_STRATEGY.get(opts.prefs.sort or "", policy.strategy)
        tried: dict[str, int] = {}
        banned: set[str] = set()
        error: GatewayError | None = None
        attempts_left = policy.retries + 1
        cooling: list[tuple[float, Target]] = []
        rate_wait: float | None = None
        while attempts_left > 0:
            picked, cooling, rate_wait = await self._pick(targets, strategy, opts, tried, banned, policy.cooldown)
            if picked is None:
                break
            target, probe = picked
            key = target.key
            if key in tried:
                wait = wait_before_retry(
                    tried[key],
                    error.retry_after if error is not None else None,
                    policy.backoff,
                    policy.backoff_max,
                    policy.max_retry_wait,
                    self._rng,
                )
                if wait is None or time.monotonic() + wait >= deadline:
                    banned.add(key)
                    continue
                await asyncio.sleep(wait)
            if probe:
                banned.add(key)  # a half-open breaker gets one probe, not retries
            tried[key] = tried.get(key, 0) + 1
            attempts_left -= 1
            try:
                return await self._attempt(ctx, target, opts, deadline, call, probe=probe)
            except GatewayError as err:
                verdict = classify(err)
                if verdict is Verdict.FATAL or time.monotonic() >= deadline:
                    raise
                if verdict is Verdict.FAILOVER:
                    banned.add(key)
                error = err
        raise _Exhausted(error, cooling if not tried else [], rate_wait if not tried else None)

    async def _pick(
        self,
        targets: list[Target],
        strategy: str,
        opts: RouteOptions,
        tried: dict[str, int],
        banned: set[str],
        policy: CooldownConfig,
    ) -> tuple[tuple[Target, bool] | None, list[tuple[float, Target]], float | None]:
        """The next deployment to try (and whether it is a half-open probe), else what kept each one out."""
        if len(targets) == 1:  # the common case: nothing to rank
            key = targets[0].key
            by_key = {} if key in banned else {key: targets[0]}
            order = list(by_key)
        else:
            by_key = {k: t for k, t in ((t.key, t) for t in targets) if k not in banned}
            order = list(by_key) if len(by_key) < 2 else self._rank(by_key, strategy, opts, tried)
        cooling: list[tuple[float, Target]] = []
        rate_wait: float | None = None
        saturated: list[Target] = []
        for key in order:
            target = by_key[key]
            wait = self.window(target).full()
            if wait is not None:
                rate_wait = wait if rate_wait is None else min(rate_wait, wait)
                continue
            if self.gate(target).saturated:
                saturated.append(target)
                continue
            check = await self.cooldowns.check(key, policy)
            if check.gate is Gate.OPEN:
                cooling.append((check.retry_in, target))
                continue
            return (target, check.gate is Gate.PROBE), cooling, rate_wait
        for target in saturated:
            check = await self.cooldowns.check(target.key, policy)
            if check.gate is not Gate.OPEN:
                return (target, check.gate is Gate.PROBE), cooling, rate_wait
            cooling.append((check.retry_in, target))
        return None, cooling, rate_wait

    def _rank(self, by_key: dict[str, Target], strategy: str, opts: RouteOptions, tried: dict[str, int]) -> list[str]:
        """Deployment keys in the order to try them (only worth computing when there is a choice)."""
        cands = [
            Candidate(
                key=k,
                weight=t.deployment.weight,
                priority=t.deployment.priority,
                price=comparable_price(t, opts.service_tier),
                in_flight=self.stats[k].in_flight,
                ttft_ms=self.stats[k].ttft_ms,
                per_token_ms=self.stats[k].per_token_ms,
            )
            for k, t in by_key.items()
        ]
        ranked = rank(cands, strategy, self._rng)
        ranked = apply_order(ranked, opts.prefs.order, {k: t.provider.name for k, t in by_key.items()})
        ranked.sort(key=lambda c: c.key in tried)  # fresh deployments before retrying one that failed
        return [c.key for c in ranked]

    async def _attempt(
        self,
        ctx: Context,
        target: Target,
        opts: RouteOptions,
        deadline: float,
        call: Callable[[Target], Awaitable[T]],
        *,
        probe: bool,
    ) -> T:
        key = target.key
        d, provider_t = target.deployment, target.provider.timeouts
        gate, stats = self.gate(target), self.stats[key]
        if time.monotonic() >= deadline:
            raise UpstreamTimeout("The request's deadline passed before a deployment could answer.")
        try:
            if not gate.try_acquire():
                await gate.acquire(opts.service_tier, deadline - time.monotonic())
        except TimeoutError:
            raise UpstreamTimeout(
                f"The request's deadline passed while waiting for capacity on deployment {key}."
            ) from None
        started = time.monotonic()
        stats.in_flight += 1
        window = self.window(target)
        window.note_request()
        ctx.attempts += 1
        ctx.target, ctx.model = target, target.model
        record = Attempt(deployment=key, model=target.model.name, outcome="pending")
        ctx.attempt_log.append(record)
        slot = Slot(key, gate, window, stats, self.cooldowns, target.model.routing.cooldown, record, started, ctx)
        ctx.hub.attempt_started(ctx, record)
        total = d.timeouts.total or provider_t.total
        ends_at = min(deadline, started + total) if total else deadline
        # A buffered answer is its own first chunk: `read` bounds it as it bounds a stream's first token.
        first = (d.timeouts.first_token or provider_t.read) if opts.stream else provider_t.read
        limit = max(min(first, ends_at - started), 0.0)
        try:
            with Deadline(limit) as cm:
                ctx.info.timeouts = self._attempt_timeouts(target)
                result = await call(target)
        except TimeoutError:
            if not cm.expired():
                slot.release()
                record.outcome = "error"
                slot.end()
                raise
            what = "the first token" if opts.stream and first <= ends_at - started else "a response"
            err = UpstreamTimeout(f"deployment {key} did not send {what} within {limit:.3g}s")
            await slot.failed(err)
            raise err from None
        except GatewayError as err:
            await slot.failed(err)
            raise
        except BaseException as exc:
            slot.release()
            record.outcome = "cancelled" if isinstance(exc, asyncio.CancelledError) else "error"
            record.error = record.error or type(exc).__name__
            slot.end()
            raise
        elapsed_ms = (time.monotonic() - started) * 1000
        record.outcome, record.status, record.latency_ms = "ok", 200, elapsed_ms
        ctx.extra_headers["x-inferplex-deployment"] = key
        ctx.extra_headers["x-inferplex-service-tier"] = opts.service_tier
        if probe:  # only a probe can close a breaker; a closed one needs no news (and Redis no round trip)
            await self.cooldowns.success(key)
            ctx.hub.breaker(key, False)
        if opts.stream and isinstance(result, tuple) and len(result) == 2:
            stats.observe_ttft(elapsed_ms)
            head, rest = result
            stamp(head, opts.service_tier)
            stall = d.timeouts.stall or provider_t.read
            watched = WatchedStream(rest, slot, stall=stall, ends_at=ends_at, tier=opts.service_tier)
            return cast(T, (head, watched))
        if isinstance(result, dict):
            stamp(result, opts.service_tier)
            usage = result.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("total_tokens"), int):
                window.note_tokens(usage["total_tokens"])
        stats.observe_ttft(elapsed_ms)
        slot.release()
        slot.end()
        return result


def build_router(config: Config, catalog: Catalog) -> Router:
    """The router for a configuration: cooldowns shared through Redis when a URL is configured, else
    through the machine's coordinator when this is one of several workers (shared_state/), else its own.

    The URL is `routing.redis_url`, else the accounts store's `storage.redis_url` when that section exists.
    """
    url = config.routing.redis_url or config.storage.redis_url
    shared = shared_state.configured()  # one of several workers on a machine, no Redis: the coordinator's
    cooldowns: Cooldowns
    if url:
        cooldowns = RedisCooldowns(url, config.routing.redis_prefix)
    elif shared:
        cooldowns = SharedCooldowns(shared)
    else:
        cooldowns = MemoryCooldowns()
    return Router(catalog, cooldowns)
