"""OpenAI's image requests to Bedrock's InvokeModel bodies for image models, and their answers back.

- Amazon Nova Canvas and Titan Image Generator: `{"taskType": "TEXT_IMAGE" | "IMAGE_VARIATION", ...,
  "imageGenerationConfig": {"numberOfImages", "width", "height", "quality": "standard" | "premium"}}` →
  `{"images": [base64...], "error": null}`. OpenAI's `hd`/`high` quality is `premium`, the others `standard`.
- Stability models (`stability.*`): `{"prompt", "mode": "text-to-image", "aspect_ratio", "output_format"}` →
  `{"images": [base64], "finish_reasons": [null], "seeds": [...]}`, one image per call.
"""

from __future__ import annotations

import base64
import time
from fractions import Fraction
from typing import Any

from inferplex.errors import InvalidRequest
from inferplex.families.images import ImageRequest, ImagesAnswer, ImageVariationRequest
from inferplex.providers.failures import ProviderFailure

STABILITY_RATIOS = ("1:1", "16:9", "21:9", "2:3", "3:2", "4:5", "5:4", "9:16", "9:21")


def is_stability(model_id: str) -> bool:
    return "stability." in model_id


def _dimensions(size: str | None) -> dict[str, int]:
    if size in (None, "auto"):
        return {}
    assert size is not None
    w, h = (int(v) for v in size.split("x"))
    return {"width": w, "height": h}


def _config(n: int, size: str | None, quality: str | None) -> dict[str, Any]:
    config: dict[str, Any] = {"numberOfImages": n, **_dimensions(size)}
    if quality in ("hd", "high"):
        config["quality"] = "premium"
    elif quality in ("standard", "low", "medium"):
        config["quality"] = "standard"
    return config


def text_image(request: ImageRequest, model_id: str, n: int) -> dict[str, Any]:
    if is_stability(model_id):
        return _stability(request)
    return {
        "taskType": "TEXT_IMAGE",
        "textToImageParams": {"text": request.prompt},
        "imageGenerationConfig": _config(n, request.size, request.quality),
    }


def variation(request: ImageVariationRequest, n: int) -> dict[str, Any]:
    return {
        "taskType": "IMAGE_VARIATION",
        "imageVariationParams": {"images": [base64.b64encode(request.image.data).decode()]},
        "imageGenerationConfig": _config(n, request.size, None),
    }


def _stability(request: ImageRequest) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": request.prompt, "mode": "text-to-image"}
    if request.size not in (None, "auto"):
        assert request.size is not None
        w, h = (int(v) for v in request.size.split("x"))
        ratio = f"{Fraction(w, h).numerator}:{Fraction(w, h).denominator}"
        if ratio not in STABILITY_RATIOS:
            raise InvalidRequest(
                f"Invalid value for 'size': {request.size} is not an aspect ratio this model makes "
                f"({', '.join(STABILITY_RATIOS)}).",
                param="size",
            )
        body["aspect_ratio"] = ratio
    if request.output_format in ("png", "jpeg"):
        body["output_format"] = request.output_format
    elif request.output_format is not None:
        raise InvalidRequest("Invalid value for 'output_format': this model makes png or jpeg.", param="output_format")
    return body


def to_answer(data: Any, size: str | None, output_format: str | None = None) -> ImagesAnswer:
    if not isinstance(data, dict):
        raise ProviderFailure("api_error", "Bedrock sent an image answer that is not an object")
    if data.get("error"):
        raise ProviderFailure("ValidationException", str(data["error"]), 400)
    reasons = [r for r in data.get("finish_reasons") or () if r]
    if reasons:
        raise ProviderFailure("ValidationException", f"the image was filtered: {reasons[0]}", 400)
    images = data.get("images")
    if not isinstance(images, list) or not images or not all(isinstance(i, str) for i in images):
        raise ProviderFailure("api_error", "Bedrock sent an image answer without images")
    answer: ImagesAnswer = {
        "created": int(time.time()),
        "data": [{"b64_json": i} for i in images],
        "output_format": output_format or "png",
    }
    if size not in (None, "auto"):
        answer["size"] = size
    return answer
