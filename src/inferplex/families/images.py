"""The image families: `/v1/images/generations`, `/v1/images/edits`, `/v1/images/variations`.

The canonical requests are OpenAI's (`CreateImageRequest`, `CreateImageEditRequest`,
`CreateImageVariationRequest` in openai/openai-openapi); the answer is OpenAI's `ImagesResponse` with every
image inline (`b64_json`): a provider's URL is fetched server-side by its adapter, and the route turns an
image into the gateway's own signed URL when the caller asked for `url` (dialects/openai_images.py).

Billing (`ImageMeter`): the worst case reserved is `n` images at the size and quality asked (the most
expensive the model's prices name when `auto`), and for token-priced models (gpt-image) the image output
tokens OpenAI publishes for that size and quality, plus the prompt's text tokens (its UTF-8 length: a token
is at least one byte). Settlement bills the images returned, or the `usage` the provider reported: its text
input tokens at the text rate, its image input and output tokens at the image rates, never the text ones.

What a provider cannot do (`ImageCaps`, declared by each adapter module) is planned by `plan_images` with
chat's decider (`capabilities.py`): dropped and named in `x-inferplex-dropped-params`, refused with a 400
naming the parameter (`drop_params: false`), or emulated (`n` above a provider's cap as several calls, a
stream from one buffered call).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from inferplex.accounts.pricing import Media, Tokens, image_price
from inferplex.capabilities import Support, _Decider
from inferplex.config import ModelConfig, Pricing
from inferplex.errors import InvalidRequest
from inferplex.families.base import Family, Unit, no_output
from inferplex.gateway_request import GatewayRequest
from inferplex.providers.base import CallInfo
from inferplex.targets import Target

R = TypeVar("R", bound=BaseModel)
# Where an adapter that streams from its provider hands each partial image event as it arrives (set by the
# route of a streamed request, for the request's task; None: collect them into the answer's `partials` only).
PARTIAL_IMAGES: ContextVar[Callable[[dict[str, Any]], None] | None] = ContextVar("partial_images", default=None)
ImagesAnswer = dict[str, Any]  # OpenAI's ImagesResponse: created, data[{b64_json, revised_prompt}], usage, ...

_SIZE = re.compile(r"^(auto|[1-9][0-9]{1,4}x[1-9][0-9]{1,4})$")
MAX_PROMPT = 32_000


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


def _check_size(value: str | None) -> str | None:
    if value is not None and not _SIZE.match(value):
        raise ValueError("expected `auto` or WIDTHxHEIGHT (e.g. 1024x1024)")
    return value


class ImageRequest(_Open):
    """OpenAI's CreateImageRequest."""

    model: str = Field(min_length=1)
    prompt: str = Field(min_length=1, max_length=MAX_PROMPT)
    n: int | None = Field(None, ge=1, le=10)
    quality: Literal["standard", "hd", "low", "medium", "high", "auto"] | None = None
    response_format: Literal["url", "b64_json"] | None = None
    output_format: Literal["png", "jpeg", "webp"] | None = None
    output_compression: int | None = Field(None, ge=0, le=100)
    stream: bool | None = None
    partial_images: int | None = Field(None, ge=0, le=3)
    size: str | None = None
    moderation: Literal["low", "auto"] | None = None
    background: Literal["transparent", "opaque", "auto"] | None = None
    style: Literal["vivid", "natural"] | None = None
    user: str | None = None

    _size = field_validator("size")(_check_size)


