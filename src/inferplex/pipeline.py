"""The pipeline: the middle of every request, whatever dialect it arrived in.

A dialect parses its wire format into the canonical request and hands it here; the pipeline resolves the
model to a target, calls that target's adapter, records timings and usage on the request's `Context`, and
hands back canonical OpenAI-shaped results for the dialect to render. Nothing here knows about HTTP
requests or any provider's wire format.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from inferplex.canonical import ChatRequest, EmbeddingRequest
from inferplex.catalog import Catalog
from inferplex.errors import UpstreamError
from inferplex.providers.base import Adapter, CallInfo, Chunk, Target
from inferplex.timings import Timings


@dataclass(slots=True)
class Context:
    """Everything the gateway learns about one request while serving it."""

    request_id: str = field(default_factory=lambda: "req_" + secrets.token_hex(12))
    timings: Timings = field(default_factory=Timings.begin)
    info: CallInfo = field(default_factory=CallInfo)
    target: Target | None = None
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None

    def headers(self) -> dict[str, str]:
        out = {"x-inferplex-request-id": self.request_id, "x-request-id": self.request_id}
        if self.target is not None:
            out["x-inferplex-provider"] = self.target.provider.name
            out["x-inferplex-model"] = self.target.upstream_model
        if self.info.dropped_params:
            out["x-inferplex-dropped-params"] = ",".join(self.info.dropped_params)
        if self.timings.queued_ms > 0:
            out["x-inferplex-queued-ms"] = f"{self.timings.queued_ms:.2f}"
        return out

    @property
    def completion_tokens(self) -> int | None:
        if not self.usage:
            return None
        value = self.usage.get("completion_tokens")
        return value if isinstance(value, int) else None


def _has_output(chunk: Chunk) -> bool:
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("tool_calls") or delta.get("refusal") or delta.get("reasoning_content"):
            return True
    return False


class ChatStream:
    """A started upstream stream: the first chunk already in hand, the rest pulled on demand.

    Closing it (or the caller leaving) closes the adapter's generator, which cancels the upstream request.
    """

    def __init__(self, first: Chunk, rest: AsyncIterator[Chunk], ctx: Context) -> None:
        self._first: Chunk | None = first
        self._rest = rest
        self.ctx = ctx

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> Chunk:
        if self._first is not None:
            chunk, self._first = self._first, None
        else:
            try:
                chunk = await self._rest.__anext__()
            except StopAsyncIteration:
                self.ctx.timings.mark_upstream_end()
                raise
        self._observe(chunk)
        return chunk

    def _observe(self, chunk: Chunk) -> None:
        usage = chunk.get("usage")
        if usage:
            self.ctx.usage = usage
        if not self.ctx.timings.first_token and _has_output(chunk):
            self.ctx.timings.mark_first_token()
        for choice in chunk.get("choices") or ():
            if choice.get("finish_reason"):
                self.ctx.finish_reason = choice["finish_reason"]

    async def aclose(self) -> None:
        aclose = getattr(self._rest, "aclose", None)
        if aclose is not None:
            await aclose()


class Pipeline:
    def __init__(self, catalog: Catalog, adapters: dict[str, Adapter]) -> None:
        self.catalog = catalog
        self.adapters = adapters

    def _target(self, model: str, provider: str | None, kind: str) -> Target:
        resolved = self.catalog.resolve(model, provider, kind=kind)
        return resolved.targets[0]

    async def chat(self, request: ChatRequest, raw: dict[str, Any], ctx: Context) -> Chunk:
        target = ctx.target = self._target(request.model, request.provider, "chat")
        adapter = self.adapters[target.provider.name]
        ctx.timings.mark_upstream_start()
        response = await adapter.chat(request, raw, target, ctx.info)
        ctx.timings.mark_upstream_end()
        ctx.usage = response.get("usage")
        return response

    async def chat_stream(self, request: ChatRequest, raw: dict[str, Any], ctx: Context) -> ChatStream:
        target = ctx.target = self._target(request.model, request.provider, "chat")
        adapter = self.adapters[target.provider.name]
        ctx.timings.mark_upstream_start()
        chunks = adapter.chat_stream(request, raw, target, ctx.info)
        try:
            first = await chunks.__anext__()
        except StopAsyncIteration:
            raise UpstreamError(f"provider {target.provider.name} sent an empty stream") from None
        except BaseException:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()
            raise
        stream = ChatStream(first, chunks, ctx)
        return stream

    async def embed(self, request: EmbeddingRequest, raw: dict[str, Any], ctx: Context) -> dict[str, Any]:
        target = ctx.target = self._target(request.model, request.provider, "embedding")
        adapter = self.adapters[target.provider.name]
        ctx.timings.mark_upstream_start()
        response = await adapter.embed(request, raw, target)
        ctx.timings.mark_upstream_end()
        ctx.usage = response.get("usage")
        return response
