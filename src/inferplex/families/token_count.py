"""Token counting: `/v1/messages/count_tokens`. Served by chat models, never billed, and optional: a
provider that can count (Anthropic) answers with its own count, any other target with the gateway's
provider-neutral estimate (`dialects/anthropic/routes.estimate_input_tokens`)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from inferplex.canonical import ChatRequest
from inferplex.families.base import Family, Unit, no_output
from inferplex.families.chat import estimate_prompt_tokens
from inferplex.targets import Target


@runtime_checkable
class TokenCounter(Protocol):
    """A provider that counts a chat request's input tokens itself."""

    async def count_tokens(self, request: ChatRequest, target: Target) -> int: ...


TOKEN_COUNT: Family[ChatRequest, TokenCounter, int] = Family(
    name="count_tokens",
    model_type="chat",
    interface=TokenCounter,
    unit=Unit.TOKENS,
    estimate_input=estimate_prompt_tokens,
    max_output=no_output,
    required=False,
    billed=False,
)
