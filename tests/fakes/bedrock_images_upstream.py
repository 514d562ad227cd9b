"""A fake of Bedrock's InvokeModel for image models: `POST /model/{id}/invoke`, SigV4 checked as Bedrock does
(by composition: `FakeBedrock`'s signature check), the body validated per model family.

- Amazon Titan Image Generator / Nova Canvas: `taskType` TEXT_IMAGE or IMAGE_VARIATION with its params and
  `imageGenerationConfig` (`numberOfImages` 1-5, `width`/`height` Titan's listed sizes or, for Nova, 320-4096
  in steps of 16, `quality` standard|premium, `cfgScale`, `seed`); any other key is a 400 ValidationException
  ("extraneous key"). Answers `{"images": [base64...], "error": null}`.
- Stability (`stability.*`): `prompt`, `mode`, `aspect_ratio`, `output_format`, `seed`, `negative_prompt`;
  answers `{"seeds", "finish_reasons": [null], "images": [base64]}`.
- Model ids containing `error-500` answer 500 InternalServerException every time.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.bedrock_upstream import FakeBedrock, error
from tests.fakes.openai_images_upstream import png
from tests.fakes.server import FakeServer

TITAN_SIZES = {(1024, 1024), (768, 768), (512, 512), (768, 1152), (1152, 768), (1280, 768), (768, 1280),
               (896, 1152), (1152, 896), (1408, 768), (768, 1408), (1173, 640)}  # fmt: skip
CONFIG = {"numberOfImages", "width", "height", "quality", "cfgScale", "seed"}
STABILITY = {"prompt", "mode", "aspect_ratio", "output_format", "seed", "negative_prompt"}
STABILITY_RATIOS = {"1:1", "16:9", "21:9", "2:3", "3:2", "4:5", "5:4", "9:16", "9:21"}


def _extraneous(key: str) -> str:
    return f"Malformed input request: #: extraneous key [{key}] is not permitted, please reformat your input and try again."  # noqa: E501


def _amazon(model: str, body: dict[str, Any]) -> str | None:
    task = body.get("taskType")
    params = {"TEXT_IMAGE": "textToImageParams", "IMAGE_VARIATION": "imageVariationParams"}.get(str(task))
    if params is None:
        return f"Malformed input request: #/taskType: {task} is not a valid enum value"
    for key in body:
        if key not in ("taskType", params, "imageGenerationConfig"):
            return _extraneous(key)
    p = body.get(params)
    if not isinstance(p, dict):
        return f"Malformed input request: #: required key [{params}] not found"
    if task == "TEXT_IMAGE" and not (isinstance(p.get("text"), str) and 1 <= len(p["text"]) <= 1024):
        return "Malformed input request: #/textToImageParams/text: expected minLength: 1, maxLength: 1024"
    if task == "IMAGE_VARIATION" and not (isinstance(p.get("images"), list) and len(p["images"]) == 1):
        return "Malformed input request: #/imageVariationParams/images: expected one image"
    config = body.get("imageGenerationConfig") or {}
    for key in config:
        if key not in CONFIG:
            return _extraneous(key)
    if not 1 <= config.get("numberOfImages", 1) <= 5:
        return "Malformed input request: #/imageGenerationConfig/numberOfImages: 6 is not less or equal to 5"
    if config.get("quality", "standard") not in ("standard", "premium"):
        return "Malformed input request: #/imageGenerationConfig/quality: not a valid enum value"
    w, h = config.get("width", 1024), config.get("height", 1024)
    nova = "nova-canvas" in model
    ok = (320 <= w <= 4096 and 320 <= h <= 4096 and w % 16 == 0 and h % 16 == 0) if nova else (w, h) in TITAN_SIZES
    if not ok:
        return f"The provided image dimensions {w}x{h} are not supported."
    return None


def _stability(body: dict[str, Any]) -> str | None:
    for key in body:
        if key not in STABILITY:
            return _extraneous(key)
    if not isinstance(body.get("prompt"), str) or not body["prompt"]:
        return "Malformed input request: #: required key [prompt] not found"
    if body.get("aspect_ratio", "1:1") not in STABILITY_RATIOS:
        return "Malformed input request: #/aspect_ratio: not a valid enum value"
    return None


class FakeBedrockImages(FakeServer):
    def __init__(self, access_key: str = "AKIDFAKE", secret_key: str = "fake-secret", region: str = "us-east-1"):
        super().__init__(name="bedrock-images")
        self.signer = FakeBedrock(access_key, secret_key, region)  # its SigV4 check, never started
        self.produced: list[bytes] = []

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/model/{model}/invoke", self.invoke)]

    async def invoke(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return error(400, "ValidationException", "Malformed input request, please reformat your input")
        self.record(request, body, raw)
        if msg := self.signer._signature_error(request, raw):
            return error(403, "InvalidSignatureException", msg)
        model = request.match_info["model"]
        if "error-500" in model:
            return error(500, "InternalServerException", "The system encountered an unexpected error.")
        if not isinstance(body, dict):
            return error(400, "ValidationException", "Malformed input request")
        stability = model.startswith("stability.")
        if msg := (_stability(body) if stability else _amazon(model, body)):
            return error(400, "ValidationException", msg)
        count = 1 if stability else (body.get("imageGenerationConfig") or {}).get("numberOfImages", 1)
        images = []
        for i in range(count):
            data = png(f"bedrock:{model}:{i}:{len(self.produced)}".encode())
            self.produced.append(data)
            images.append(base64.b64encode(data).decode())
        if stability:
            return web.json_response({"seeds": [42], "finish_reasons": [None], "images": images})
        return web.json_response({"images": images, "error": None})
