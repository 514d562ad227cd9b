"""OpenAI's image request to Imagen's `predict` (Gemini API and Vertex AI), and its predictions back.

Wire shape (google-genai's `_GenerateImagesParameters_to_vertex` / `_GeneratedImage_from_vertex`):
`{"instances": [{"prompt": ...}], "parameters": {"sampleCount", "aspectRatio", "outputOptions": {"mimeType",
"compressionQuality"}}}` → `{"predictions": [{"bytesBase64Encoded", "mimeType", "prompt"?, "raiFilteredReason"?}]}`.
Imagen takes an aspect ratio, not a size: a size whose ratio is one of Imagen's (1:1, 3:4, 4:3, 9:16, 16:9) is
sent as that ratio; any other size is refused naming `size`.
"""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any

from inferplex.errors import InvalidRequest
from inferplex.families.images import ImageRequest, ImagesAnswer
from inferplex.providers.failures import ProviderFailure

RATIOS = {
    Fraction(1): "1:1",
    Fraction(3, 4): "3:4",
    Fraction(4, 3): "4:3",
    Fraction(9, 16): "9:16",
    Fraction(16, 9): "16:9",
}
_MIME = {"png": "image/png", "jpeg": "image/jpeg"}
_FORMAT = {v: k for k, v in _MIME.items()}


def aspect_ratio(size: str | None) -> str | None:
    """Imagen's aspect ratio for an OpenAI size; None for `auto`/unset; a 400 naming `size` otherwise."""
    if size in (None, "auto"):
        return None
    assert size is not None
    w, h = (int(v) for v in size.split("x"))
    ratio = RATIOS.get(Fraction(w, h))
    if ratio is None:
        raise InvalidRequest(
            f"Invalid value for 'size': {size} is not an aspect ratio Imagen makes "
            f"({', '.join(RATIOS.values())}; e.g. 1024x1024, 768x1024, 1024x768, 576x1024, 1024x576).",
            param="size",
        )
    return ratio


def build_predict(request: ImageRequest, n: int) -> dict[str, Any]:
    parameters: dict[str, Any] = {"sampleCount": n}
    ratio = aspect_ratio(request.size)
    if ratio is not None:
        parameters["aspectRatio"] = ratio
    options: dict[str, Any] = {}
    if request.output_format is not None:
        if request.output_format not in _MIME:
            raise InvalidRequest("Invalid value for 'output_format': Imagen makes png or jpeg.", param="output_format")
        options["mimeType"] = _MIME[request.output_format]
    if request.output_compression is not None and request.output_format == "jpeg":
        options["compressionQuality"] = request.output_compression
    if options:
        parameters["outputOptions"] = options
    return {"instances": [{"prompt": request.prompt}], "parameters": parameters}


def to_answer(data: Any, request: ImageRequest) -> ImagesAnswer:
    """Imagen's predictions as OpenAI's ImagesResponse; every image filtered is a ProviderFailure."""
    predictions = data.get("predictions") if isinstance(data, dict) else None
    if not isinstance(predictions, list):
        predictions = []
    images: list[dict[str, Any]] = []
    reasons: list[str] = []
    fmt = None
    for p in predictions:
        if not isinstance(p, dict):
            continue
        if isinstance(p.get("bytesBase64Encoded"), str):
            item: dict[str, Any] = {"b64_json": p["bytesBase64Encoded"]}
            if isinstance(p.get("prompt"), str):
                item["revised_prompt"] = p["prompt"]
            images.append(item)
            fmt = _FORMAT.get(str(p.get("mimeType")), fmt)
        elif isinstance(p.get("raiFilteredReason"), str):
            reasons.append(p["raiFilteredReason"])
    if not images:
        why = "; ".join(reasons) or "no images were returned"
        raise ProviderFailure("INVALID_ARGUMENT", f"Imagen made no image: {why}", 400)
    answer: ImagesAnswer = {"created": int(time.time()), "data": images, "output_format": fmt or "png"}
    if request.size not in (None, "auto"):
        answer["size"] = request.size
    return answer