class ImageFile(BaseModel):
    """An uploaded image (or mask), read within the upload limit."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    filename: str
    content_type: str
    data: bytes = Field(repr=False)


class ImageEditRequest(_Open):
    """OpenAI's CreateImageEditRequest (multipart): one image or up to 16, an optional mask."""

    model: str = Field(min_length=1)
    image: list[ImageFile] = Field(min_length=1, max_length=16)
    prompt: str = Field(min_length=1, max_length=MAX_PROMPT)
    mask: ImageFile | None = None
    n: int | None = Field(None, ge=1, le=10)
    quality: Literal["standard", "low", "medium", "high", "auto"] | None = None
    response_format: Literal["url", "b64_json"] | None = None
    output_format: Literal["png", "jpeg", "webp"] | None = None
    output_compression: int | None = Field(None, ge=0, le=100)
    background: Literal["transparent", "opaque", "auto"] | None = None
    input_fidelity: Literal["high", "low"] | None = None
    stream: bool | None = None
    partial_images: int | None = Field(None, ge=0, le=3)
    size: str | None = None
    user: str | None = None

    _size = field_validator("size")(_check_size)


class ImageVariationRequest(_Open):
    """OpenAI's CreateImageVariationRequest (multipart)."""

    model: str = Field(min_length=1)
    image: ImageFile
    n: int | None = Field(None, ge=1, le=10)
    response_format: Literal["url", "b64_json"] | None = None
    size: Literal["256x256", "512x512", "1024x1024"] | None = None
    user: str | None = None


AnyImageRequest = ImageRequest | ImageEditRequest | ImageVariationRequest


# ---- the adapter interfaces -------------------------------------------------------------------------------


@runtime_checkable
class ImageAdapter(Protocol):
    """A provider that generates images."""

    async def generate_image(
        self, request: GatewayRequest[ImageRequest], target: Target, info: CallInfo
    ) -> ImagesAnswer:
        """OpenAI's ImagesResponse with every image as `b64_json` (a provider URL fetched server-side).
        A streamed request may carry `partials`: the partial images (base64) the provider sent, in order."""
        ...


@runtime_checkable
class ImageEditAdapter(Protocol):
    async def edit_image(
        self, request: GatewayRequest[ImageEditRequest], target: Target, info: CallInfo
    ) -> ImagesAnswer: ...


@runtime_checkable
class ImageVariationAdapter(Protocol):
    async def vary_image(
        self, request: GatewayRequest[ImageVariationRequest], target: Target, info: CallInfo
    ) -> ImagesAnswer: ...


def cannot(target: Target, what: str) -> InvalidRequest:
    return InvalidRequest(
        f"Provider {target.provider.name} (model {target.model.name}) cannot {what}.", code="unsupported_operation"
    )


async def _generate(
    adapter: ImageAdapter, request: GatewayRequest[ImageRequest], target: Target, info: CallInfo
) -> ImagesAnswer:
    return await adapter.generate_image(request, target, info)


async def _edit(
    adapter: Any, request: GatewayRequest[ImageEditRequest], target: Target, info: CallInfo
) -> ImagesAnswer:
    if not isinstance(adapter, ImageEditAdapter):
        raise cannot(target, "edit images")
    return await adapter.edit_image(request, target, info)


async def _vary(
    adapter: Any, request: GatewayRequest[ImageVariationRequest], target: Target, info: CallInfo
) -> ImagesAnswer:
    if not isinstance(adapter, ImageVariationAdapter):
        raise cannot(target, "make image variations")
    return await adapter.vary_image(request, target, info)


# ---- metering ---------------------------------------------------------------------------------------------

# OpenAI's published image output tokens of the GPT image models, by size and quality.
OUTPUT_TOKENS: dict[str, dict[str, int]] = {
    "1024x1024": {"low": 272, "medium": 1056, "high": 4160},
    "1024x1536": {"low": 408, "medium": 1584, "high": 6240},
    "1536x1024": {"low": 408, "medium": 1584, "high": 6240},
}
_LARGEST = 1024 * 1536
# The worst case of an input image's tokens (an edit's images at high fidelity), per image.
INPUT_IMAGE_TOKENS = 6240


def output_tokens(size: str | None, quality: str | None) -> int:
    """The image output tokens of one image: OpenAI's table, the highest quality when `auto`, the largest
    standard size when `auto`, and a custom size scaled by its pixels from the largest."""
    q = quality if quality in ("low", "medium", "high") else "high"
    row = OUTPUT_TOKENS.get(size or "")
    if row is not None:
        return row[q]
    top = OUTPUT_TOKENS["1536x1024"][q]
    if size and "x" in size and size != "auto":
        w, h = (int(v) for v in size.split("x"))
        return max(top, math.ceil(top * w * h / _LARGEST))
    return top


