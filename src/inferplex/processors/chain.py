"""The processors of one request, run as the pipeline's `ProcessorRun`, and the factory that builds them.

`factory(env)` returns what `Pipeline(processors=...)` takes: a function of (context, request) that reads
the request's list (either spelling), the key's `default_processors` and `enforced_processors` settings,
and returns a `Chain`, or None when nothing is to run (the common case costs one dict lookup).

The chain runs `pre` hooks in processor order, `post` hooks and stream filters in reverse order (the last to
touch the request is the first to see the answer), times all of it into `timings.processors_ms`, and adds
the metadata block to the answer: `processors` always, and `inferada` as well when the request used
Inferada's spelling. In a stream the block rides on the chunk that carries `finish_reason`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from inferplex.canonical import ChatRequest
from inferplex.catalog import Catalog
from inferplex.errors import InvalidRequest, PermissionDenied
from inferplex.gateway_request import GatewayRequest
from inferplex.processors.base import SCOPES, Again, Env, Exchange, Processor, known_processors, load_factory
from inferplex.processors.spec import DEFAULTS_KEY, ENFORCED_KEY, Requested, Spec, key_specs, merge
from inferplex.responses import ChatCompletion, ChatCompletionChunk
from inferplex.targets import Target

if TYPE_CHECKING:
    from inferplex.auth import Principal
    from inferplex.context import Context


def check_known(specs: list[Spec] | None, param: str) -> None:
    """A 400 naming the first unknown processor and where it was listed."""
    known = known_processors()
    for i, spec in enumerate(specs or ()):
        if spec.name not in known:
            raise InvalidRequest(
                f"Unknown processor `{spec.name}` (known: {', '.join(sorted(known))}).",
                param=f"{param}[{i}]",
                code="unknown_processor",
            )


def check_scopes(specs: list[Spec] | None, param: str, principal: Principal) -> None:
    """A 403 naming the first processor the request names whose scope the key or token lacks. Only the
    request's own list is checked: the key's defaults and enforced processors are its operator's choice."""
    for i, spec in enumerate(specs or ()):
        scope = SCOPES.get(spec.name)
        if scope is not None and scope not in principal.scopes and "admin" not in principal.scopes:
            raise PermissionDenied(
                f"Processor `{spec.name}` needs the '{scope}' scope, which this key does not have.",
                param=f"{param}[{i}]",
                code="scope_not_allowed",
            )


def build(specs: list[Spec], env: Env) -> list[Processor]:
    return sorted((load_factory(spec.name)(spec.options, env) for spec in specs), key=lambda p: p.order)


