"""What an endpoint family is: the one declaration the pipeline, the guard and the start-up check read.

A family is data, not a class to subclass (Envoy AI Gateway's endpoint specs, TensorZero's function kinds):
the generic path in `pipeline.py` takes one and needs no branch per family, and a new family is a new module
with one of these in it, plus its dialect routes and the adapters that implement its interface.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from inferplex.accounts.pricing import Media, Tokens
from inferplex.config import ModelConfig
from inferplex.gateway_request import GatewayRequest
from inferplex.providers.base import CallInfo
from inferplex.targets import Target

Req = TypeVar("Req")
Iface = TypeVar("Iface")
Res = TypeVar("Res")


class Unit(enum.Enum):
    """What a family's prices count. Token families bill input and output tokens (`accounts/pricing.py`); the
    media families bill images, seconds of audio or video, or characters of speech."""

    TOKENS = "tokens"
    IMAGES = "images"
    SECONDS = "seconds"
    CHARACTERS = "characters"


class Meter(Protocol):
    """How a family not priced in tokens alone counts what it bills (`accounts/pricing.media_cost_micros`).

    `worst` is what the guard reserves before the call (every image at the largest size asked for, the
    whole of the input text read aloud, all the seconds of video asked for); `used` what the answer
    reports it produced, which settlement bills. A family without a meter is priced in tokens."""

    def worst(self, request: Any, model: ModelConfig) -> tuple[Tokens, Media]: ...

    def used(self, request: Any, answer: Any) -> tuple[Tokens, Media]: ...


@dataclass(frozen=True, slots=True)
class Family(Generic[Req, Iface, Res]):
    """One endpoint family: requests of type `Req` (the canonical body), served by adapters implementing
    `Iface`, answered with `Res`.

    `interface` is a `runtime_checkable` Protocol: an adapter serves the family exactly when it implements
    it, which `supported_by` checks once at start-up (never a `getattr` per request, nor a method that
    raises "not supported"). `required` says whether a model of `model_type` needs it: a chat model must be
    on a provider that chats; token counting is optional, and the gateway estimates where a provider cannot
    count. `estimate_input` and `max_output` give the worst case the guard reserves and rate-limits with,
    in `unit`s, before the call; `billed` is False for a family that never costs anything (token counting).
    `invoke` is the one call of an attempt (`adapter.embed(request, target, info)`), which is all
    `Pipeline.run` needs to resolve, admit, route and settle the family; None for chat, whose processors and
    streams take their own path (`Pipeline.chat`, `chat_stream`), and for token counting, which is not routed.
    `meter` prices a media family (images, seconds, characters); None for a family priced in tokens.
    """

    name: str
    model_type: str
    interface: Any  # a runtime_checkable Protocol class (mypy takes no Protocol as a `type[...]` value)
    unit: Unit
    estimate_input: Callable[[Req], int]
    max_output: Callable[[Req, ModelConfig, int], int]
    invoke: Callable[[Iface, GatewayRequest[Any], Target, CallInfo], Awaitable[Res]] | None = None
    required: bool = True
    billed: bool = True
    meter: Meter | None = None

    def supported_by(self, adapter: Any) -> bool:
        return isinstance(adapter, self.interface)

    def implemented_by(self, adapter: Any) -> Iface | None:
        """The adapter as this family's interface, or None: for an optional family, chosen per target."""
        return adapter if isinstance(adapter, self.interface) else None


def no_output(request: Any, model: ModelConfig, default: int) -> int:
    """`max_output` of a family whose answer is not metered (an embedding, a token count)."""
    return 0
