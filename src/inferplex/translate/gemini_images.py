"""OpenAI's image requests to Google's image models, and their answers back: Imagen's `predict` (Gemini API
and Vertex AI), and Gemini's own image models through `generateContent` (`responseModalities: ["IMAGE"]`,
`imageConfig.aspectRatio`, the images to edit as `inlineData` parts; the answer's `inlineData` parts and its
`usageMetadata` as OpenAI's ImagesUsage).

Wire shape (google-genai's `_GenerateImagesParameters_to_vertex` / `_GeneratedImage_from_vertex`):
`{"instances": [{"prompt": ...}], "parameters": {"sampleCount", "aspectRatio", "outputOptions": {"mimeType",
"compressionQuality"}}}` → `{"predictions": [{"bytesBase64Encoded", "mimeType", "prompt"?, "raiFilteredReason"?}]}`.
Imagen takes an aspect ratio, not a size: a size whose ratio is one of Imagen's (1:1, 3:4, 4:3, 9:16, 16:9) is
sent as that ratio; any other size is refused naming `size`.
"""

from __future__ import annotations

import base64
import time
from fractions import Fraction
from typing import Any

from inferplex.errors import InvalidRequest
from inferplex.families.images import ImageFile, ImageRequest, ImagesAnswer, size_ratio
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


# ---- Gemini's own image models (generateContent with responseModalities IMAGE) ----------------------------

NATIVE_RATIOS = ("1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9")


def native_ratio(size: str | None) -> str | None:
    """The aspect ratio of an OpenAI size among Gemini image models' own; None for `auto`; else a 400."""
    return size_ratio(size, NATIVE_RATIOS)


def build_content(prompt: str, images: list[ImageFile], size: str | None) -> dict[str, Any]:
    """generateContent asking for an image: the prompt, and the images to edit as inline data."""
    parts: list[dict[str, Any]] = [{"text": prompt}]
    parts += [{"inlineData": {"mimeType": f.content_type, "data": base64.b64encode(f.data).decode()}} for f in images]
    config: dict[str, Any] = {"responseModalities": ["IMAGE"]}
    ratio = native_ratio(size)
    if ratio is not None:
        config["imageConfig"] = {"aspectRatio": ratio}
    return {"contents": [{"role": "user", "parts": parts}], "generationConfig": config}


def _modality(details: Any, modality: str) -> int:
    if not isinstance(details, list):
        return 0
    return sum(int(d.get("tokenCount") or 0) for d in details if isinstance(d, dict) and d.get("modality") == modality)


def content_answer(data: Any) -> ImagesAnswer:
    """The images of a generateContent answer, with its token usage as OpenAI's ImagesUsage (the output
    tokens are image tokens, billed at the image rate)."""
    candidates = data.get("candidates") if isinstance(data, dict) else None
    images: list[dict[str, Any]] = []
    fmt = None
    for candidate in candidates if isinstance(candidates, list) else ():
        parts = ((candidate or {}).get("content") or {}).get("parts") or ()
        for part in parts:
            inline = part.get("inlineData") if isinstance(part, dict) else None
            if isinstance(inline, dict) and isinstance(inline.get("data"), str):
                images.append({"b64_json": inline["data"]})
                fmt = _FORMAT.get(str(inline.get("mimeType")), fmt)
    if not images:
        reason = next((c.get("finishReason") for c in candidates or () if isinstance(c, dict)), None)
        blocked = (data.get("promptFeedback") or {}).get("blockReason") if isinstance(data, dict) else None
        why = blocked or reason or "no image in the answer"
        raise ProviderFailure("INVALID_ARGUMENT", f"the model made no image: {why}", 400)
    meta = data.get("usageMetadata") or {}
    prompt = int(meta.get("promptTokenCount") or 0)
    image_in = _modality(meta.get("promptTokensDetails"), "IMAGE")
    output = int(meta.get("candidatesTokenCount") or 0)
    usage = {
        "total_tokens": prompt + output,
        "input_tokens": prompt,
        "output_tokens": output,
        "input_tokens_details": {"text_tokens": prompt - image_in, "image_tokens": image_in},
    }
    return {"created": int(time.time()), "data": images, "output_format": fmt or "png", "usage": usage}