def _prices(model: ModelConfig) -> list[Pricing]:
    return [d.pricing or model.pricing for d in model.deployments] or [model.pricing]


def _priciest(model: ModelConfig, size: str | None, quality: str | None) -> tuple[str | None, str | None]:
    """The size and quality to reserve for: the asked ones, or, for `auto`/unset, the most expensive key the
    model's prices name (`image_by`), so the reservation covers whatever the provider picks."""
    sizes: list[str | None] = [size] if size not in (None, "auto") else [None]
    qualities: list[str | None] = [quality] if quality not in (None, "auto") else [None]
    for p in _prices(model):
        for key in p.image_by:
            s, _, q = key.partition("/")
            if size in (None, "auto") and "x" in s:
                sizes.append(s)
            if quality in (None, "auto"):
                qualities.append(q or (s if "x" not in s else None))
    pairs = [(s, q) for s in dict.fromkeys(sizes) for q in dict.fromkeys(qualities)]

    def worst(pair: tuple[str | None, str | None]) -> Any:
        return max((image_price(p, *pair) or 0) for p in _prices(model))

    return max(pairs, key=worst)


@dataclass(frozen=True, slots=True)
class ImageMeter:
    """The image families' `Meter` (families/base.py)."""

    def worst(self, request: AnyImageRequest, model: ModelConfig) -> tuple[Tokens, Media]:
        n = request.n or 1
        quality = getattr(request, "quality", None)
        size, priced_quality = _priciest(model, request.size, quality)
        prompt = getattr(request, "prompt", None) or ""
        images_in = len(request.image) if isinstance(request, ImageEditRequest) else 0
        tokens = Tokens(prompt=len(prompt.encode()))
        media = Media(
            images=n,
            size=size,
            quality=priced_quality,
            image_input_tokens=images_in * INPUT_IMAGE_TOKENS,
            image_output_tokens=n * output_tokens(request.size, quality),
        )
        return tokens, media

    def used(self, request: AnyImageRequest, answer: Any) -> tuple[Tokens, Media]:
        if not isinstance(answer, dict):
            return Tokens(), Media()
        count = len(answer.get("data") or ())
        size = answer.get("size") or request.size
        quality = answer.get("quality") or getattr(request, "quality", None)
        usage = answer.get("usage")
        if not isinstance(usage, dict):
            return Tokens(), Media(images=count, size=size, quality=quality)
        details = usage.get("input_tokens_details") or {}
        text = _int(details.get("text_tokens"))
        image_in = _int(details.get("image_tokens"))
        if not details:
            text = _int(usage.get("input_tokens"))
        media = Media(
            images=count,
            size=size,
            quality=quality,
            image_input_tokens=image_in,
            image_output_tokens=_int(usage.get("output_tokens")),
        )
        return Tokens(prompt=text), media


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


METER = ImageMeter()


def _estimate(request: AnyImageRequest) -> int:
    return len((getattr(request, "prompt", None) or "").encode())


IMAGES: Family[ImageRequest, ImageAdapter, ImagesAnswer] = Family(
    name="image",
    model_type="image",
    interface=ImageAdapter,
    unit=Unit.IMAGES,
    estimate_input=_estimate,
    max_output=no_output,
    invoke=_generate,
    meter=METER,
)

IMAGE_EDITS: Family[ImageEditRequest, Any, ImagesAnswer] = Family(
    name="image_edit",
    model_type="image",
    interface=ImageEditAdapter,
    unit=Unit.IMAGES,
    estimate_input=_estimate,
    max_output=no_output,
    invoke=_edit,
    required=False,
    meter=METER,
)

IMAGE_VARIATIONS: Family[ImageVariationRequest, Any, ImagesAnswer] = Family(
    name="image_variation",
    model_type="image",
    interface=ImageVariationAdapter,
    unit=Unit.IMAGES,
    estimate_input=_estimate,
    max_output=no_output,
    invoke=_vary,
    required=False,
    meter=METER,
)


