"""Prices to costs, in integer micro-USD.

Prices are USD per million tokens, which is exactly micro-USD per token, so a cost is
`sum(tokens_i * price_i)` over the token classes (uncached input, cached input, cache writes, output),
computed exactly in decimal and rounded UP once per request to a whole micro-USD. A request is never billed
a fraction below what it used, and never more than one micro-USD above.

The worst case reserved before a call uses an over-estimate of the prompt (JSON characters / 3) plus the
largest output the request allows (max_tokens, else the model's max_output, else a configured default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

import orjson

from inferplex.canonical import ChatRequest, EmbeddingRequest
from inferplex.config import ModelConfig, Pricing


@dataclass(frozen=True, slots=True)
class Tokens:
    prompt: int = 0  # all input tokens, cached and cache-write included (OpenAI's `prompt_tokens`)
    completion: int = 0
    cached: int = 0
    cache_write: int = 0
    estimated: bool = False


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def tokens_of(usage: dict[str, Any] | None) -> Tokens:
    """Token counts from an OpenAI-shaped usage object (also reads Anthropic-style cache fields)."""
    if not usage:
        return Tokens()
    details = usage.get("prompt_tokens_details") or {}
    cached = _int(details.get("cached_tokens")) or _int(usage.get("cache_read_input_tokens"))
    write = _int(details.get("cache_write_tokens")) or _int(usage.get("cache_creation_input_tokens"))
    return Tokens(_int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")), cached, write)


def cost_micros(price: Pricing, tokens: Tokens) -> int:
    if price.free:
        return 0
    cached = min(tokens.cached, tokens.prompt)
    write = min(tokens.cache_write, tokens.prompt - cached)
    plain = tokens.prompt - cached - write
    total = (
        plain * price.input
        + cached * (price.input if price.cached_input is None else price.cached_input)
        + write * (price.input if price.cache_write is None else price.cache_write)
        + tokens.completion * price.output
    )
    return int(Decimal(total).to_integral_value(rounding=ROUND_CEILING))


def estimate_prompt_tokens(request: ChatRequest | EmbeddingRequest) -> int:
    """A deliberate over-estimate (about one token per 3 JSON characters), so reservations cover the call."""
    if isinstance(request, EmbeddingRequest):
        data: Any = request.input
    else:
        data = [m.model_dump(exclude_none=True) for m in request.messages]
        if request.tools:
            data.append([t.model_dump(exclude_none=True) for t in request.tools])
    return math.ceil(len(orjson.dumps(data)) / 3) + 8


def max_output_tokens(request: ChatRequest | EmbeddingRequest, model: ModelConfig, default: int) -> int:
    if isinstance(request, EmbeddingRequest):
        return 0
    limit = request.output_limit or model.max_output or default
    return limit * (request.n or 1)


def estimate_output_tokens(output_chars: int) -> int:
    """For a stream cut before its usage chunk: about 4 characters per token, rounded up."""
    return math.ceil(output_chars / 4)
