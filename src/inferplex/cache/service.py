"""The response cache the pipeline calls (`ResponseCache`) and the admin reads (`CacheAdmin`), over a `Backend`.

One request's road through it:

1. `lookup` decides whether caching applies (the section is on, the model is not opted out, the family's
   answers are JSON objects: chat, embeddings, the Responses API's native pass-through; media families are
   never cached: their answers are files and bytes, and rarely asked for twice), reads the request's control
   (cache/control.py), computes the key (cache/keys.py) and asks the backend; after an exact miss, for a
   model or request that wants it, the semantic index (cache/semantic.py). It leaves a `CacheOutcome` on
   `ctx.cache` (the status, the entry, what a hit is charged) and the plan for storing the answer.
2. After a miss, `keep` stores a buffered answer, and `record` wraps a stream so its chunks are kept as they
   pass and stored when the upstream ends cleanly (cache/replay.py).
3. A stored stream is sent again by `replay`, at the configured pace.

A backend that fails is a miss (logged once per burst), never an error the caller sees: the cache may make a
request faster, never fail it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from inferplex.auth import MASTER
from inferplex.cache import control as control_mod
from inferplex.cache import keys
from inferplex.cache.base import MILLION, Backend, BackendStats, Cached, CacheOutcome, Entry, Purge
from inferplex.cache.replay import Recording, decode, paced
from inferplex.cache.settings import CacheBilling, CacheConfig
from inferplex.routing.pricing import deployment_price
from inferplex.targets import deployment_key

if TYPE_CHECKING:
    from inferplex.cache.semantic import SemanticIndex
    from inferplex.config import ModelConfig, Pricing
    from inferplex.context import Context
    from inferplex.families.base import Family
    from inferplex.gateway_request import GatewayRequest
    from inferplex.responses import ChatCompletionChunk

log = logging.getLogger("inferplex")

# The families whose answers are JSON objects worth keeping (by `Family.name`).
CACHED_FAMILIES = frozenset({"chat", "embedding", "responses"})
# Fields that set the answer's length: an answer cut at that length was asked for, and may be stored.
LENGTH_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
OUTAGE_LOG_EVERY_S = 60.0


def charge_ppm(billing: CacheBilling) -> int:
    """What a hit costs, in millionths of the answer's price."""
    if billing.charge == "free":
        return 0
    if billing.charge == "full":
        return MILLION
    return round(billing.fraction * MILLION)


@dataclass(slots=True)
class Plan:
    """What storing this request's answer needs (on `CacheOutcome.plan` after a miss)."""

    entry_id: str
    scope: str
    namespace: str | None
    model: str
    key_id: str | None
    stream: bool
    store: bool
    ttl_s: float
    asked_length: bool
    partition: str | None = None
    vector: bytes | None = None