def size_ratio(size: str | None, ratios: tuple[str, ...]) -> str | None:
    """An OpenAI size (`WxH`) as one of the aspect ratios (`W:H`, reduced) a provider makes instead of sizes
    (Gemini's image models, Fireworks' FLUX); None for `auto`; a 400 naming `size` for any other."""
    if size in (None, "auto"):
        return None
    assert size is not None
    w, h = (int(v) for v in size.split("x"))
    r = Fraction(w, h)
    ratio = f"{r.numerator}:{r.denominator}"
    if ratio not in ratios:
        raise InvalidRequest(
            f"Invalid value for 'size': {size} is not an aspect ratio this model makes ({', '.join(ratios)}).",
            param="size",
        )
    return ratio


# ---- capability planning ----------------------------------------------------------------------------------

# Values that ask for nothing: dropped silently wherever a provider lacks the parameter.
_HARMLESS = (None, "auto", False, 0)


@dataclass(frozen=True, slots=True)
class ImageCaps:
    """What one provider (or one of its models) does with each image parameter, by `capabilities.Support`:
    a parameter absent here is native. `max_n`: the most images one upstream call returns (more are
    emulated by several calls). `stream`: whether the provider streams partial images (else a stream is
    answered from one buffered call, with no partial images, and `partial_images` is named as dropped)."""

    support: Mapping[str, Support] = field(default_factory=dict)
    max_n: int = 10
    stream: bool = False


@dataclass(frozen=True, slots=True)
class ImagePlan(Generic[R]):
    """The request each upstream call sends (`calls` of them, their `n` adding up to the caller's)."""

    request: GatewayRequest[R]
    counts: tuple[int, ...]
    stream: bool


def plan_images(request: GatewayRequest[R], caps: ImageCaps, target: Target, info: CallInfo) -> ImagePlan[R]:
    """Drop (and name) or refuse what the target cannot do, through the same decider as chat's
    `capabilities.plan` (`drop_params: false` makes a dropped parameter a 400 naming it)."""
    body = request.body
    d = _Decider(request.options.drop_params, target.provider.name, target.model.name)
    present = body.model_fields_set | set(body.model_extra or ())
    for name, support in caps.support.items():
        if name not in present or support is Support.NATIVE:
            continue
        value = getattr(body, name, None)
        if value in _HARMLESS:
            d.updates[name] = None
        else:
            d.cannot(name, support, f"honour {name}")
    stream = bool(getattr(body, "stream", None))
    if stream and not caps.stream and getattr(body, "partial_images", None):
        d.dropped.append("partial_images")
    n = getattr(body, "n", None) or 1
    counts = tuple(min(caps.max_n, n - i) for i in range(0, n, caps.max_n))
    info.dropped_params = sorted({*info.dropped_params, *d.dropped})
    if d.updates:
        request = request.replace(body.model_copy(update=d.updates))
    return ImagePlan(request, counts, stream and caps.stream)


def merge_answers(answers: list[ImagesAnswer]) -> ImagesAnswer:
    """Several upstream calls' answers (an emulated `n`) as one: their images in order, usage added up."""
    first = dict(answers[0])
    if len(answers) == 1:
        return first
    first["data"] = [item for a in answers for item in a.get("data") or ()]
    usages = [a["usage"] for a in answers if isinstance(a.get("usage"), dict)]
    if usages:
        first["usage"] = _add_usage(usages)
    return first


def _add_usage(usages: list[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {"input_tokens_details": {"text_tokens": 0, "image_tokens": 0}}
    for u in usages:
        for key in ("input_tokens", "output_tokens", "total_tokens"):
            total[key] = total.get(key, 0) + _int(u.get(key))
        details = u.get("input_tokens_details") or {}
        for key in ("text_tokens", "image_tokens"):
            total["input_tokens_details"][key] += _int(details.get(key))
    return total
