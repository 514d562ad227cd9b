"""What OpenAI's image routes answer, as TypedDicts (dialects/openai_images.py), for `/openapi.json` and the
tests: OpenAI's `ImagesResponse` (`Image`, `ImagesUsage`) and its stream events (`ImageGenPartialImageEvent`,
`ImageGenCompletedEvent`, and the edit's `image_edit.*` of the same shape)."""

from __future__ import annotations

from typing import Literal, NotRequired

from typing_extensions import TypedDict


class ImageInputTokensDetails(TypedDict):
    text_tokens: int
    image_tokens: int


class ImagesUsage(TypedDict):
    total_tokens: int
    input_tokens: int
    output_tokens: int  # image output tokens: billed at the model's image_output rate, never the text one
    input_tokens_details: ImageInputTokensDetails


class Image(TypedDict):
    b64_json: NotRequired[str]
    url: NotRequired[str]  # the gateway's own signed, expiring URL (`GET /v1/media/{file_id}`)
    revised_prompt: NotRequired[str]


class ImagesResponse(TypedDict):
    created: int
    data: list[Image]
    background: NotRequired[Literal["transparent", "opaque"]]
    output_format: NotRequired[Literal["png", "webp", "jpeg"]]
    size: NotRequired[str]
    quality: NotRequired[str]
    usage: NotRequired[ImagesUsage]


class ImageStreamEvent(TypedDict):
    type: Literal[
        "image_generation.partial_image",
        "image_generation.completed",
        "image_edit.partial_image",
        "image_edit.completed",
    ]
    b64_json: str
    created_at: int
    size: str
    quality: str
    background: str
    output_format: str
    partial_image_index: NotRequired[int]  # partial images only
    usage: NotRequired[ImagesUsage]  # completed only
