"""The provider adapter interface: the one seam between the pipeline and every upstream.

An adapter has four jobs (buffered chat, streamed chat, embeddings, close), like httpx's two-method
transport and TensorZero's small provider trait. It receives the request (`GatewayRequest`: an adapter that
translates reads its `body`; one that forwards OpenAI's JSON sends its `wire()`) plus the resolved `Target`
and returns OpenAI-shaped dicts (typed in `responses.py`); translation to and from its provider's
wire format is its own business, done by pure functions in its module.

Streams are async generators of `chat.completion.chunk` dicts. The pipeline pulls the first item before
it answers the caller, so an adapter must raise `GatewayError` from that first pull if the upstream
fails, and keep its connection inside the generator so that closing the generator cancels the upstream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from inferplex.canonical import ChatRequest, EmbeddingRequest
from inferplex.config import Timeouts
from inferplex.gateway_request import GatewayRequest
from inferplex.responses import ChatCompletion, ChatCompletionChunk, EmbeddingList
from inferplex.targets import Target


@dataclass(frozen=True, slots=True)
class CallerKey:
    """The caller's own key for one provider (Unify's `use_custom_keys`): used for this request only.

    It lives on the request's `CallInfo` and nowhere else: never stored, and hidden from every repr/log."""

    provider: str
    secret: str = field(repr=False)


@dataclass(slots=True)
class CallInfo:
    """What the adapter reports back besides the body: used in headers and logs.

    `caller_key`, when set, travels the other way: the provider it names uses it instead of its configured
    key; any other provider (a fallback) ignores it, so it never reaches a provider it was not meant for.

    `timeouts` travels that way too: the router sets it for each attempt (the provider's timeouts with the
    deployment's own `connect` applied) and bounds the attempt itself with its `Deadline`. When it is None
    the caller is not the router, and the adapter bounds the call itself (`http.bounded`), so no upstream
    call is ever unbounded, whoever makes it."""

    dropped_params: list[str] = field(default_factory=list)
    queued_ms: float = 0.0
    caller_key: CallerKey | None = None
    timeouts: Timeouts | None = None


class Adapter(Protocol):
    async def chat(self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo) -> ChatCompletion:
        """Return a complete `chat.completion` dict (usage included)."""
        ...

    def chat_stream(
        self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo
    ) -> AsyncIterator[ChatCompletionChunk]:
        """Yield `chat.completion.chunk` dicts; the last ones carry finish_reason and usage."""
        ...

    async def embed(self, request: GatewayRequest[EmbeddingRequest], target: Target, info: CallInfo) -> EmbeddingList:
        """Return an OpenAI embeddings `list` with usage, in the requested `encoding_format` (float or base64)."""
        ...

    async def aclose(self) -> None: ...
