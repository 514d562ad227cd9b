"""The chat family: `/v1/chat/completions`, `/v1/messages` and every seed's chat route.

Billed in tokens. The worst case reserved before a call is an over-estimate of the prompt (its JSON
characters / 3) plus the largest output the request allows (max_tokens, else the model's `max_output`, else
the operator's default), times `n`.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from pydantic import TypeAdapter

from inferplex.canonical import ChatRequest, Message, Tool
from inferplex.config import ModelConfig
from inferplex.families.base import Family, Unit
from inferplex.gateway_request import GatewayRequest
from inferplex.providers.base import CallInfo
from inferplex.responses import ChatCompletion, ChatCompletionChunk
from inferplex.targets import Target


@runtime_checkable
class ChatAdapter(Protocol):
    """A provider that chats. Streams are async generators of `chat.completion.chunk` dicts: the pipeline pulls
    the first item before it answers the caller, so an adapter raises `GatewayError` from that first pull if the
    upstream fails, and keeps its connection inside the generator so closing it cancels the upstream."""

    async def chat(self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo) -> ChatCompletion:
        """Return a complete `chat.completion` dict (usage included)."""
        ...

    def chat_stream(
        self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo
    ) -> AsyncIterator[ChatCompletionChunk]:
        """Yield `chat.completion.chunk` dicts; the last ones carry finish_reason and usage."""
        ...


_MESSAGES = TypeAdapter(list[Message])
_TOOLS = TypeAdapter(list[Tool])


def estimate_prompt_tokens(request: ChatRequest) -> int:
    """A deliberate over-estimate (about one token per 3 JSON characters), so reservations cover the call.

    The JSON is pydantic's own serialisation of the messages (one call into its core, half the cost of
    dumping them to dicts and encoding those), byte for byte what `orjson.dumps` of `model_dump` gives."""
    size = len(_MESSAGES.dump_json(request.messages, exclude_none=True))
    if request.tools:
        size += len(_TOOLS.dump_json(request.tools, exclude_none=True)) + 1  # as one more list element
    return math.ceil(size / 3) + 8


def max_output_tokens(request: ChatRequest, model: ModelConfig, default: int) -> int:
    limit = request.output_limit or model.max_output or default
    return limit * (request.n or 1)


CHAT: Family[ChatRequest, ChatAdapter, ChatCompletion] = Family(
    name="chat",
    model_type="chat",
    interface=ChatAdapter,
    unit=Unit.TOKENS,
    estimate_input=estimate_prompt_tokens,
    max_output=max_output_tokens,
)
