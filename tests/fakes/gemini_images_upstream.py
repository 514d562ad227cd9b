"""A fake of Imagen on the Gemini API: `POST /v1beta/models/{model}:predict`, validated as Google validates it.

The body must be `{"instances": [{"prompt"}], "parameters": {...}}` with only Imagen's parameter names
(anything else is Google's 400 INVALID_ARGUMENT "Unknown name"), `sampleCount` 1-4, `aspectRatio` one of
Imagen's, `outputOptions.mimeType` png or jpeg. It answers `{"predictions": [{"bytesBase64Encoded",
"mimeType"}]}`; a prompt containing `blocked` is filtered (`raiFilteredReason`); model `imagen-error-500`
answers 500 INTERNAL every time.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.gemini_upstream import error, key_error
from tests.fakes.openai_images_upstream import png
from tests.fakes.server import FakeServer

PARAMETERS = {"sampleCount", "aspectRatio", "outputOptions", "personGeneration", "negativePrompt", "sampleImageSize",
              "seed", "addWatermark", "includeRaiReason", "enhancePrompt", "guidanceScale", "language"}  # fmt: skip
RATIOS = {"1:1", "3:4", "4:3", "9:16", "16:9"}
MIMES = {"image/png", "image/jpeg"}


def _unknown(name: str, where: str) -> web.Response:
    return error(400, f"Invalid JSON payload received. Unknown name \"{name}\" at '{where}': Cannot find field.")


def validate(body: Any) -> web.Response | None:
    if not isinstance(body, dict):
        return error(400, "Invalid JSON payload received.")
    for key in body:
        if key not in ("instances", "parameters"):
            return _unknown(key, "")
    instances = body.get("instances")
    if not isinstance(instances, list) or len(instances) != 1 or not isinstance(instances[0], dict):
        return error(400, "instances must hold exactly one instance.")
    for key in instances[0]:
        if key != "prompt":
            return _unknown(key, "instances[0]")
    if not isinstance(instances[0].get("prompt"), str) or not instances[0]["prompt"]:
        return error(400, "The prompt is required.")
    params = body.get("parameters") or {}
    for key in params:
        if key not in PARAMETERS:
            return _unknown(key, "parameters")
    count = params.get("sampleCount", 4)
    if not isinstance(count, int) or not 1 <= count <= 4:
        return error(400, "Number of images must be in range [1, 4].")
    if params.get("aspectRatio", "1:1") not in RATIOS:
        return error(400, f"Unsupported aspect ratio: {params.get('aspectRatio')}.")
    options = params.get("outputOptions") or {}
    if set(options) - {"mimeType", "compressionQuality"} or options.get("mimeType", "image/png") not in MIMES:
        return error(400, "Unsupported output options.")
    return None


class FakeImagen(FakeServer):
    def __init__(self, api_key: str = "fake-gemini-images-key") -> None:
        super().__init__(name="imagen")
        self.api_key = api_key
        self.produced: list[bytes] = []

    @property
    def base_url(self) -> str:
        return self.url + "/v1beta"

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1beta/models/{call}", self.call)]

    async def call(self, request: web.Request) -> web.Response:
        model, _, method = request.match_info["call"].partition(":")
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return error(400, "Invalid JSON payload received.")
        self.record(request, body, raw)
        if refused := key_error(request, self.api_key):
            return refused
        if method == "generateContent" and model.startswith("gemini") and "image" in model:
            return self._content(model, body)
        if method != "predict" or not model.startswith("imagen"):
            return error(404, f"models/{model} is not found for API version v1beta, or is not supported for {method}.")
        if model == "imagen-error-500":
            return error(500, "Internal error encountered.")
        if (refused := validate(body)) is not None:
            return refused
        prompt = body["instances"][0]["prompt"]
        params = body.get("parameters") or {}
        if "blocked" in prompt:
            reason = "Your current safety filter threshold filtered out the generated image."
            return web.json_response({"predictions": [{"raiFilteredReason": reason}]})
        mime = (params.get("outputOptions") or {}).get("mimeType", "image/png")
        predictions = []
        for i in range(params.get("sampleCount", 4)):
            data = png(f"imagen:{prompt}:{i}:{len(self.produced)}".encode())
            self.produced.append(data)
            predictions.append({"bytesBase64Encoded": base64.b64encode(data).decode(), "mimeType": mime})
        return web.json_response({"predictions": predictions})

    def _content(self, model: str, body: Any) -> web.Response:
        """Gemini's own image model: generateContent with responseModalities IMAGE, validated strictly."""
        if (refused := validate_content(body)) is not None:
            return refused
        parts = body["contents"][0]["parts"]
        prompt = " ".join(p["text"] for p in parts if "text" in p)
        images_in = sum(1 for p in parts if "inlineData" in p)
        data = png(f"gemini:{prompt}:{len(self.produced)}".encode())
        self.produced.append(data)
        answer = {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [
                            {"text": "Here is your image."},
                            {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(data).decode()}},
                        ],
                    },
                    "finishReason": "STOP",
                }
            ],
            "usageMetadata": {
                "promptTokenCount": len(prompt.split()) + 258 * images_in,
                "candidatesTokenCount": 1290,
                "totalTokenCount": len(prompt.split()) + 258 * images_in + 1290,
                "promptTokensDetails": [{"modality": "TEXT", "tokenCount": len(prompt.split())}]
                + ([{"modality": "IMAGE", "tokenCount": 258 * images_in}] if images_in else []),
                "candidatesTokensDetails": [{"modality": "IMAGE", "tokenCount": 1290}],
            },
            "modelVersion": model,
        }
        return web.json_response(answer)


CONTENT_RATIOS = {"1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9"}


def validate_content(body: Any) -> web.Response | None:
    if not isinstance(body, dict):
        return error(400, "Invalid JSON payload received.")
    for key in body:
        if key not in ("contents", "generationConfig", "safetySettings", "systemInstruction"):
            return _unknown(key, "")
    contents = body.get("contents")
    if not isinstance(contents, list) or len(contents) != 1:
        return error(400, "* GenerateContentRequest.contents: contents is not specified")
    for part in contents[0].get("parts") or ():
        if set(part) - {"text", "inlineData"}:
            return _unknown(next(iter(set(part) - {"text", "inlineData"})), "contents[0].parts[0]")
        inline = part.get("inlineData")
        if inline is not None and (inline.get("mimeType") not in MIMES | {"image/webp"} or not inline.get("data")):
            return error(400, "Unable to process input image.")
    config = body.get("generationConfig") or {}
    for key in config:
        if key not in ("responseModalities", "imageConfig", "candidateCount", "temperature"):
            return _unknown(key, "generation_config")
    if "IMAGE" not in (config.get("responseModalities") or ()):
        return error(400, "This model only supports responseModalities that include IMAGE.")
    ratio = (config.get("imageConfig") or {}).get("aspectRatio", "1:1")
    if ratio not in CONTENT_RATIOS or set(config.get("imageConfig") or {}) - {"aspectRatio"}:
        return error(400, f"Unsupported aspect ratio: {ratio}.")
    return None