class Chain:
    def __init__(self, processors: list[Processor], req: Requested, enforced: set[str]) -> None:
        self.processors = processors
        self.inferada = req.inferada
        self.enforced = enforced
        self.exchange = Exchange(language=req.language)

    @property
    def buffered(self) -> bool:
        return any(p.buffered for p in self.processors)

    @property
    def segments(self) -> list[str]:
        return self.exchange.segments

    def metadata(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for p in self.processors:
            out[p.name] = {**p.metadata, **({"enforced": True} if p.name in self.enforced else {})}
        return out

    def _attach(self, target: ChatCompletion | ChatCompletionChunk) -> None:
        block = self.metadata()
        target["processors"] = block
        if self.inferada:
            target["inferada"] = block

    async def pre(self, ctx: Context, request: GatewayRequest[ChatRequest]) -> GatewayRequest[ChatRequest]:
        self.exchange.may_use = ctx.principal.may_use
        started = time.perf_counter()
        try:
            for p in self.processors:
                request = await p.pre(self.exchange, request)
        finally:
            ctx.timings.processors_ms += (time.perf_counter() - started) * 1000
        return request

    async def post(self, ctx: Context, response: ChatCompletion, again: Again) -> ChatCompletion:
        started = time.perf_counter()
        upstream_ms = 0.0

        async def timed_again(request: GatewayRequest[ChatRequest]) -> ChatCompletion:
            # A retry's time is the model's, not the processors'.
            nonlocal upstream_ms
            t = time.perf_counter()
            try:
                return await again(request)
            finally:
                upstream_ms += (time.perf_counter() - t) * 1000

        try:
            for p in reversed(self.processors):
                response = await p.post(self.exchange, response, timed_again)
        finally:
            ctx.timings.processors_ms += (time.perf_counter() - started) * 1000 - upstream_ms
        self._attach(response)
        return response

    def stream(self, ctx: Context, chunks: AsyncIterator[ChatCompletionChunk]) -> AsyncIterator[ChatCompletionChunk]:
        waited = [0.0]
        out = _waiting(chunks, waited)
        for p in reversed(self.processors):
            out = p.stream(self.exchange, out)
        return self._timed_stream(ctx, out, waited)

    async def _timed_stream(
        self, ctx: Context, chunks: AsyncIterator[ChatCompletionChunk], waited: list[float]
    ) -> AsyncIterator[ChatCompletionChunk]:
        """The filters' own time is the time to get each chunk through them less the wait for the upstream."""
        attached = False
        it = chunks.__aiter__()
        while True:
            started, before = time.perf_counter(), waited[0]
            try:
                chunk = await it.__anext__()
            except StopAsyncIteration:
                return
            ctx.timings.processors_ms += (time.perf_counter() - started) * 1000 - (waited[0] - before)
            if not attached and any(c.get("finish_reason") for c in chunk.get("choices") or ()):
                self._attach(chunk)
                attached = True
            yield chunk


async def _waiting(
    chunks: AsyncIterator[ChatCompletionChunk], waited: list[float]
) -> AsyncIterator[ChatCompletionChunk]:
    it = chunks.__aiter__()
    while True:
        started = time.perf_counter()
        try:
            chunk = await it.__anext__()
        except StopAsyncIteration:
            return
        finally:
            waited[0] += (time.perf_counter() - started) * 1000
        yield chunk


def _specs(principal: Principal, req: Requested) -> tuple[list[Spec], set[str]]:
    """What runs for a request (its list, or the key's defaults, plus the key's enforced ones), each name
    known and the request's allowed by the key's scopes; and which of them the key enforces."""
    param = "inferada.processors" if req.inferada else "processors"
    check_known(req.specs, param)
    check_scopes(req.specs, param, principal)
    enforced = key_specs(principal.enforced_processors, ENFORCED_KEY)
    defaults = key_specs(principal.default_processors, DEFAULTS_KEY)
    check_known(enforced, ENFORCED_KEY)
    check_known(defaults, DEFAULTS_KEY)
    return merge(req.specs, defaults, enforced), {s.name for s in enforced}


def _none_to_run(principal: Principal, req: Requested) -> bool:
    return req.specs is None and not principal.enforced_processors and not principal.default_processors


def factory(env: Env) -> Callable[[Context, GatewayRequest[ChatRequest]], Chain | None]:
    def make(ctx: Context, request: GatewayRequest[ChatRequest]) -> Chain | None:
        req = request.options.processors  # parsed by the dialect (gateway_request.py)
        if _none_to_run(ctx.principal, req):
            return None  # the common case, decided without parsing anything
        specs, enforced = _specs(ctx.principal, req)
        if not specs:
            return None
        return Chain(build(specs, env), req, enforced)

    return make


def stream_by_default(request: GatewayRequest[ChatRequest], principal: Principal) -> GatewayRequest[ChatRequest]:
    """Inferada's default for a request that names its extension and omits `stream` (seed 004): a stream,
    unless a processor that would run needs the whole answer, then one buffered JSON answer. OpenAI's SDKs
    omit `stream` when it is false, so a request without the extension keeps OpenAI's default."""
    req = request.options.processors
    if not req.inferada or request.body.stream is not None:
        return request
    whole = False
    if not _none_to_run(principal, req):
        specs, _ = _specs(principal, req)
        whole = any(p.buffered for p in build(specs, Env()))
    return request.replace(request.body.model_copy(update={"stream": not whole}))


def gateway_factory(catalog: Catalog, router: object) -> Callable[[Context, GatewayRequest[ChatRequest]], Chain | None]:
    """The factory as the app wires it: the catalog, and time to first token from the router's statistics."""
    stats = getattr(router, "stats", None)

    def latency_ms(target: Target) -> float | None:
        return None if stats is None else stats[target.key].ttft_ms

    return factory(Env(catalog, latency_ms))
