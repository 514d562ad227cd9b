"""The embeddings family: `/v1/embeddings`. Billed in input tokens; nothing is output."""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import orjson

from inferplex.canonical import EmbeddingRequest
from inferplex.families.base import Family, Unit, no_output
from inferplex.gateway_request import GatewayRequest
from inferplex.providers.base import CallInfo
from inferplex.responses import EmbeddingList
from inferplex.targets import Target


@runtime_checkable
class EmbeddingAdapter(Protocol):
    """A provider that embeds."""

    async def embed(self, request: GatewayRequest[EmbeddingRequest], target: Target, info: CallInfo) -> EmbeddingList:
        """Return an OpenAI embeddings `list` with usage, in the requested `encoding_format` (float or base64)."""
        ...


def estimate_input_tokens(request: EmbeddingRequest) -> int:
    """About one token per 3 JSON characters of the input, as for chat: an over-estimate."""
    return math.ceil(len(orjson.dumps(request.input)) / 3) + 8


async def invoke(
    adapter: EmbeddingAdapter, request: GatewayRequest[EmbeddingRequest], target: Target, info: CallInfo
) -> EmbeddingList:
    return await adapter.embed(request, target, info)


EMBEDDINGS: Family[EmbeddingRequest, EmbeddingAdapter, EmbeddingList] = Family(
    name="embedding",
    model_type="embedding",
    interface=EmbeddingAdapter,
    unit=Unit.TOKENS,
    estimate_input=estimate_input_tokens,
    max_output=no_output,
    invoke=invoke,
)
