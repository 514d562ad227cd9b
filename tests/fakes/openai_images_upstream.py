"""A fake of OpenAI's image API (and Azure OpenAI's, at deployment URLs): a real HTTP server on 127.0.0.1 that
validates what it receives as OpenAI does, per model.

- `POST /v1/images/generations` (JSON), `/v1/images/edits` and `/v1/images/variations` (multipart); Azure's
  `/openai/deployments/{deployment}/images/...?api-version=` with `api-key` when `azure=True`.
- Per model (`dall-e-2`, `dall-e-3`, `gpt-image-*`): the parameters it takes (any other is OpenAI's 400
  `unknown_parameter`), its sizes, qualities and `n` (dall-e-3: 1 only), its default answer (dall-e: a URL on
  this server, `GET /files/{name}`; gpt-image: base64 with `usage`), `stream` with `partial_images` (SSE
  `image_generation.partial_image` / `image_generation.completed`) for the GPT image models only.
- A model named `error-500` answers 500 every time.
Every image produced is a distinct small PNG, kept in `produced` (bytes) so tests compare what arrived.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import struct
import time
import zlib
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.server import FakeServer

COMMON = {"model", "prompt", "n", "size", "quality", "user"}
GEN_PARAMS = {
    "dall-e-2": COMMON | {"response_format"},
    "dall-e-3": COMMON | {"response_format", "style"},
    "gpt-image": COMMON
    | {"output_format", "output_compression", "background", "moderation", "stream", "partial_images"},
}
EDIT_PARAMS = {
    "dall-e-2": {"model", "prompt", "n", "size", "user", "response_format", "image", "mask"},
    "gpt-image": {"model", "prompt", "n", "size", "quality", "user", "image", "image[]", "mask", "background",
                  "output_format", "output_compression", "input_fidelity", "stream", "partial_images"},
}  # fmt: skip
VARIATION_PARAMS = {"model", "image", "n", "size", "user", "response_format"}
SIZES = {
    "dall-e-2": {"256x256", "512x512", "1024x1024"},
    "dall-e-3": {"1024x1024", "1792x1024", "1024x1792"},
    "gpt-image": {"1024x1024", "1536x1024", "1024x1536", "auto"},
}
QUALITIES = {
    "dall-e-2": {"standard"},
    "dall-e-3": {"standard", "hd"},
    "gpt-image": {"low", "medium", "high", "auto"},
}
OUTPUT_TOKENS = {
    "1024x1024": {"low": 272, "medium": 1056, "high": 4160},
    "1024x1536": {"low": 408, "medium": 1584, "high": 6240},
    "1536x1024": {"low": 408, "medium": 1584, "high": 6240},
}


def family(model: str) -> str | None:
    for name in ("dall-e-2", "dall-e-3", "gpt-image"):
        if model.startswith(name):
            return name
    return None


def error(status: int, message: str, param: str | None = None, code: str | None = None) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status)


def png(seed: bytes) -> bytes:
    """A valid 1x1 PNG carrying `seed` in a tEXt chunk (so every image is distinct)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00\xff\x00\x00")
    text = b"Comment\x00" + seed
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"tEXt", text) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


