"""The pipeline: the middle of every request, whatever dialect it arrived in.

A dialect parses its wire format into a `GatewayRequest` (the canonical request and the gateway's options)
and hands it here. The pipeline then runs the same stages for everyone, each behind a small interface so it
can be developed and replaced on its own:

1. processors, pre-request (`ProcessorRun.pre`): may rewrite the request (redaction, routing policy);
2. resolve the model in the catalog, and check the caller may use it;
3. admission (`Guard.admit`): rate and concurrency limits, credit reservation;
4. routing (`Router.run`): pick a target, call its adapter, retry and fall back;
5. processors, post-response (`ProcessorRun.post` / `.stream`);
6. settlement (`Admission.settle`): real cost from real usage, usage log; a failed call costs nothing.

Nothing here knows about HTTP requests or any provider's wire format.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Literal, Protocol, TypeVar, cast

from inferplex.accounts.delivered import counted_prompt_tokens
from inferplex.accounts.pricing import estimate_output_tokens
from inferplex.cache.base import Cached, ResponseCache
from inferplex.canonical import ChatRequest
from inferplex.catalog import Catalog, Resolved
from inferplex.config import ModelConfig
from inferplex.context import Context
from inferplex.errors import GatewayError, InternalError, UpstreamError
from inferplex.families.base import Family
from inferplex.families.chat import CHAT
from inferplex.gateway_request import GatewayRequest
from inferplex.prompting.assembly import assemble
from inferplex.providers.base import Adapter
from inferplex.responses import ChatCompletion, ChatCompletionChunk, Usage
from inferplex.routing.options import route_options
from inferplex.targets import Target
from inferplex.translate.openai_shapes import aiter_chunks, completion_chunks

T = TypeVar("T")
M = TypeVar("M")  # a family's answer: a JSON object, or what a media family answers (audio bytes)
Iface = TypeVar("Iface")

log = logging.getLogger("inferplex")

# ---- stage interfaces -------------------------------------------------------------------------------------


class Admission(Protocol):
    async def settle(self, ctx: Context, usage: Usage | None, *, failed: bool) -> None:
        """Called exactly once: with the real usage, or `failed=True` when nothing was produced."""
        ...


class Guard(Protocol):
    async def admit(
        self, ctx: Context, family: Family[Any, Any, Any], model: ModelConfig, request: GatewayRequest[Any]
    ) -> Admission:
        """Enforce limits and reserve the worst-case cost; raise a GatewayError to refuse."""
        ...


class Router(Protocol):
    async def run(self, ctx: Context, resolved: Resolved, call: Callable[[Target], Awaitable[T]]) -> T:
        """Call `call` on one or more of the resolved targets until one succeeds; set ctx.target/attempts."""
        ...


class ProcessorRun(Protocol):
    async def pre(self, ctx: Context, request: GatewayRequest[ChatRequest]) -> GatewayRequest[ChatRequest]: ...

    async def post(
        self,
        ctx: Context,
        response: ChatCompletion,
        again: Callable[[GatewayRequest[ChatRequest]], Awaitable[ChatCompletion]],
    ) -> ChatCompletion:
        """Runs on the buffered answer; `again(request)` calls the model once more (a retry)."""
        ...

    def stream(
        self, ctx: Context, chunks: AsyncIterator[ChatCompletionChunk]
    ) -> AsyncIterator[ChatCompletionChunk]: ...

    @property
    def buffered(self) -> bool:
        """True when a processor needs the whole answer: a stream is then served from a buffered call."""
        ...

    @property
    def segments(self) -> list[str]:
        """What the processors add to the system prompt (`prompting.assemble` puts it after the model's own)."""
        ...


class CustomResolver(Protocol):
    """Models the catalog does not hold, found per request (Unify's `name@custom`: custom_endpoints/)."""

    def claims(self, model: str, provider: str | None) -> bool: ...

    async def resolve(self, ctx: Context, model: str, provider: str | None) -> Resolved: ...


class _Settled:
    async def settle(self, ctx: Context, usage: Usage | None, *, failed: bool) -> None:
        return None


class OpenGuard:
    """No limits, no billing: the single-user default."""

    async def admit(
        self, ctx: Context, family: Family[Any, Any, Any], model: ModelConfig, request: GatewayRequest[Any]
    ) -> Admission:
        return _Settled()


class FirstTarget:
    """One attempt on the first deployment: the default until a routing strategy is configured."""

    async def run(self, ctx: Context, resolved: Resolved, call: Callable[[Target], Awaitable[T]]) -> T:
        target = ctx.target = resolved.targets[0]
        ctx.attempts = 1
        return await call(target)


# ---- streams ----------------------------------------------------------------------------------------------


def _output_chars(chunk: ChatCompletionChunk) -> int:
    n = 0
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        n += len(delta.get("content") or "") + len(delta.get("reasoning_content") or "")
        for call in delta.get("tool_calls") or ():
            n += len((call.get("function") or {}).get("arguments") or "")
    return n


class ChatStream:
    """A started upstream stream: the first chunk already in hand, the rest pulled on demand.

    Closing it (or the caller leaving) closes the adapter's generator, which cancels the upstream request,
    and then settles the admission with whatever usage was seen, so a cut stream is billed for what was
    produced and no more. Stream processors wrap the observed chunks with `wrap`.

    An upstream that fails mid-way settles at once, before the error reaches the dialect: the caller is
    billed for what it received (nothing if no output came), and the error it gets says what that cost
    (`failure_message`), as the usage row does (docs/accounts.md, "Streams that fail mid-way").
    """

    def __init__(
        self,
        first: ChatCompletionChunk,
        rest: AsyncIterator[ChatCompletionChunk],
        ctx: Context,
        admission: Admission,
        request: ChatRequest | None = None,
    ) -> None:
        self._first = first
        self._rest = rest
        self._admission: Admission | None = admission
        self._request = request
        self.ctx = ctx
        self._out: AsyncIterator[ChatCompletionChunk] = self._pull()

    def wrap(
        self, transform: Callable[[Context, AsyncIterator[ChatCompletionChunk]], AsyncIterator[ChatCompletionChunk]]
    ) -> None:
        self._out = transform(self.ctx, self._out)

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> ChatCompletionChunk:
        return await self._out.__anext__()

    async def _pull(self) -> AsyncIterator[ChatCompletionChunk]:
        try:
            yield self._observe(self._first)
            async for chunk in self._rest:
                yield self._observe(chunk)
        except GatewayError as err:
            await self._failed(err)
            raise
        except Exception as exc:  # a defect, not a provider's error: logged, and settled as a failure all the same
            log.exception("stream failed", extra={"request_id": self.ctx.request_id})
            internal = InternalError(f"The stream failed (request id {self.ctx.request_id}).")
            await self._failed(internal)
            raise internal from exc
        self.ctx.timings.mark_upstream_end()

    def _observe(self, chunk: ChatCompletionChunk) -> ChatCompletionChunk:
        if self.ctx.streamed is not None:
            self.ctx.streamed.append(chunk)
        usage = chunk.get("usage")
        if usage:
            self.ctx.usage = usage
        produced = _output_chars(chunk)
        if produced:
            self.ctx.output_chars += produced
            if not self.ctx.timings.first_token:
                self.ctx.timings.mark_first_token()
        for choice in chunk.get("choices") or ():
            if choice.get("finish_reason"):
                self.ctx.finish_reason = choice["finish_reason"]
        return chunk

    async def _failed(self, err: GatewayError) -> None:
        """The upstream failed after the first byte: settle now, for what the caller received."""
        ctx = self.ctx
        ctx.failure = err
        await self._settle(failed=not ctx.output_chars)
        if ctx.principal.account_id is not None:  # billed to an account: the error says what it cost
            err.message = failure_message(ctx)

    async def _settle(self, *, failed: bool) -> None:
        admission, self._admission = self._admission, None
        if admission is None:
            return
        ctx = self.ctx
        if not ctx.timings.upstream_end:
            ctx.timings.mark_upstream_end()
        if ctx.usage is None and self._request is not None:
            ctx.prompt_tokens_counted = counted_prompt_tokens(self._request)
        await _settle(admission, ctx, ctx.usage, failed=failed)

    async def aclose(self) -> None:
        try:
            for it in (self._out, self._rest):
                aclose = getattr(it, "aclose", None)
                if aclose is not None:
                    await aclose()
        finally:
            await self._settle(failed=False)


async def _settle(admission: Admission, ctx: Context, usage: Usage | None, *, failed: bool) -> None:
    """`admission.settle`, timed as the trace's settle stage."""
    started = time.perf_counter()
    try:
        await admission.settle(ctx, usage, failed=failed)
    finally:
        ctx.stage("settle", started)


def failure_message(ctx: Context) -> str:
    """The message of the error a stream that failed mid-way ended with, and what it was charged for it.

    Built from the settled context (cost, the provider's usage or the gateway's counts), so the caller's
    error and the usage row (accounts/guard.py) say the same. A caller without an account is charged nothing
    and gets the provider's message as it was."""
    err = ctx.failure
    assert err is not None
    if ctx.principal.account_id is None:
        return err.message
    if not ctx.output_chars:
        return f"{err.message} Nothing was delivered: charged 0 micro-USD."
    if ctx.usage:
        prompt, output = ctx.usage.get("prompt_tokens"), ctx.usage.get("completion_tokens")
    else:
        prompt, output = ctx.prompt_tokens_counted or 0, estimate_output_tokens(ctx.output_chars)
    return (
        f"{err.message} Charged {ctx.cost_micros or 0} micro-USD for what was delivered: "
        f"{prompt} prompt and {output} output tokens."
    )


def failure_error(ctx: Context) -> dict[str, Any]:
    """The error of a stream that failed mid-way, for its usage row: as its caller received it."""
    err = ctx.failure
    assert err is not None
    return {"type": err.type, "code": err.code, "message": failure_message(ctx)}


async def first_item(items: AsyncIterator[T], target: Target) -> T:
    """Pull a stream's first item (a chunk, an event) so upstream failures surface before the caller sees a
    byte, while the router can still retry or the dialect answer an HTTP error."""
    try:
        return await items.__anext__()
    except StopAsyncIteration:
        raise UpstreamError(f"provider {target.provider.name} sent an empty stream") from None
    except BaseException:
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()
        raise


_COUNTS: tuple[Literal["prompt_tokens", "completion_tokens", "total_tokens"], ...] = (
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
)


def add_usage(total: Usage | None, more: Usage | None) -> Usage | None:
    """Two calls' token counts added up (a processor's retry is billed with the request)."""
    if not total or not more:
        return total or more
    out: Usage = {**total}
    for key in _COUNTS:
        if isinstance(more.get(key), int):
            out[key] = int(out.get(key) or 0) + more[key]
    return out


# ---- the pipeline -----------------------------------------------------------------------------------------


class Pipeline:
    def __init__(
        self,
        catalog: Catalog,
        adapters: dict[str, Adapter],
        *,
        guard: Guard | None = None,
        router: Router | None = None,
        processors: Callable[[Context, GatewayRequest[ChatRequest]], ProcessorRun | None] | None = None,
    ) -> None:
        self.catalog = catalog
        self.adapters = adapters
        self.guard: Guard = guard or OpenGuard()
        self.router: Router = router or FirstTarget()
        self._processors = processors
        self.custom: CustomResolver | None = None  # set by the app when custom endpoints are configured
        # The response cache (cache/), set by the app when the `cache` section is on. It stands where the
        # router would be called: a hit is admitted, post-processed and settled like an upstream's answer.
        self.cache: ResponseCache | None = None

    def with_guard(self, guard: Guard) -> Pipeline:
        """A pipeline sharing everything with this one but its guard: the batch worker's, whose guard holds each
        line's reservation until its result is recorded (batches/deferring.py)."""
        other = Pipeline(self.catalog, self.adapters, guard=guard, router=self.router, processors=self._processors)
        other.custom = self.custom
        other.cache = self.cache
        return other

    def resolve(self, ctx: Context, model: str, provider: str | None, family: Family[Any, Any, Any]) -> Resolved:
        """The model and its targets, for a caller allowed to use it (a 400/403/404 in the caller's dialect)."""
        resolved = self.catalog.resolve(model, provider, kind=family.model_type)
        ctx.principal.require_model(resolved.model.name)
        ctx.model = resolved.model
        ctx.operation = family.name
        return resolved

    def adapter(self, family: Family[Any, Iface, Any], target: Target) -> Iface:
        """The target's adapter, as the family's interface: `families.registry.check_adapters` made sure at
        start-up that every deployment of a model of the family's type is on a provider that implements it."""
        return cast(Iface, self.adapters[target.provider.name])

    async def run(self, family: Family[Any, Any, M], ctx: Context, request: GatewayRequest[Any]) -> M:
        """The path of every family without processors or streams: resolve, admit, route, settle. Each
        attempt is the family's `invoke` on the target's adapter; a new family needs nothing here."""
        invoke = family.invoke
        if invoke is None:
            raise TypeError(f"the {family.name} family has no single call to route")
        ctx.request = request
        resolved = self.resolve(ctx, request.body.model, request.options.provider_name, family)
        cached = (
            await self.look_up(ctx, family, resolved.model, request, stream=False) if self.cache is not None else None
        )
        started = time.perf_counter()
        admission = await self.guard.admit(ctx, family, resolved.model, request)
        ctx.stage("limits", started)

        async def call(target: Target) -> M:
            ctx.timings.mark_upstream_start()
            return await invoke(self.adapter(family, target), request, target, ctx.info)

        if cached is not None and cached.answer is not None:
            response = cast(M, cached.answer)
        else:
            response = await self.routed_and_kept(ctx, resolved, admission, call)
        ctx.answer = response
        if isinstance(response, Mapping):
            ctx.usage = cast("Usage | None", response.get("usage"))
            ctx.response = response
        await _settle(admission, ctx, ctx.usage, failed=False)
        return response

    async def routed(
        self,
        ctx: Context,
        resolved: Resolved,
        admission: Admission,
        call: Callable[[Target], Awaitable[T]],
        *,
        stream: bool = False,
    ) -> T:
        """Route `call`; a call that fails on every target settles the admission as failed (it costs nothing),
        with the router's error on the context for the usage row. On success settling is the caller's: a
        processor may run first, and a stream settles when it ends (so its upstream part is not over yet)."""
        started = time.perf_counter()
        try:
            response = await self.router.run(ctx, resolved, call)
        except BaseException as exc:
            ctx.stage("routing", started)
            ctx.routing_error = exc
            await _settle(admission, ctx, None, failed=True)
            raise
        ctx.stage("routing", started)
        if not stream:
            ctx.timings.mark_upstream_end()
        return response

    async def look_up(
        self,
        ctx: Context,
        family: Family[Any, Any, Any],
        model: ModelConfig,
        request: GatewayRequest[Any],
        *,
        stream: bool,
    ) -> Cached | None:
        """The cache's stored answer, asked before admission: a malformed cache control is a 400 with nothing
        reserved, and a hit is then admitted (limits, its charge reserved) like any answer."""
        if self.cache is None:
            return None
        return await self.cache.lookup(ctx, family, model, request, stream=stream)

    async def routed_and_kept(
        self, ctx: Context, resolved: Resolved, admission: Admission, call: Callable[[Target], Awaitable[T]]
    ) -> T:
        """A buffered call routed (`routed`) and, after a miss the cache looked up, its answer stored before
        anything renders it; identical misses meanwhile wait for it (`ResponseCache.flight`)."""
        cache = self.cache
        if cache is None or ctx.cache is None:
            return await self.routed(ctx, resolved, admission, call)
        async with cache.flight(ctx):
            response = await self.routed(ctx, resolved, admission, call)
            await cache.keep(ctx, response)
        return response

    async def _prepare(
        self, ctx: Context, request: GatewayRequest[ChatRequest], *, stream: bool = False
    ) -> tuple[GatewayRequest[ChatRequest], ProcessorRun | None, Resolved, Admission, Cached | None]:
        ctx.operation, ctx.request = CHAT.name, request
        run = self._processors(ctx, request) if self._processors else None
        if run is not None:
            started = time.perf_counter()
            request = await run.pre(ctx, request)
            ctx.stage("processors", started)
        ctx.route = route_options(request)
        model, provider = request.body.model, request.options.provider_name
        if self.custom is not None and self.custom.claims(model, provider):
            resolved = await self.custom.resolve(ctx, model, provider)
        else:
            resolved = self.resolve(ctx, model, provider, CHAT)
        # The one system prompt (the model's, the processors' segments, the caller's), before the estimate counts it.
        request = assemble(request, resolved.model, run.segments if run is not None else ())
        # A stream whose processors need the whole answer is served from a buffered call: its buffered entry.
        buffered = stream and run is not None and run.buffered
        cached = None
        if self.cache is not None:  # no coroutine per request for a gateway without a cache
            cached = await self.look_up(ctx, CHAT, resolved.model, request, stream=stream and not buffered)
        started = time.perf_counter()
        admission = await self.guard.admit(ctx, CHAT, resolved.model, request)
        ctx.stage("limits", started)
        return request, run, resolved, admission, cached

    async def chat(self, request: GatewayRequest[ChatRequest], ctx: Context) -> ChatCompletion:
        request, run, resolved, admission, cached = await self._prepare(ctx, request)
        return await self._complete(ctx, request, run, resolved, admission, cached)

    async def _complete(
        self,
        ctx: Context,
        request: GatewayRequest[ChatRequest],
        run: ProcessorRun | None,
        resolved: Resolved,
        admission: Admission,
        cached: Cached | None,
    ) -> ChatCompletion:
        async def call(target: Target) -> ChatCompletion:
            ctx.timings.mark_upstream_start()
            ctx.info.queued_ms = 0.0
            response = await self.adapter(CHAT, target).chat(request, target, ctx.info)
            ctx.timings.absorb_queue(ctx.info.queued_ms)
            return response

        if cached is not None and cached.answer is not None:
            response = cast(ChatCompletion, cached.answer)
        else:
            response = await self.routed_and_kept(ctx, resolved, admission, call)
        ctx.usage = response.get("usage")
        if run is None:
            ctx.response = response
            await _settle(admission, ctx, ctx.usage, failed=False)
            return response

        async def again(retry: GatewayRequest[ChatRequest]) -> ChatCompletion:
            """A processor's retry: same routing and admission; its usage adds to the request's. The retry is
            built from the request the processor saw before assembly, so it is assembled in turn."""
            retry = assemble(retry, resolved.model, run.segments)
            answer = await self.router.run(ctx, resolved, lambda t: self.adapter(CHAT, t).chat(retry, t, ctx.info))
            ctx.timings.mark_upstream_end()
            ctx.usage = add_usage(ctx.usage, answer.get("usage"))
            return answer

        try:
            started = time.perf_counter()
            ctx.response = await run.post(ctx, response, again)
            ctx.stage("processors", started)
            return ctx.response
        finally:
            await _settle(admission, ctx, ctx.usage, failed=False)

    async def chat_stream(self, request: GatewayRequest[ChatRequest], ctx: Context) -> ChatStream:
        request, run, resolved, admission, cached = await self._prepare(ctx, request, stream=True)
        if run is not None and run.buffered:
            # A processor needs the whole answer: call buffered, then replay the result as a stream.
            request = request.replace(request.body.model_copy(update={"stream": None, "stream_options": None}))
            response = await self._complete(ctx, request, run, resolved, admission, cached)
            chunks = completion_chunks(response, carry=("processors", "inferada"))
            return ChatStream(chunks[0], aiter_chunks(chunks[1:]), ctx, _Settled())

        async def call(target: Target) -> tuple[ChatCompletionChunk, AsyncIterator[ChatCompletionChunk]]:
            ctx.timings.mark_upstream_start()
            ctx.info.queued_ms = 0.0
            chunks = self.adapter(CHAT, target).chat_stream(request, target, ctx.info)
            first = await first_item(chunks, target)
            ctx.timings.absorb_queue(ctx.info.queued_ms)
            return first, chunks

        cache = self.cache
        if cache is not None and cached is not None and cached.chunks:
            first, rest = cache.replay(ctx, cached)
        else:
            first, rest = await self.routed(ctx, resolved, admission, call, stream=True)
            if cache is not None and ctx.cache is not None:
                rest = cache.record(ctx, first, rest)
        stream = ChatStream(first, rest, ctx, admission, request.body)
        if run is not None:
            stream.wrap(run.stream)
        return stream
