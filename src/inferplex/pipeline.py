"""The pipeline: the middle of every request, whatever dialect it arrived in.

A dialect parses its wire format into the canonical request and hands it here. The pipeline then runs the
same stages for everyone, each behind a small interface so it can be developed and replaced on its own:

1. processors, pre-request (`ProcessorRun.pre`): may rewrite the request (redaction, routing policy);
2. resolve the model in the catalog, and check the caller may use it;
3. admission (`Guard.admit`): rate and concurrency limits, credit reservation;
4. routing (`Router.run`): pick a target, call its adapter, retry and fall back;
5. processors, post-response (`ProcessorRun.post` / `.stream`);
6. settlement (`Admission.settle`): real cost from real usage, usage log; a failed call costs nothing.

Nothing here knows about HTTP requests or any provider's wire format.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

from inferplex.accounts.delivered import counted_prompt_tokens
from inferplex.accounts.pricing import estimate_output_tokens
from inferplex.auth import MASTER, Principal
from inferplex.canonical import ChatRequest, EmbeddingRequest
from inferplex.catalog import Catalog, Resolved
from inferplex.config import ModelConfig
from inferplex.errors import GatewayError, InternalError, UpstreamError
from inferplex.providers.base import Adapter, CallInfo, Chunk
from inferplex.routing.options import route_options
from inferplex.targets import Target
from inferplex.timings import Timings
from inferplex.translate.openai_shapes import aiter_chunks, completion_chunks

T = TypeVar("T")

log = logging.getLogger("inferplex")

# Request ids: a random per-process prefix and a counter. Unique across replicas and restarts without a
# getrandom() syscall per request (measured at about 1% of a request's CPU).
_ID_PREFIX = "req_" + secrets.token_hex(6)
_ids = itertools.count(1)


def _new_request_id() -> str:
    return f"{_ID_PREFIX}{next(_ids):012x}"


@dataclass(slots=True)
class Attempt:
    """One try at one deployment, as the router saw it: kept on the context for the usage log."""

    deployment: str
    model: str
    outcome: str  # "ok", "error" (before the first byte), "failed_midstream", "cancelled" (the caller left)
    status: int | None = None
    error: str | None = None
    latency_ms: float = 0.0


@dataclass(slots=True)
class Context:
    """Everything the gateway learns about one request while serving it."""

    request_id: str = field(default_factory=lambda: _new_request_id())
    timings: Timings = field(default_factory=Timings.begin)
    info: CallInfo = field(default_factory=CallInfo)
    principal: Principal = MASTER
    client_ip: str | None = None
    dialect: str = "openai"
    model: ModelConfig | None = None
    target: Target | None = None
    attempts: int = 0
    attempt_log: list[Attempt] = field(default_factory=list)
    service_tier: str = "default"  # the tier that served (routing); billing prices flex from it
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    output_chars: int = 0
    # A stream that ends without the provider's usage (cut, or failed mid-way) is billed on the prompt as the
    # gateway counts it (accounts/delivered.py), set here by the stream, not on the reservation's estimate.
    prompt_tokens_counted: int | None = None
    # The error a stream's caller received after its first byte (the upstream failed mid-way); None if none.
    failure: GatewayError | None = None
    cost_micros: int | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)
    # The usage log's response body: the buffered answer, or the chunks of a streamed one. `streamed` is
    # None unless the request's log_response_body is on (the guard sets it to a list at admission).
    response: Chunk | None = None
    streamed: list[Chunk] | None = None
    # Request-level options that steer gateway stages, not the model (tags, log flags, routing prefs, ...).
    options: dict[str, Any] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        out = {"x-inferplex-request-id": self.request_id, "x-request-id": self.request_id}
        if self.target is not None:
            out["x-inferplex-provider"] = self.target.provider.name
            out["x-inferplex-model"] = self.target.upstream_model
        if self.attempts > 1:
            out["x-inferplex-attempts"] = str(self.attempts)
        if self.info.dropped_params:
            # Percent-encoded: a name can be a caller's own field name, not a valid header value as it stands.
            out["x-inferplex-dropped-params"] = ",".join(quote(p, safe="") for p in self.info.dropped_params)
        if self.timings.queued_ms > 0:
            out["x-inferplex-queued-ms"] = f"{self.timings.queued_ms:.2f}"
        if self.cost_micros is not None:
            out["x-inferplex-cost-micros"] = str(self.cost_micros)
        out.update(self.extra_headers)
        return out

    @property
    def completion_tokens(self) -> int | None:
        if not self.usage:
            return None
        value = self.usage.get("completion_tokens")
        return value if isinstance(value, int) else None


# ---- stage interfaces -------------------------------------------------------------------------------------


class Admission(Protocol):
    async def settle(self, ctx: Context, usage: dict[str, Any] | None, *, failed: bool) -> None:
        """Called exactly once: with the real usage, or `failed=True` when nothing was produced."""
        ...


class Guard(Protocol):
    async def admit(self, ctx: Context, kind: str, model: ModelConfig, request: Any) -> Admission:
        """Enforce limits and reserve the worst-case cost; raise a GatewayError to refuse."""
        ...


class Router(Protocol):
    async def run(self, ctx: Context, resolved: Resolved, call: Callable[[Target], Awaitable[T]]) -> T:
        """Call `call` on one or more of the resolved targets until one succeeds; set ctx.target/attempts."""
        ...


class ProcessorRun(Protocol):
    async def pre(
        self, ctx: Context, request: ChatRequest, raw: dict[str, Any]
    ) -> tuple[ChatRequest, dict[str, Any]]: ...

    async def post(
        self, ctx: Context, response: Chunk, again: Callable[[ChatRequest, dict[str, Any]], Awaitable[Chunk]]
    ) -> Chunk:
        """Runs on the buffered answer; `again(request, raw)` calls the model once more (a retry)."""
        ...

    def stream(self, ctx: Context, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]: ...

    @property
    def buffered(self) -> bool:
        """True when a processor needs the whole answer: a stream is then served from a buffered call."""
        ...


class _Settled:
    async def settle(self, ctx: Context, usage: dict[str, Any] | None, *, failed: bool) -> None:
        return None


class OpenGuard:
    """No limits, no billing: the single-user default."""

    async def admit(self, ctx: Context, kind: str, model: ModelConfig, request: Any) -> Admission:
        return _Settled()


class FirstTarget:
    """One attempt on the first deployment: the default until a routing strategy is configured."""

    async def run(self, ctx: Context, resolved: Resolved, call: Callable[[Target], Awaitable[T]]) -> T:
        target = ctx.target = resolved.targets[0]
        ctx.attempts = 1
        return await call(target)


# ---- streams ----------------------------------------------------------------------------------------------


def _output_chars(chunk: Chunk) -> int:
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
        first: Chunk,
        rest: AsyncIterator[Chunk],
        ctx: Context,
        admission: Admission,
        request: ChatRequest | None = None,
    ) -> None:
        self._first = first
        self._rest = rest
        self._admission: Admission | None = admission
        self._request = request
        self.ctx = ctx
        self._out: AsyncIterator[Chunk] = self._pull()

    def wrap(self, transform: Callable[[Context, AsyncIterator[Chunk]], AsyncIterator[Chunk]]) -> None:
        self._out = transform(self.ctx, self._out)

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> Chunk:
        return await self._out.__anext__()

    async def _pull(self) -> AsyncIterator[Chunk]:
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

    def _observe(self, chunk: Chunk) -> Chunk:
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
        await admission.settle(ctx, ctx.usage, failed=failed)

    async def aclose(self) -> None:
        try:
            for it in (self._out, self._rest):
                aclose = getattr(it, "aclose", None)
                if aclose is not None:
                    await aclose()
        finally:
            await self._settle(failed=False)


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


async def _first_chunk(chunks: AsyncIterator[Chunk], target: Target) -> Chunk:
    """Pull the first chunk so upstream failures surface before the caller sees a byte."""
    try:
        return await chunks.__anext__()
    except StopAsyncIteration:
        raise UpstreamError(f"provider {target.provider.name} sent an empty stream") from None
    except BaseException:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
        raise


def add_usage(total: dict[str, Any] | None, more: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two calls' token counts added up (a processor's retry is billed with the request)."""
    if not total or not more:
        return total or more
    out = dict(total)
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
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
        processors: Callable[[Context, ChatRequest], ProcessorRun | None] | None = None,
    ) -> None:
        self.catalog = catalog
        self.adapters = adapters
        self.guard: Guard = guard or OpenGuard()
        self.router: Router = router or FirstTarget()
        self._processors = processors

    def _resolve(self, ctx: Context, model: str, provider: str | None, kind: str) -> Resolved:
        resolved = self.catalog.resolve(model, provider, kind=kind)
        ctx.principal.require_model(resolved.model.name)
        ctx.model = resolved.model
        return resolved

    async def _prepare(
        self, ctx: Context, request: ChatRequest, raw: dict[str, Any]
    ) -> tuple[ChatRequest, dict[str, Any], ProcessorRun | None, Resolved, Admission]:
        run = self._processors(ctx, request) if self._processors else None
        if run is not None:
            request, raw = await run.pre(ctx, request, raw)
        ctx.options["route"] = route_options(request)
        resolved = self._resolve(ctx, request.model, request.provider_name, "chat")
        admission = await self.guard.admit(ctx, "chat", resolved.model, request)
        return request, raw, run, resolved, admission

    async def chat(self, request: ChatRequest, raw: dict[str, Any], ctx: Context) -> Chunk:
        request, raw, run, resolved, admission = await self._prepare(ctx, request, raw)
        return await self._complete(ctx, request, raw, run, resolved, admission)

    async def _complete(
        self,
        ctx: Context,
        request: ChatRequest,
        raw: dict[str, Any],
        run: ProcessorRun | None,
        resolved: Resolved,
        admission: Admission,
    ) -> Chunk:
        async def call(target: Target) -> Chunk:
            ctx.timings.mark_upstream_start()
            ctx.info.queued_ms = 0.0
            response = await self.adapters[target.provider.name].chat(request, raw, target, ctx.info)
            ctx.timings.absorb_queue(ctx.info.queued_ms)
            return response

        try:
            response = await self.router.run(ctx, resolved, call)
        except BaseException:
            await admission.settle(ctx, None, failed=True)
            raise
        ctx.timings.mark_upstream_end()
        ctx.usage = response.get("usage")
        if run is None:
            ctx.response = response
            await admission.settle(ctx, ctx.usage, failed=False)
            return response

        async def again(retry: ChatRequest, retry_raw: dict[str, Any]) -> Chunk:
            """A processor's retry: same routing and admission; its usage adds to the request's."""
            answer = await self.router.run(
                ctx, resolved, lambda t: self.adapters[t.provider.name].chat(retry, retry_raw, t, ctx.info)
            )
            ctx.timings.mark_upstream_end()
            ctx.usage = add_usage(ctx.usage, answer.get("usage"))
            return answer

        try:
            ctx.response = await run.post(ctx, response, again)
            return ctx.response
        finally:
            await admission.settle(ctx, ctx.usage, failed=False)

    async def chat_stream(self, request: ChatRequest, raw: dict[str, Any], ctx: Context) -> ChatStream:
        request, raw, run, resolved, admission = await self._prepare(ctx, request, raw)
        if run is not None and run.buffered:
            # A processor needs the whole answer: call buffered, then replay the result as a stream.
            request = request.model_copy(update={"stream": False, "stream_options": None})
            raw = {k: v for k, v in raw.items() if k not in ("stream", "stream_options")}
            response = await self._complete(ctx, request, raw, run, resolved, admission)
            chunks = completion_chunks(response, carry=("processors", "inferada"))
            return ChatStream(chunks[0], aiter_chunks(chunks[1:]), ctx, _Settled())

        async def call(target: Target) -> tuple[Chunk, AsyncIterator[Chunk]]:
            ctx.timings.mark_upstream_start()
            ctx.info.queued_ms = 0.0
            chunks = self.adapters[target.provider.name].chat_stream(request, raw, target, ctx.info)
            first = await _first_chunk(chunks, target)
            ctx.timings.absorb_queue(ctx.info.queued_ms)
            return first, chunks

        try:
            first, rest = await self.router.run(ctx, resolved, call)
        except BaseException:
            await admission.settle(ctx, None, failed=True)
            raise
        stream = ChatStream(first, rest, ctx, admission, request)
        if run is not None:
            stream.wrap(run.stream)
        return stream

    async def embed(self, request: EmbeddingRequest, raw: dict[str, Any], ctx: Context) -> dict[str, Any]:
        resolved = self._resolve(ctx, request.model, request.provider, "embedding")
        admission = await self.guard.admit(ctx, "embedding", resolved.model, request)

        async def call(target: Target) -> dict[str, Any]:
            ctx.timings.mark_upstream_start()
            return await self.adapters[target.provider.name].embed(request, raw, target, ctx.info)

        try:
            response = await self.router.run(ctx, resolved, call)
        except BaseException:
            await admission.settle(ctx, None, failed=True)
            raise
        ctx.timings.mark_upstream_end()
        ctx.usage = response.get("usage")
        ctx.response = response
        await admission.settle(ctx, ctx.usage, failed=False)
        return response
