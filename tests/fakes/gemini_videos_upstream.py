"""A fake Veo on the Gemini API: `predictLongRunning`, its operations, and the Files API download.

Shapes follow google-genai's `models.generate_videos` in Gemini Developer API mode (`_GenerateVideosParameters_
to_mldev`, `_GenerateVideosOperation_from_mldev`, `files.download`): a body of `instances` (exactly one:
`prompt`, `image` {bytesBase64Encoded, mimeType}) and `parameters` (aspectRatio 16:9 | 9:16, durationSeconds,
resolution 720p | 1080p, negativePrompt, personGeneration, sampleCount, enhancePrompt), answered with
`{"name": "models/<model>/operations/<id>"}`; the operation polled at `GET /v1beta/<name>` is `done: false`
for `steps` polls, then done with `response.generateVideoResponse.generatedSamples[].video.uri` (a link to
`/v1beta/files/<id>:download?alt=media`, which redirects to a signed storage link on another origin, as
Google's does: `curl -L`), or with `error` {code, message}. Errors are Google's
`{"error": {"code", "message", "status"}}`. It refuses a missing or wrong `x-goog-api-key` (on the download
too), unknown fields (`Unknown name`), a model it does not serve (404), durations outside the model's range,
1080p at other than 8 seconds on Veo 3, an image that is not base64 PNG or JPEG, and a `seed` (Vertex only).

Behaviour by prompt: `FAIL` fails the operation with an error; `UNSAFE` ends it with no video and a
safety-filter reason; `SLOW` never ends. `polls` counts the polls per operation; `video_bytes` is the
video each job makes.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import secrets
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.gemini_upstream import error, key_error
from tests.fakes.server import FakeServer

# model -> the durations it makes
MODELS = {
    "veo-3.1-generate-preview": {4, 6, 8},
    "veo-3.1-fast-generate-preview": {4, 6, 8},
    "veo-3.0-generate-001": {4, 6, 8},
    "veo-2.0-generate-001": {5, 6, 7, 8},
}
INSTANCE = {"prompt", "image", "lastFrame", "referenceImages", "video"}
PARAMETERS = {
    "aspectRatio",
    "durationSeconds",
    "resolution",
    "negativePrompt",
    "personGeneration",
    "sampleCount",
    "enhancePrompt",
}
FAILURE = "Video generation failed due to an internal error. Please try again later."
FILTERED = (
    "We encountered an issue with the audio for your prompt. You have not been charged for this request. "
    "Please try changing your prompt."
)


def mp4(seed: str, size: int = 4096) -> bytes:
    """Bytes that start like an MP4 (an `ftyp` box), different for each job."""
    head = b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom"
    body = (seed.encode() * (size // max(len(seed), 1) + 1))[: max(size - len(head), 0)]
    return head + body


def _unknown(keys: Any, allowed: set[str], where: str) -> str | None:
    for key in keys:
        if key not in allowed:
            return f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': Cannot find field."
    return None


def validate(model: str, body: Any) -> str | None:
    if not isinstance(body, dict):
        return "Invalid JSON payload received. Expected an object."
    if msg := _unknown(body, {"instances", "parameters"}, ""):
        return msg
    instances = body.get("instances")
    if not isinstance(instances, list) or len(instances) != 1 or not isinstance(instances[0], dict):
        return "* PredictLongRunningRequest.instances: exactly one instance is required"
    instance = instances[0]
    if msg := _unknown(instance, INSTANCE, "instances[0]"):
        return msg
    if not instance.get("prompt") and "image" not in instance:
        return "A prompt or an image is required."
    if "image" in instance and (msg := _image(instance["image"])):
        return msg
    params = body.get("parameters") or {}
    if msg := _unknown(params, PARAMETERS, "parameters"):
        return msg
    return _parameters(model, params)


def _image(image: Any) -> str | None:
    if not isinstance(image, dict) or set(image) - {"bytesBase64Encoded", "mimeType"}:
        return "instances[0].image: only bytesBase64Encoded and mimeType are supported by the Gemini API."
    if image.get("mimeType") not in ("image/png", "image/jpeg"):
        return f"Unsupported MIME type: {image.get('mimeType')}"
    try:
        data = base64.b64decode(image.get("bytesBase64Encoded") or "", validate=True)
    except binascii.Error:
        return "Invalid value at 'instances[0].image.bytes_base64_encoded' (TYPE_BYTES), Base64 decoding failed"
    if not (data.startswith(b"\x89PNG") or data.startswith(b"\xff\xd8")):
        return "Unable to process input image. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"
    return None


def _parameters(model: str, params: dict[str, Any]) -> str | None:
    if params.get("aspectRatio", "16:9") not in ("16:9", "9:16"):
        return f"Aspect ratio {params['aspectRatio']} is not supported. Supported values are 16:9 and 9:16."
    seconds = params.get("durationSeconds", 8)
    allowed = MODELS[model]
    if not isinstance(seconds, int) or seconds not in allowed:
        low, high = min(allowed), max(allowed)
        return (
            f"The number value for `durationSeconds` is out of bound. Please provide a value between {low} and "
            f"{high}, inclusive."
        )
    resolution = params.get("resolution", "720p")
    if resolution not in ("720p", "1080p") or (resolution == "1080p" and model.startswith("veo-2")):
        return f"Resolution {resolution} is not supported for {model}."
    if resolution == "1080p" and seconds != 8:
        return "1080p resolution is only supported for 8 second videos."
    return None


class FakeGeminiVideos(FakeServer):
    def __init__(self, api_key: str = "gm-fake", steps: int = 2, video_size: int = 4096) -> None:
        super().__init__(name="gemini-videos")
        self.api_key = api_key
        self.steps = steps
        self.video_size = video_size
        self.operations: dict[str, dict[str, Any]] = {}
        self.polls: dict[str, int] = {}
        self.video_bytes: dict[str, bytes] = {}  # file id -> the video
        self.signatures: dict[str, str] = {}
        self._ids = itertools.count(1)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1beta/models/{call}", self.submit),
            web.get("/v1beta/models/{model}/operations/{op}", self.poll),
            web.get("/v1beta/files/{call}", self.download),
            web.get("/blobs/{id}", self.blob),
        ]

    def _key_error(self, request: web.Request) -> web.Response | None:
        return key_error(request, self.api_key)

    async def submit(self, request: web.Request) -> web.Response:
        model, _, method = request.match_info["call"].partition(":")
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return error(400, "Invalid JSON payload received.")
        self.record(request, body, raw)
        if refused := self._key_error(request):
            return refused
        if model not in MODELS or method != "predictLongRunning":
            return error(
                404,
                f"models/{model} is not found for API version v1beta, or is not supported for {method}. Call "
                "ListModels to see the list of available models and their supported methods.",
            )
        if msg := validate(model, body):
            return error(400, msg)
        op = f"{next(self._ids):04d}vid{model.replace('.', '').replace('-', '')[:8]}"
        name = f"models/{model}/operations/{op}"
        self.operations[name] = {"model": model, "body": body}
        self.polls[name] = 0
        return web.json_response({"name": name})

    async def poll(self, request: web.Request) -> web.Response:
        self.record(request, None)
        if refused := self._key_error(request):
            return refused
        name = f"models/{request.match_info['model']}/operations/{request.match_info['op']}"
        if name not in self.operations:
            return error(404, f"Operation {name} not found.")
        self.polls[name] += 1
        if self.polls[name] < self.steps or "SLOW" in self.operations[name]["body"]["instances"][0].get("prompt", ""):
            return web.json_response({"name": name, "done": False})
        return web.json_response(self._finished(name, request))

    def _finished(self, name: str, request: web.Request) -> dict[str, Any]:
        prompt = self.operations[name]["body"]["instances"][0].get("prompt", "")
        if "FAIL" in prompt:
            return {"name": name, "done": True, "error": {"code": 13, "message": FAILURE}}
        kind = "type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse"
        if "UNSAFE" in prompt:
            rai = {"raiMediaFilteredCount": 1, "raiMediaFilteredReasons": [FILTERED]}
            return {"name": name, "done": True, "response": {"@type": kind, "generateVideoResponse": rai}}
        file_id = name.rsplit("/", 1)[1].lower()
        self.video_bytes.setdefault(file_id, mp4(prompt, self.video_size))
        uri = f"https://generativelanguage.googleapis.com/v1beta/files/{file_id}:download?alt=media"
        sample = {"video": {"uri": uri}}
        response = {"@type": kind, "generateVideoResponse": {"generatedSamples": [sample]}}
        return {"name": name, "done": True, "response": response}

    async def download(self, request: web.Request) -> web.StreamResponse:
        self.record(request, None)
        if refused := self._key_error(request):
            return refused
        file_id, _, method = request.match_info["call"].partition(":")
        if method != "download" or request.query.get("alt") != "media":
            return error(400, "Only alt=media downloads are supported.")
        if file_id not in self.video_bytes:
            return error(404, f"File files/{file_id} not found.")
        sig = self.signatures.setdefault(file_id, secrets.token_hex(8))
        location = f"http://localhost:{self.port}/blobs/{file_id}?sig={sig}"  # another origin, as Google's storage
        return web.Response(status=302, headers={"Location": location})

    async def blob(self, request: web.Request) -> web.StreamResponse:
        """The redirect's target: a signed link that needs no key (and is sent none)."""
        self.record(request, None)
        file_id = request.match_info["id"]
        if file_id not in self.video_bytes or request.query.get("sig") != self.signatures.get(file_id):
            return web.Response(status=403, text="Forbidden")
        data = self.video_bytes[file_id]
        resp = web.StreamResponse(headers={"Content-Type": "video/mp4", "Content-Length": str(len(data))})
        await resp.prepare(request)
        for k in range(0, len(data), 65536):
            await resp.write(data[k : k + 65536])
        await resp.write_eof()
        return resp
