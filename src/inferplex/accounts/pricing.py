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
from decimal import Decimal
from fractions import Fraction
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


def _token_cost(price: Pricing, tokens: Tokens) -> tuple[int, int]:
    """The exact cost of the tokens in micro-USD, as (numerator, denominator)."""
    denominator, input_, output, cached_input, cache_write = _scaled(price)
    cached = min(tokens.cached, tokens.prompt)
    write = min(tokens.cache_write, tokens.prompt - cached)
    plain = tokens.prompt - cached - write
    return plain * input_ + cached * cached_input + write * cache_write + tokens.completion * output, denominator


def cost_micros(price: Pricing, tokens: Tokens) -> int:
    if price.free:
        return 0
    total, denominator = _token_cost(price, tokens)
    return -(-total // denominator)  # rounded up


def estimate_output_tokens(output_chars: int) -> int:
    """For a stream cut before its usage chunk: about 4 characters per token, rounded up."""
    return math.ceil(output_chars / 4)


# ---- media units (docs/media.md) ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Media:
    """What a media request produced or consumed, in each unit a provider bills; zero where not used.

    Image and audio tokens are apart from the text tokens (`Tokens`) because they have their own rates.
    `audio_ms` is the audio sent in (transcription), billed per second pro rata; `characters` the text a
    speech model read; `video_seconds` at `resolution` a video generated."""

    images: int = 0
    size: str | None = None
    quality: str | None = None
    image_input_tokens: int = 0
    image_output_tokens: int = 0
    audio_input_tokens: int = 0
    audio_output_tokens: int = 0
    audio_ms: int = 0
    characters: int = 0
    video_seconds: int = 0
    resolution: str | None = None


def image_price(price: Pricing, size: str | None, quality: str | None) -> Decimal | None:
    """The price of one image: `image_by[size/quality]`, then `image_by[size]`, `image_by[quality]`, `image`."""
    for key in (f"{size}/{quality}" if size and quality else None, size, quality):
        if key and key in price.image_by:
            return price.image_by[key]
    return price.image


def _per_million(count: int, rate: Decimal | None) -> Fraction:
    return count * Fraction(rate) if count and rate else Fraction(0)  # USD per million = micro-USD per one


def media_cost_micros(price: Pricing, tokens: Tokens, media: Media) -> int:
    """The cost of a media request in micro-USD, rounded up once.

    Images are billed by their tokens where the provider reported them and the model has image token
    rates (gpt-image), else per image; transcription by audio tokens where reported and priced, else per
    second of audio (a per-second model is never billed zero because its answer carried no usage)."""
    if price.free:
        return 0
    total = Fraction(*_token_cost(price, tokens)) if tokens.prompt or tokens.completion else Fraction(0)
    image_tokens = media.image_input_tokens or media.image_output_tokens
    if image_tokens and (price.image_input is not None or price.image_output is not None):
        total += _per_million(media.image_input_tokens, price.image_input)
        total += _per_million(media.image_output_tokens, price.image_output)
    elif media.images:
        total += media.images * Fraction(image_price(price, media.size, media.quality) or 0) * 1_000_000
    audio_tokens = media.audio_input_tokens or media.audio_output_tokens
    if audio_tokens and (price.audio_input is not None or price.audio_output is not None):
        total += _per_million(media.audio_input_tokens, price.audio_input)
        total += _per_million(media.audio_output_tokens, price.audio_output)
    elif media.audio_ms and price.audio_second:
        total += media.audio_ms * Fraction(price.audio_second) * 1000
    total += _per_million(media.characters, price.character)
    if media.video_seconds:
        rate = price.video_second_by.get(media.resolution or "", price.video_second)
        total += media.video_seconds * Fraction(rate or 0) * 1_000_000
    return math.ceil(total)