class Outages:
    """A failing backend logged once per burst (every `every_s` at most, with how many were not logged)."""

    def __init__(self, every_s: float = OUTAGE_LOG_EVERY_S) -> None:
        self.every_s = every_s
        self._last = -math.inf
        self._quiet = 0

    def report(self, what: str, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s:
            self._quiet += 1
            return
        more = f" ({self._quiet} more since the last report)" if self._quiet else ""
        log.warning("response cache: %s failed, answered as a miss: %r%s", what, exc, more)
        self._last, self._quiet = now, 0


def request_json(request: GatewayRequest[Any]) -> dict[str, Any]:
    """The request JSON the key is made of: `wire()`, plus any field of the body a dialect keeps off the
    OpenAI-shaped wire (Anthropic's `thinking`, `top_k`: they change the answer on an Anthropic target)."""
    wire = request.wire()
    extras = getattr(request.body, "model_extra", None)
    if not extras:
        return wire
    missing = {k: v for k, v in extras.items() if k not in wire and v is not None}
    return {**wire, **missing} if missing else wire


class CacheService:
    """`ResponseCache` and `CacheAdmin` over one backend, with an optional semantic index."""

    def __init__(
        self,
        config: CacheConfig,
        backend: Backend,
        semantic: Callable[[], Awaitable[SemanticIndex | None]] | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.outages = Outages()
        # opens the semantic index (cache/semantic.py) the first time a request wants it
        self._open_semantic = semantic
        self._semantic: SemanticIndex | None = None
        self._semantic_lock = asyncio.Lock()
        # buffered misses on their way upstream, by entry id: identical misses wait for them (`flight`)
        self._flights: dict[str, asyncio.Future[None]] = {}

    # ---- lookup ----------------------------------------------------------------------------------------

    async def lookup(
        self,
        ctx: Context,
        family: Family[Any, Any, Any],
        model: ModelConfig,
        request: GatewayRequest[Any],
        *,
        stream: bool,
    ) -> Cached | None:
        settings = model.cache
        if family.name not in CACHED_FAMILIES or settings.enabled is False:
            return None
        started = time.perf_counter()
        asked = control_mod.parse(ctx.headers_in, request.options.cache)
        outcome = ctx.cache = CacheOutcome("miss", charge_ppm=charge_ppm(settings.billing or self.config.billing))
        try:
            cached = await self._lookup(ctx, outcome, asked, family.name, model, request, stream)
            if cached is not None:
                outcome.pricing = stored_price(model, cached.priced)
            return cached
        finally:
            outcome.lookup_ms = ctx.timings.cache_ms = (time.perf_counter() - started) * 1000
            ctx.timings.cache = outcome.status

    async def _lookup(
        self,
        ctx: Context,
        outcome: CacheOutcome,
        asked: control_mod.Control,
        family: str,
        model: ModelConfig,
        request: GatewayRequest[Any],
        stream: bool,
    ) -> Cached | None:
        settings = model.cache
        used = self.config.mode == "default_on" or asked.use
        if asked.bypass or not used or not (asked.read or asked.store):
            outcome.status = "bypass"
            return None
        principal = ctx.principal
        scope = keys.scope_of(principal, self.config.scope, shared=settings.shared)
        body = keys.normalised(family, request_json(request), model.name)
        entry_id = keys.entry_id(scope, asked.namespace, model.name, stream, body, family)
        outcome.entry = entry_id
        plan = Plan(
            entry_id,
            scope,
            asked.namespace,
            model.name,
            None if principal.key_id == MASTER.key_id else principal.key_id,
            stream,
            asked.store,
            asked.ttl_s or settings.ttl_s or self.config.ttl_s,
            any(body.get(f) is not None for f in LENGTH_FIELDS),
        )
        outcome.plan = plan
        if not asked.read:
            outcome.status = "bypass"  # no-cache: not read, stored after the call
        else:
            cached = await self._read(entry_id, asked.max_age_s, stream)
            if cached is None and (flight := self._flights.get(entry_id)) is not None:
                # the same request is on its way upstream: its answer, rather than a second call
                await asyncio.wait((flight,), timeout=self.config.coalesce_wait_s)
                cached = await self._read(entry_id, asked.max_age_s, stream)
            if cached is not None:
                outcome.status, outcome.plan = "hit", None
                return cached
        wants_semantic = asked.semantic if asked.semantic is not None else settings.semantic
        if wants_semantic and family == "chat":
            threshold = asked.threshold or settings.threshold or self.config.semantic.threshold
            found = await self._semantic_lookup(outcome, plan, body, threshold, asked, family)
            if found is not None:
                return found
        return None

    async def _read(self, entry_id: str, max_age_s: float | None, stream: bool) -> Cached | None:
        try:
            entry = await self.backend.get(entry_id)
        except Exception as exc:  # an outage is a miss
            self.outages.report(f"reading entry {entry_id[:12]}", exc)
            return None
        if entry is None or (max_age_s is not None and time.time() - entry.created_at > max_age_s):
            return None
        cached = decode(entry.value)
        if cached is None or (cached.chunks is None if stream else cached.answer is None):
            return None
        return cached

    # ---- semantic --------------------------------------------------------------------------------------

    async def semantic_index(self) -> SemanticIndex | None:
        """The semantic index, opened the first time it is wanted (the embedding model loads then; at start-up
        when a model opts in); None when it could not be opened (logged once, exact matching goes on)."""
        if self._semantic is not None or self._open_semantic is None:
            return self._semantic
        async with self._semantic_lock:
            if self._semantic is None and self._open_semantic is not None:
                opener, self._open_semantic = self._open_semantic, None
                try:
                    self._semantic = await opener()
                except Exception:
                    log.exception("response cache: the semantic index could not be opened; exact matches only")
        return self._semantic

    async def _semantic_lookup(
        self,
        outcome: CacheOutcome,
        plan: Plan,
        body: Mapping[str, Any],
        threshold: float,
        asked: control_mod.Control,
        family: str,
    ) -> Cached | None:
        """After an exact miss: the nearest stored paraphrase in the request's partition (its scope, model and
        every field but the compared text), at or above `threshold`. The vector made here is filed with the
        answer after a miss, so the next paraphrase finds it."""
        index = await self.semantic_index()
        if index is None:
            return None
        from inferplex.cache.semantic import semantic_parts

        parts = semantic_parts(body, self.config.semantic.compare)
        if parts is None:
            return None
        exact, text = parts
        if not index.fits(text):  # longer than the encoder reads: compared exactly only
            return None
        # the embedding model is part of the partition: vectors of two models are never compared
        partition = keys.partition_id(plan.scope, plan.namespace, plan.model, plan.stream, family, [index.model, exact])
        try:
            vector = await index.embed(text)
            plan.partition, plan.vector = partition, vector
            if not asked.read:
                return None
            for entry_id, similarity in await index.nearest(partition, vector, threshold):
                cached = await self._read(entry_id, asked.max_age_s, plan.stream)
                if cached is None:
                    index.forget(entry_id)  # expired, evicted or purged elsewhere: stop matching it
                    continue
                outcome.status, outcome.entry, outcome.similarity = "semantic-hit", entry_id, similarity
                outcome.plan = None
                return cached
        except Exception as exc:  # the embedder or the index failed: an exact miss, stored without a vector
            self.outages.report("the semantic lookup", exc)
            plan.partition = plan.vector = None
        return None

    # ---- storing -------------------------------------------------------------------------------------

    async def keep(self, ctx: Context, answer: Any) -> None:
        plan = _plan(ctx)
        if plan is None or not isinstance(answer, dict) or not complete(answer, plan.asked_length):
            return
        await self.store(ctx, plan, orjson.dumps({"answer": answer, "priced": producer(ctx)}))

    def record(
        self, ctx: Context, first: ChatCompletionChunk, rest: AsyncIterator[ChatCompletionChunk]
    ) -> AsyncIterator[ChatCompletionChunk]:
        plan = _plan(ctx)
        if plan is None:
            return rest

        async def stored(value: bytes) -> None:
            await self.store(ctx, plan, value)

        return Recording(first, rest, stored, plan.asked_length, self.config.max_entry_bytes, producer(ctx))

    async def store(self, ctx: Context, plan: Plan, value: bytes) -> None:
        """Put the entry (once per request), and file its vector when the lookup made one."""
        if not plan.store or len(value) > self.config.max_entry_bytes:
            return
        plan.store = False
        started = time.perf_counter()
        now = time.time()
        expires = now + plan.ttl_s
        entry = Entry(
            plan.entry_id,
            value,
            now,
            expires,
            plan.model,
            plan.scope,
            plan.namespace,
            plan.key_id,
            plan.partition if plan.vector is not None else None,
        )
        try:
            await self.backend.put(entry)
            if entry.partition is not None and plan.vector is not None and self._semantic is not None:
                await self._semantic.add(entry.partition, entry.id, plan.vector, expires)
        except Exception as exc:
            self.outages.report(f"storing entry {plan.entry_id[:12]}", exc)
        finally:
            ctx.timings.cache_ms += (time.perf_counter() - started) * 1000

    @asynccontextmanager
    async def flight(self, ctx: Context) -> AsyncIterator[None]:
        plan = _plan(ctx)
        if plan is None or plan.stream or not self.config.coalesce_wait_s or plan.entry_id in self._flights:
            yield
            return
        done = self._flights[plan.entry_id] = asyncio.get_running_loop().create_future()
        try:
            yield
        finally:
            del self._flights[plan.entry_id]
            done.set_result(None)

    # ---- replay ----------------------------------------------------------------------------------------

    def replay(self, ctx: Context, cached: Cached) -> tuple[ChatCompletionChunk, AsyncIterator[ChatCompletionChunk]]:
        chunks = cached.chunks or []
        replay = self.config.replay
        return chunks[0][1], paced(chunks, replay.pace, replay.interval_ms / 1000)

    # ---- admin -----------------------------------------------------------------------------------------

    async def stats(self) -> BackendStats:
        return await self.backend.stats()

    async def purge(self, selector: Purge) -> int:
        removed = await self.backend.purge(selector)
        if self._semantic is not None:  # the in-process index reads the backend's vectors again
            self._semantic.clear()
        return removed

    async def aclose(self) -> None:
        await self.backend.aclose()


def _plan(ctx: Context) -> Plan | None:
    outcome = ctx.cache
    plan = outcome.plan if outcome is not None else None
    return plan if isinstance(plan, Plan) and plan.store else None


def complete(answer: Mapping[str, Any], asked_length: bool) -> bool:
    """Whether a buffered answer may be stored: not an error, and not cut short unless the request set the
    length (a chat choice's `finish_reason: length`, a Responses answer `incomplete` at max_output_tokens)."""
    if "error" in answer and answer.get("error") is not None:
        return False
    status = answer.get("status")
    if status is not None and answer.get("object") == "response" and status != "completed":
        reason = (answer.get("incomplete_details") or {}).get("reason")
        return status == "incomplete" and reason == "max_output_tokens" and asked_length
    for choice in answer.get("choices") or ():
        if isinstance(choice, Mapping) and choice.get("finish_reason") == "length" and not asked_length:
            return False
    return True


def producer(ctx: Context) -> dict[str, Any] | None:
    """Who produced the answer being stored (the deployment that served, at its tier), for `stored_price`."""
    target = ctx.target
    return None if target is None else {"deployment": target.key, "tier": ctx.service_tier}


def stored_price(model: ModelConfig, priced: Mapping[str, Any] | None) -> Pricing | None:
    """A hit's price list: the deployment's that produced it (still configured), at the tier it ran on; None
    (the model's own) when the entry does not say or that deployment is gone."""
    if not priced:
        return None
    key, tier = priced.get("deployment"), priced.get("tier")
    for deployment in model.deployments:
        if deployment_key(deployment) == key:
            return deployment_price(deployment, model, tier if isinstance(tier, str) else "default")
    return None
