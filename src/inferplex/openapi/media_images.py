"""OpenAI's image routes (dialects/openai_images.py) in `/openapi.json`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inferplex.dialects import openai_images_responses as ir
from inferplex.dialects import openai_responses as oa
from inferplex.families.images import ImageRequest
from inferplex.openapi.spec import Dialect, Operation

_OPENAI = Dialect("OpenAI", oa.OpenAIError)
_ERRORS = (400, 401, 402, 403, 404, 413, 415, 429, 500, 502, 503, 504)


class ImageEditForm(BaseModel):
    """The multipart form of `/v1/images/edits` (OpenAI's CreateImageEditRequest)."""

    model_config = ConfigDict(extra="allow")
    image: str = Field(
        json_schema_extra={"format": "binary"}, description="png, jpeg or webp; `image[]` for several (16)"
    )
    prompt: str
    model: str
    mask: str | None = Field(
        None, json_schema_extra={"format": "binary"}, description="a png whose transparent areas are edited"
    )
    n: int | None = Field(None, ge=1, le=10)
    size: str | None = None
    quality: Literal["standard", "low", "medium", "high", "auto"] | None = None
    response_format: Literal["url", "b64_json"] | None = None
    output_format: Literal["png", "jpeg", "webp"] | None = None
    background: Literal["transparent", "opaque", "auto"] | None = None
    user: str | None = None


class ImageVariationForm(BaseModel):
    """The multipart form of `/v1/images/variations` (OpenAI's CreateImageVariationRequest)."""

    model_config = ConfigDict(extra="allow")
    image: str = Field(json_schema_extra={"format": "binary"}, description="one square png")
    model: str
    n: int | None = Field(None, ge=1, le=10)
    size: Literal["256x256", "512x512", "1024x1024"] | None = None
    response_format: Literal["url", "b64_json"] | None = None
    user: str | None = None


_EDIT_FORM: dict[str, Any] = ImageEditForm.model_json_schema()
_VARIATION_FORM: dict[str, Any] = ImageVariationForm.model_json_schema()

_GENERATE = (
    "OpenAI's image generation. `response_format: b64_json` answers the images inline; `url` answers the "
    "gateway's own signed, expiring URLs (`GET /v1/media/{file_id}`), never a provider's; unset, what the "
    "model answers by default on OpenAI. `stream: true` (with `partial_images` 0-3) answers server-sent events "
    "`image_generation.partial_image` then `image_generation.completed`. Billed per image by size and quality, "
    "or by the provider's image tokens at the model's image rates. What a provider cannot do is dropped and "
    "named in `x-inferplex-dropped-params` (a 400 with `drop_params: false`)."
)
_EDIT = (
    "Multipart: `image` (or `image[]`, up to 16), `mask`, within `media.max_upload_bytes`, each checked by its "
    "bytes (415 for a format not taken). Answers as `/v1/images/generations`."
)

OPERATIONS: list[Operation] = [
    Operation("post", "/v1/images/generations", "Create images", _OPENAI, ir.ImagesResponse, _ERRORS,
              ImageRequest, description=_GENERATE, stream=ir.ImageStreamEvent, stream_done=False),
    Operation("post", "/v1/images/edits", "Edit images", _OPENAI, ir.ImagesResponse, _ERRORS, ImageEditForm,
              form=_EDIT_FORM, description=_EDIT),
    Operation("post", "/v1/images/variations", "Variations of an image", _OPENAI, ir.ImagesResponse, _ERRORS,
              ImageVariationForm, form=_VARIATION_FORM, description=_EDIT),
]  # fmt: skip