class FakeOpenAIImages(FakeServer):
    def __init__(self, api_key: str = "sk-fake-images", *, azure: bool = False) -> None:
        super().__init__(name="openai-images")
        self.api_key = api_key
        self.azure = azure
        self.produced: list[bytes] = []
        self.files: dict[str, bytes] = {}
        self._ids = itertools.count(1)
        self.slow_stream = 0.0  # seconds between the partial images and the completed one

    @property
    def base_url(self) -> str:
        return self.url if self.azure else self.url + "/v1"

    def routes(self) -> list[web.RouteDef]:
        prefix = "/openai/deployments/{deployment}/images" if self.azure else "/v1/images"
        return [
            web.post(prefix + "/generations", self.generations),
            web.post(prefix + "/edits", self.edits),
            web.post(prefix + "/variations", self.variations),
            web.get("/files/{name}", self.file),
        ]

    # ---- checks -------------------------------------------------------------------------------------------

    def _auth(self, request: web.Request) -> web.Response | None:
        if self.azure:
            if request.query.get("api-version") is None:
                return error(404, "Resource not found")
            if request.headers.get("api-key") != self.api_key:
                return error(401, "Access denied due to invalid subscription key.", code="401")
            return None
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return error(401, "Incorrect API key provided.", code="invalid_api_key")
        return None

    def _model(self, request: web.Request, body: dict[str, Any]) -> str:
        return str(request.match_info.get("deployment") or body.get("model") or "dall-e-2")

    def _validate(self, model: str, body: dict[str, Any], allowed: dict[str, set[str]]) -> web.Response | None:
        fam = family(model)
        if model == "error-500":
            return error(500, "The server had an error while processing your request.")
        if fam is None or fam not in allowed:
            return error(400, f"Invalid value for 'model': {model!r} is not supported here.", "model", "invalid_value")
        for key in body:
            if key not in allowed[fam]:
                return error(400, f"Unknown parameter: '{key}'.", key, "unknown_parameter")
        if "prompt" in allowed[fam] and not isinstance(body.get("prompt"), str):
            return error(400, "Missing required parameter: 'prompt'.", "prompt", "missing_required_parameter")
        size = body.get("size")
        if size is not None and size not in SIZES[fam]:
            sizes = ", ".join(sorted(SIZES[fam]))
            return error(400, f"Invalid value: '{size}'. Supported values are: {sizes}.", "size", "invalid_value")
        quality = body.get("quality")
        if quality is not None and quality not in QUALITIES[fam]:
            return error(400, f"Invalid value: '{quality}'.", "quality", "invalid_value")
        n = int(body.get("n", 1))
        if not 1 <= n <= 10 or (fam == "dall-e-3" and n != 1):
            return error(400, "Invalid 'n': integer must be 1 for dall-e-3.", "n", "invalid_value")
        return None

    # ---- answers ------------------------------------------------------------------------------------------

    def _image(self, prompt: str) -> bytes:
        data = png(f"{prompt}#{next(self._ids)}".encode())
        self.produced.append(data)
        return data

    def _answer(self, model: str, body: dict[str, Any], images_in: int = 0) -> dict[str, Any]:
        fam = family(model)
        n, prompt = int(body.get("n", 1)), str(body.get("prompt", "variation"))
        size = body.get("size") or "1024x1024"
        answer: dict[str, Any] = {"created": int(time.time()), "data": []}
        for _ in range(n):
            data = self._image(prompt)
            if fam != "gpt-image" and body.get("response_format", "url") == "url":
                name = f"img-{len(self.files)}.png"
                self.files[name] = data
                item: dict[str, Any] = {"url": f"http://localhost:{self.port}/files/{name}?sig=azure-sas"}
            else:
                item = {"b64_json": base64.b64encode(data).decode()}
            if fam == "dall-e-3":
                item["revised_prompt"] = "revised: " + prompt
            answer["data"].append(item)
        if fam == "gpt-image":
            quality = body.get("quality") if body.get("quality") not in (None, "auto") else "medium"
            real = size if size != "auto" else "1024x1024"
            out = OUTPUT_TOKENS[real][quality] * n
            text = len(prompt.split())
            answer.update(
                size=real,
                quality=quality,
                background=body.get("background") if body.get("background") not in (None, "auto") else "opaque",
                output_format=body.get("output_format", "png"),
                usage={
                    "total_tokens": text + 323 * images_in + out,
                    "input_tokens": text + 323 * images_in,
                    "output_tokens": out,
                    "input_tokens_details": {"text_tokens": text, "image_tokens": 323 * images_in},
                },
            )
        return answer

    async def generations(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        if request.content_type != "application/json":
            return error(400, "Invalid content type: expected application/json.")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return error(400, "We could not parse the JSON body of your request.")
        self.record(request, body, raw)
        if (refused := self._auth(request)) is not None:
            return refused
        model = self._model(request, body)
        if (refused := self._validate(model, body, GEN_PARAMS)) is not None:
            return refused
        answer = self._answer(model, body)
        if body.get("stream"):
            return await self._stream(request, answer, int(body.get("partial_images", 0)), "image_generation")
        return web.json_response(answer)

    async def _stream(
        self, request: web.Request, answer: dict[str, Any], partials: int, prefix: str
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        common = {k: answer[k] for k in ("size", "quality", "background", "output_format")}
        common["created_at"] = answer["created"]
        for i in range(partials):
            data = base64.b64encode(png(f"partial-{i}".encode())).decode()
            event = {"type": f"{prefix}.partial_image", "b64_json": data, **common, "partial_image_index": i}
            await resp.write(f"event: {event['type']}\ndata: ".encode() + orjson.dumps(event) + b"\n\n")
        if self.slow_stream:
            await asyncio.sleep(self.slow_stream)  # the final image takes a while, as a real one does
        for item in answer["data"]:
            event = {"type": f"{prefix}.completed", "b64_json": item["b64_json"], **common, "usage": answer["usage"]}
            await resp.write(f"event: {event['type']}\ndata: ".encode() + orjson.dumps(event) + b"\n\n")
        await resp.write_eof()
        return resp

    async def _form(self, request: web.Request) -> tuple[dict[str, Any], list[tuple[str, bytes, str]]] | web.Response:
        if request.content_type != "multipart/form-data":
            return error(400, "Invalid content type: expected multipart/form-data.")
        fields: dict[str, Any] = {}
        files: list[tuple[str, bytes, str]] = []
        reader = await request.multipart()
        async for part in reader:
            name = part.name or ""
            if part.filename is not None:
                files.append((name, await part.read(), part.headers.get("Content-Type", "")))
                fields[name] = "<file>"
            else:
                fields[name] = await part.text()
        self.record(request, {**fields})
        return fields, files

    async def edits(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._auth(request)) is not None:
            return refused
        form = await self._form(request)
        if isinstance(form, web.Response):
            return form
        fields, files = form
        model = self._model(request, fields)
        if (refused := self._validate(model, fields, EDIT_PARAMS)) is not None:
            return refused
        images = [f for f in files if f[0] in ("image", "image[]")]
        if not images:
            return error(400, "Missing required parameter: 'image'.", "image", "missing_required_parameter")
        if family(model) == "dall-e-2" and (len(images) > 1 or any(not d.startswith(b"\x89PNG") for _, d, _ in images)):
            return error(400, "Invalid input image - format must be in ['RGBA', 'LA', 'L'], got RGB.", "image")
        answer = self._answer(model, fields, images_in=len(images))
        if fields.get("stream") == "true":
            return await self._stream(request, answer, int(fields.get("partial_images", 0)), "image_edit")
        return web.json_response(answer)

    async def variations(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._auth(request)) is not None:
            return refused
        form = await self._form(request)
        if isinstance(form, web.Response):
            return form
        fields, files = form
        model = self._model(request, fields)
        if (refused := self._validate(model, fields, {"dall-e-2": VARIATION_PARAMS})) is not None:
            return refused
        if len(files) != 1 or files[0][0] != "image" or not files[0][1].startswith(b"\x89PNG"):
            return error(400, "Invalid input image: send one PNG as 'image'.", "image", "invalid_image")
        return web.json_response(self._answer(model, fields))

    async def file(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["name"])
        if data is None or request.query.get("sig") != "azure-sas" or "Authorization" in request.headers:
            return web.Response(status=403, text="AuthenticationFailed")
        return web.Response(body=data, content_type="image/png")


TOGETHER_PARAMS = {"model", "prompt", "width", "height", "n", "steps", "seed", "negative_prompt", "response_format",
                   "output_format", "image_url", "disable_safety_checker"}  # fmt: skip
FIREWORKS_PARAMS = {"prompt", "aspect_ratio", "guidance_scale", "num_inference_steps", "seed"}
FIREWORKS_RATIOS = {"1:1", "21:9", "16:9", "3:2", "5:4", "4:5", "2:3", "9:16", "9:21", "4:3", "3:4"}


class FakeVendorImages(FakeServer):
    """Together's `/v1/images/generations` (`width`/`height`, not `size`; answers URLs by default) and
    Fireworks' FLUX workflow `/inference/v1/workflows/accounts/fireworks/models/{model}/text_to_image`
    (`prompt`, `aspect_ratio`; answers the image's bytes in the type `Accept` asks for), each refusing any
    other parameter with its 400."""

    def __init__(self, api_key: str = "sk-fake-vendor") -> None:
        super().__init__(name="vendor-images")
        self.api_key = api_key
        self.produced: list[bytes] = []
        self.files: dict[str, bytes] = {}

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/images/generations", self.together),
            web.post("/inference/v1/workflows/accounts/fireworks/models/{model}/text_to_image", self.fireworks),
            web.get("/imgproxy/{name}", self.file),
        ]

    def _image(self, seed: str) -> bytes:
        data = png(f"{seed}#{len(self.produced)}".encode())
        self.produced.append(data)
        return data

    async def together(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.record(request, body)
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response(
                {"error": {"message": "Invalid API key provided", "type": "invalid_api_key"}}, status=401
            )
        for key in body:
            if key not in TOGETHER_PARAMS:
                message = f"Unrecognized request argument supplied: {key}"
                return web.json_response({"error": {"message": message, "type": "invalid_request_error"}}, status=400)
        width, height = body.get("width", 1024), body.get("height", 768)
        if width % 8 or height % 8 or not (64 <= width <= 1792 and 64 <= height <= 1792):
            message = "width and height must be multiples of 8 between 64 and 1792"
            return web.json_response({"error": {"message": message, "type": "invalid_request_error"}}, status=400)
        data = []
        for i in range(int(body.get("n", 1))):
            image = self._image(body["prompt"])
            name = f"t-{len(self.files)}.png"
            self.files[name] = image
            data.append({"index": i, "url": f"http://localhost:{self.port}/imgproxy/{name}"})
        return web.json_response({"id": "tg-1", "model": body["model"], "object": "list", "data": data})

    async def fireworks(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.record(request, body)
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response(
                {"error": {"object": "error", "type": "unauthorized", "message": "unauthorized"}}, status=401
            )
        for key in body:
            if key not in FIREWORKS_PARAMS:
                return _fireworks_error(f"Extra inputs are not permitted: {key}")
        if body.get("aspect_ratio", "16:9") not in FIREWORKS_RATIOS:
            return _fireworks_error("invalid aspect_ratio")
        accept = request.headers.get("Accept", "")
        if accept not in ("image/png", "image/jpeg"):
            return web.json_response({"error": {"message": "Accept must be image/jpeg or image/png"}}, status=400)
        return web.Response(body=self._image(body["prompt"]), content_type=accept)

    async def file(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["name"])
        if data is None or "Authorization" in request.headers:
            return web.Response(status=403)
        return web.Response(body=data, content_type="image/png")


def _fireworks_error(message: str) -> web.Response:
    return web.json_response(
        {"error": {"object": "error", "type": "invalid_request_error", "message": message}}, status=400
    )
