"""Prices to costs, in integer micro-USD.

Prices are USD per million tokens, which is exactly micro-USD per token, so a cost is
`sum(tokens_i * price_i)` over the token classes (uncached input, cached input, cache writes, output),
computed exactly (in integers over one denominator) and rounded UP once per request to a whole micro-USD.
A request is never billed a fraction below what it used, and never more than one micro-USD above.

The worst case reserved before a call is estimated by the request's endpoint family (`families/`), in the
family's units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from inferplex.config import Pricing
from inferplex.responses import Usage


@dataclass(frozen=True, slots=True)
class Tokens:
    prompt: int = 0  # all input tokens, cached and cache-write included (OpenAI's `prompt_tokens`)
    completion: int = 0
    cached: int = 0
    cache_write: int = 0
    estimated: bool = False


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def tokens_of(usage: Usage | None) -> Tokens:
    """Token counts from an OpenAI-shaped usage object (also reads Anthropic-style cache fields)."""
    if not usage:
        return Tokens()
    details = usage.get("prompt_tokens_details") or {}
    cached = _int(details.get("cached_tokens")) or _int(usage.get("cache_read_input_tokens"))
    write = _int(details.get("cache_write_tokens")) or _int(usage.get("cache_creation_input_tokens"))
    return Tokens(_int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")), cached, write)


_SCALED: dict[int, tuple[Pricing, tuple[int, int, int, int, int]]] = {}


def _scaled(price: Pricing) -> tuple[int, int, int, int, int]:
    """(denominator, input, output, cached input, cache write): the prices as integers over one denominator.
    Billing then multiplies and divides once in plain integers, exact like the decimals and cheaper, on a
    path every keyed request takes twice. Kept per price object (holding it, so its id is not reused)."""
    kept = _SCALED.get(id(price))
    if kept is not None and kept[0] is price:
        return kept[1]
    i = price.input
    c, w = price.cached_input, price.cache_write
    prices = (i, price.output, i if c is None else c, i if w is None else w)
    ratios = [p.as_integer_ratio() for p in prices]
    denominator = math.lcm(*(d for _, d in ratios))
    n = [num * (denominator // d) for num, d in ratios]
    if len(_SCALED) >= 1024:
        _SCALED.clear()
    _SCALED[id(price)] = (price, scaled := (denominator, n[0], n[1], n[2], n[3]))
    return scaled


def cost_micros(price: Pricing, tokens: Tokens) -> int:
    if price.free:
        return 0
    denominator, input_, output, cached_input, cache_write = _scaled(price)
    cached = min(tokens.cached, tokens.prompt)
    write = min(tokens.cache_write, tokens.prompt - cached)
    plain = tokens.prompt - cached - write
    total = plain * input_ + cached * cached_input + write * cache_write + tokens.completion * output
    return -(-total // denominator)  # rounded up


def estimate_output_tokens(output_chars: int) -> int:
    """For a stream cut before its usage chunk: about 4 characters per token, rounded up."""
    return math.ceil(output_chars / 4)
