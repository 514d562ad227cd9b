"""The provider adapter interface: the one seam between the pipeline and every upstream.

An adapter implements one small interface per endpoint family it serves (`families/`: chat's `chat` and
`chat_stream`, embeddings' `embed`, ...), like httpx's two-method transport and TensorZero's small provider
trait, plus `aclose`. It receives the request (`GatewayRequest`: an adapter that translates reads its `body`;
one that forwards OpenAI's JSON sends its `wire()`) plus the resolved `Target` and returns OpenAI-shaped
dicts (typed in `responses.py`); translation to and from its provider's wire format is its own business,
done by pure functions in its module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from inferplex.config import Timeouts


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
    call is ever unbounded, whoever makes it.

    `idempotency_key`, when set, is the same for every attempt of one request, for a provider that takes one
    (Bedrock's `clientRequestToken`): an attempt retried after its answer was lost then finds the job the
    first one started instead of starting (and billing) a second."""

    dropped_params: list[str] = field(default_factory=list)
    queued_ms: float = 0.0
    caller_key: CallerKey | None = None
    timeouts: Timeouts | None = None
    idempotency_key: str | None = None


class Adapter(Protocol):
    """What every adapter has. What it serves is the endpoint families' business: an adapter implements the
    optional interface of each family it supports (`families.chat.ChatAdapter`, `families.embeddings.
    EmbeddingAdapter`, `families.token_count.TokenCounter`, ...), and `families.registry.check_adapters`
    checks at start-up that every model's providers implement what its type needs."""

    async def aclose(self) -> None: ...
