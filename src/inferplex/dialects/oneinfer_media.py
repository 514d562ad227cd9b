"""OneInfer's media routes, on the gateway's media families, in OneInfer's envelope and status table
(`oneinfer_envelope.py`):

- `POST /v1/ula/generate-image` (`provider`, `model`, `prompt`, `n`, `size`, `quality`, `negative_prompt`)
  → `data.images[]` of `{url, base64_data, mime_type}` (inferred: OneInfer's response page was not found).
  `url` is the gateway's own signed, expiring download URL of the stored image (a `data:` URI when the
  gateway has no media store). The canonical image request (OpenAI's) has no negative prompt: a
  `negative_prompt` is dropped and named in `x-inferplex-dropped-params` (a 400 with `drop_params: false`).
- `POST /v1/ula/generate-video`, JSON or multipart (a reference image under `files`; every other field a form
  string). `resolution` and `aspect_ratio` become OpenAI's `size` (720P at 16:9 is 1280x720), `duration` its
  `seconds`, `image_url` (inferred name: seed 001 sends "an image URL") its `input_reference`. The call blocks,
  as OneInfer's guide expects, on the same durable job `/v1/videos` creates, for up to `wait_s` seconds (the
  gateway's own field; default 150, under the guide's 180 s client timeout): completed, 200 with
  `data.videos[0].url`; failed, the provider's message as a 502; still running, 202 with the job's `id` and
  `status`. `GET /v1/ula/generate-video/{id}` polls it (inferred: seed 001 speaks of a job id to poll, and no
  polling page exists). `fps`, `seed`, `generate_audio`, `camera_fixed` and a non-default `service_tier`
  are checked, then dropped and named (OpenAI's video request has none of them).
- `POST /v1/ula/generate-audio`: JSON is text to speech (`prompt` the text, `voice_id`, `format`, `speed`;
  `volume` and `pitch` dropped and named) → `data.audios[]` of `{url (a data: URI), format, base64_data,
  mime_type}`, or with `stream: true` the audio bytes, chunked, as they come; multipart is speech to text
  (`file`, `model`, `provider`, `language`: `en-IN` is sent as its language, `en`) → `data.text`.
- `GET /v1/ula/get-supported-voice-for-audio-models?model_names=a,b` → `data.by_model` and `unknown_models`.
- Seed 001's text-to-speech example, posted to `/v1/ula/chat/completions` with OpenAI's `input`, `voice`,
  `response_format`, `speed` and no `messages` (`oneinfer.chat_completions` hands it here): answered as
  `generate-audio` answers speech.

`provider` narrows the deployments to that provider (400 when it is not configured); without `model`, the
provider's (else "openai"'s) first model of the family serves. Scopes: `images`, `video`; speech `tts` or
`audio`, transcription `stt` or `audio` (dialects/inferada_audio.py).
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.context import Context
from inferplex.dialects import inferada_audio, openai_audio
from inferplex.dialects.oneinfer_envelope import render_error, schema_error, success, validated
from inferplex.edge import endpoint, json_response, read_json
from inferplex.errors import InvalidRequest, Unavailable, UnsupportedMediaType, UpstreamError
from inferplex.families.images import IMAGES, ImageRequest, ImagesAnswer
from inferplex.families.speech import CONTENT_TYPES, SPEECH, Speech, SpeechRequest
from inferplex.families.transcription import TRANSCRIPTION, Transcript, TranscriptionRequest
from inferplex.families.videos import ReferenceFile, VideoRequest
from inferplex.gateway_request import ROUTING_KEYS, GatewayRequest, RoutingFields, flags, options, split
from inferplex.jobs.rows import Job
from inferplex.jobs.service import VideoJobs, public_status
from inferplex.media_store.sniff import AUDIO_TYPES, IMAGE_TYPES
from inferplex.media_store.store import owner_of
from inferplex.media_store.uploads import FieldKind, UploadForm, read_upload_form
from inferplex.services import Services

M = TypeVar("M", bound=BaseModel)
DEFAULT_PROVIDER = "openai"
WAIT_S, MAX_WAIT_S = 150.0, 170.0
MESSAGES = {
    "image": "Image generated successfully.",
    "video": "Video generated successfully.",
    "video_pending": "Video generation is in progress; poll GET /v1/ula/generate-video/{id}.",
    "video_status": "Video status retrieved successfully.",
    "speech": "Audio generated successfully.",
    "transcript": "Audio transcribed successfully.",
    "voices": "Supported voices retrieved successfully.",
}  # inferred, in the style of the chat route's "Chat completion generated successfully."
RESOLUTIONS = {"480P": 480, "720P": 720, "1080P": 1080}
ASPECTS = {"16:9": (16, 9), "9:16": (9, 16), "1:1": (1, 1), "4:3": (4, 3), "3:4": (3, 4), "21:9": (21, 9)}


# ---- request bodies (what the routes validate with; /openapi.json publishes them) --------------------------


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    provider: str | None = Field(None, min_length=1, description="narrows the deployments to this provider")
    model: str | None = Field(None, min_length=1, description="default: the provider's first model of the kind")
    endpoint_id: str | None = Field(None, description="a configured deployment's id")
    drop_params: bool | None = Field(None, description="false: a parameter that cannot be honoured is a 400")
    tags: list[str] | str | None = None


class ImageBody(_Body):
    prompt: str = Field(min_length=1)
    n: int | None = Field(None, ge=1, le=10)
    size: str | None = Field(None, description="WIDTHxHEIGHT, e.g. 1024x1024")
    quality: str | None = Field(None, description="standard, hd, low, medium, high, auto")
    negative_prompt: str | None = Field(None, description="dropped and named: no canonical equivalent")


class VideoBody(_Body):
    prompt: str = Field(min_length=1)
    resolution: Literal["480P", "720P", "1080P", "480p", "720p", "1080p"] = "720P"
    aspect_ratio: Literal["16:9", "9:16", "1:1", "4:3", "3:4", "21:9"] = "16:9"
    duration: int | None = Field(None, ge=4, le=12, description="seconds (default: the model's)")
    generate_audio: bool | None = None
    camera_fixed: bool | None = None
    service_tier: Literal["default", "flex"] | None = None
    fps: int | None = Field(None, ge=1, le=120)
    seed: int | None = Field(None, ge=-1)
    image_url: str | None = Field(None, min_length=1, description="a reference image's URL (inferred name)")
    wait_s: float | None = Field(None, ge=0, le=MAX_WAIT_S, description=f"how long to block (default {WAIT_S:g})")


class SpeechBody(_Body):
    prompt: str = Field(min_length=1, description="the text to read aloud")
    voice_id: str | None = Field(None, min_length=1, description="default: the model's first voice")
    format: Literal["mp3", "opus", "aac", "flac", "wav", "pcm"] = "mp3"
    stream: bool = Field(False, description="true: the audio bytes, chunked, instead of JSON")
    speed: float | None = Field(None, ge=0.25, le=4.0)
    volume: float | None = Field(None, description="dropped and named")
    pitch: float | None = Field(None, description="dropped and named")


class ChatSpeechBody(_Body):
    """Seed 001's example: OpenAI's speech fields on the chat route."""

    input: str = Field(min_length=1)
    voice: str | None = Field(None, min_length=1)
    response_format: Literal["mp3", "opus", "aac", "flac", "wav", "pcm"] = "mp3"
    speed: float | None = Field(None, ge=0.25, le=4.0)
    stream: bool = False


class TranscriptionForm(BaseModel):
    """`POST /v1/ula/generate-audio` as multipart/form-data: speech to text."""

    file: str = Field(json_schema_extra={"format": "binary"}, description="flac, mp3, mp4, m4a, ogg, wav or webm")
    model: str | None = None
    provider: str | None = None
    language: str | None = Field(None, description="e.g. en or en-IN (sent upstream as en)")
    prompt: str | None = None


_AUDIO_KINDS: dict[str, FieldKind] = {
    **dict.fromkeys(("model", "provider", "language", "prompt", "endpoint_id", "tags"), "str"),
    "temperature": "float",
    "drop_params": "bool",
}
_VIDEO_KINDS: dict[str, FieldKind] = {
    **dict.fromkeys(("model", "provider", "prompt", "resolution", "aspect_ratio", "service_tier"), "str"),
    **dict.fromkeys(("image_url", "endpoint_id", "tags"), "str"),
    **dict.fromkeys(("duration", "fps", "seed"), "int"),
    **dict.fromkeys(("generate_audio", "camera_fixed", "drop_params"), "bool"),
    "wait_s": "float",
}


# ---- shared steps ------------------------------------------------------------------------------------------


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise schema_error("The request body must be a JSON object.")
    return body


def _gateway(services: Services, body: dict[str, Any], kind: str) -> tuple[dict[str, Any], Any]:
    """The gateway's options out of `body` (in place) and the model resolved: (options found, options)."""
    found = split(body)
    try:
        checked = flags(found)
    except InvalidRequest as err:
        err.status, err.code = 422, "schema_validation_error"  # a wrong JSON type, in OneInfer's table
        raise
    routed = validated(RoutingFields, {k: found[k] for k in ROUTING_KEYS if k in found})
    catalog = services.pipeline.catalog
    provider = found.get("provider")
    if provider is not None and not isinstance(provider, str):
        raise schema_error("Invalid type for 'provider': expected a string.", "provider")
    if provider is not None and not catalog.has_provider(provider):
        raise InvalidRequest(
            f"Unsupported provider `{provider}`: it is not configured on this gateway.",
            param="provider",
            code="unsupported_provider",
        )
    if body.get("model") is None:
        body["model"] = catalog.default_model(provider or DEFAULT_PROVIDER, kind)
    if routed.endpoint_id is not None:
        catalog.check_endpoint(routed.endpoint_id)
    return found, options(found, checked, routed)


def _checked(model: type[M], body: dict[str, Any], found: dict[str, Any]) -> M:
    """The body as OneInfer's `model` (a wrong type 422, a bad value 400), with the gateway's keys it names."""
    return validated(model, {**body, **{k: v for k, v in found.items() if k in model.model_fields}})


def _drop(ctx: Context, opts: Any, dropped: list[str]) -> None:
    """Parameters the canonical request has no place for: named in `x-inferplex-dropped-params`, or with
    `drop_params: false` a 400 naming the first."""
    if dropped and not opts.drop_params:
        raise InvalidRequest(f"'{dropped[0]}' cannot be honoured by this gateway's models.", param=dropped[0])
    ctx.info.dropped_params = sorted({*ctx.info.dropped_params, *dropped})


def _data(ctx: Context, text: str, usage: dict[str, Any]) -> dict[str, Any]:
    """The fields every OneInfer answer's `data` has (as its chat answer)."""
    target = ctx.target
    return {
        "id": ctx.request_id,
        "created": int(time.time()),
        "text": text,
        "finish_reason": "stop",
        "provider": target.provider.name if target is not None else None,
        "model": target.upstream_model if target is not None else None,
        "usage": usage,
        "latency_ms": round(ctx.timings.as_dict()["total_ms"]),
    }


def _answer(ctx: Context, message: str, data: Any, status: int = 200) -> Response:
    return json_response(success(message, data), ctx.headers(), status)


# ---- images ------------------------------------------------------------------------------------------------


async def generate_image(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    body = _object(await read_json(request, services.max_body_bytes, services.json_limits))
    found, opts = _gateway(services, body, "image")
    checked = _checked(ImageBody, body, found)
    _drop(ctx, opts, [n for n in ("negative_prompt",) if body.get(n) is not None])
    fields = {k: v for k, v in body.items() if k in ("model", "prompt", "n", "size", "quality") and v is not None}
    fields["response_format"] = "b64_json"
    parsed = GatewayRequest(validated(ImageRequest, fields), opts, fields)
    answer: ImagesAnswer = await services.pipeline.run(IMAGES, ctx, parsed)
    images = [await _image(services, ctx, request, answer, item) for item in answer.get("data") or ()]
    usage = {"images": len(images), **(answer.get("usage") or {})}
    data = {**_data(ctx, checked.prompt, usage), "images": images}
    return _answer(ctx, MESSAGES["image"], data)


async def _image(
    services: Services, ctx: Context, request: Request, answer: ImagesAnswer, item: dict[str, Any]
) -> dict[str, Any]:
    fmt = answer.get("output_format") or "png"
    mime, b64 = f"image/{fmt}", item.get("b64_json") or ""
    out = {"url": f"data:{mime};base64,{b64}", "base64_data": b64, "mime_type": mime}
    if services.media is not None:
        raw = base64.b64decode(b64)
        stored = await services.media.save_bytes(
            owner_of(ctx.principal), raw, filename=f"image.{fmt}", content_type=mime, purpose="image"
        )
        out["url"] = services.media.url(stored, base_url=str(request.base_url))
    if item.get("revised_prompt"):
        out["revised_prompt"] = item["revised_prompt"]
    return out


# ---- video -------------------------------------------------------------------------------------------------


def _jobs(services: Services) -> VideoJobs:
    if services.jobs is None:
        raise Unavailable("Video jobs are not available on this gateway.", code="jobs_unavailable")
    return services.jobs


def video_size(resolution: str, aspect: str) -> str:
    """OneInfer's resolution and aspect ratio as OpenAI's `WxH`: the short side is the resolution, the long
    side the ratio's, rounded to an even number of pixels (720P at 16:9 is 1280x720, at 9:16 720x1280)."""
    short = RESOLUTIONS[resolution.upper()]
    w, h = ASPECTS[aspect]
    long = 2 * round(short * max(w, h) / min(w, h) / 2)
    return f"{long}x{short}" if w >= h else f"{short}x{long}"


def _video_request(
    ctx: Context, services: Services, body: dict[str, Any]
) -> tuple[GatewayRequest[VideoRequest], float]:
    found, opts = _gateway(services, body, "video")
    checked = _checked(VideoBody, body, found)
    dropped = [n for n in ("fps", "seed", "generate_audio", "camera_fixed") if body.get(n) is not None]
    _drop(ctx, opts, dropped + (["service_tier"] if checked.service_tier == "flex" else []))
    fields: dict[str, Any] = {
        "model": body["model"],
        "prompt": checked.prompt,
        "size": video_size(checked.resolution, checked.aspect_ratio),
    }
    if checked.duration is not None:
        fields["seconds"] = str(checked.duration)
    if checked.image_url is not None:
        fields["input_reference"] = {"image_url": checked.image_url}
    wait = WAIT_S if checked.wait_s is None else checked.wait_s
    return GatewayRequest(validated(VideoRequest, fields), opts, fields), wait


async def _video_input(request: Request, services: Services) -> tuple[dict[str, Any], UploadForm | None]:
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind == "application/json":
        return _object(await read_json(request, services.max_body_bytes, services.json_limits)), None
    if kind != "multipart/form-data":
        raise UnsupportedMediaType(
            f"Unsupported content type {kind or '(none)'!r}: send the body as application/json or multipart/form-data."
        )
    limit = services.media.max_upload_bytes if services.media is not None else services.max_body_bytes
    form = await read_upload_form(request, max_bytes=limit, files={"files": IMAGE_TYPES}, kinds=_VIDEO_KINDS)
    return dict(form.fields), form


async def generate_video(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    jobs = _jobs(services)
    body, form = await _video_input(request, services)
    try:
        parsed, wait = _video_request(ctx, services, body)
        up = form.file("files") if form is not None else None
        if up is not None:
            parsed.body.with_reference(ReferenceFile(str(up.path), up.filename, up.content_type, up.bytes))
        job = await jobs.submit(ctx, parsed)
    finally:
        if form is not None:
            form.close()
    job = await _wait(jobs, ctx, job, wait)
    if job.status in ("failed", "cancelled"):
        raise UpstreamError(job.error_message or "The video could not be generated.", code=job.error_code or "failed")
    data = await _video_data(jobs, ctx, request, job)
    if job.status == "completed":
        return _answer(ctx, MESSAGES["video"], data)
    return _answer(ctx, MESSAGES["video_pending"].format(id=job.id), data, 202)


async def _wait(jobs: VideoJobs, ctx: Context, job: Job, wait_s: float) -> Job:
    """The job once it is finished, or as it is after `wait_s` seconds (the poller works on it meanwhile)."""
    deadline = time.monotonic() + wait_s
    every = min(1.0, max(0.05, jobs.config.tick_s))
    while job.status not in ("completed", "failed", "cancelled") and time.monotonic() < deadline:
        await asyncio.sleep(min(every, max(0.0, deadline - time.monotonic())))
        job = await jobs.owned(ctx, job.id)
    return job


async def _video_data(jobs: VideoJobs, ctx: Context, request: Request, job: Job) -> dict[str, Any]:
    target = jobs.target(job)
    status = public_status(job)
    videos = []
    if status == "completed" and jobs.media is not None:
        file = await jobs.content(ctx, job.id, "video")
        url = jobs.media.url(file, base_url=str(request.base_url))
        videos.append({"url": url, "mime_type": file.content_type, "format": "mp4"})
    data = {
        **_data(ctx, job.prompt, {"seconds": int(job.seconds), "size": job.size}),
        "id": job.id,
        "created": int(job.created_at),
        "finish_reason": "stop" if status == "completed" else None,
        "provider": target.provider.name if target is not None else None,
        "model": target.upstream_model if target is not None else job.model,
        "status": status,
        "progress": 100 if status == "completed" else job.progress,
        "videos": videos,
    }
    if status == "failed":
        data["error"] = {"code": job.error_code or "failed", "message": job.error_message or ""}
    return data


async def video_status(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    jobs = _jobs(services)
    job = await jobs.owned(ctx, request.path_params["job_id"])
    return _answer(ctx, MESSAGES["video_status"], await _video_data(jobs, ctx, request, job))


# ---- audio -------------------------------------------------------------------------------------------------


def is_speech(body: Any) -> bool:
    """Seed 001's text-to-speech body on the chat route: `input` (and `voice`), no `messages`."""
    return isinstance(body, dict) and "messages" not in body and "input" in body


async def chat_speech(request: Request, body: dict[str, Any], ctx: Context) -> Response:
    """Seed 001's example as it posts it to `/v1/ula/chat/completions` (the chat scope was checked; speech
    needs its own)."""
    services: Services = request.app.state.services
    inferada_audio.require_any(ctx.principal, inferada_audio.SPEECH_SCOPES)
    found, opts = _gateway(services, body, "speech")
    checked = _checked(ChatSpeechBody, body, found)
    fields = {"model": body["model"], "input": checked.input, "voice": checked.voice,
              "response_format": checked.response_format, "speed": checked.speed}  # fmt: skip
    return await _speak(request, ctx, services, fields, opts, checked.stream)


async def generate_audio(request: Request, ctx: Context) -> Response:
    """JSON: text to speech; multipart: speech to text (dispatched on the content type, as OneInfer does)."""
    services: Services = request.app.state.services
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind == "multipart/form-data":
        await inferada_audio.authenticate(request, ctx, inferada_audio.HEARING_SCOPES)
        return await _transcribe(request, ctx, services)
    await inferada_audio.authenticate(request, ctx, inferada_audio.SPEECH_SCOPES)
    ctx.dialect = "oneinfer"
    body = _object(await read_json(request, services.max_body_bytes, services.json_limits))
    found, opts = _gateway(services, body, "speech")
    checked = _checked(SpeechBody, body, found)
    _drop(ctx, opts, [n for n in ("volume", "pitch") if body.get(n) is not None])
    fields = {"model": body["model"], "input": checked.prompt, "voice": checked.voice_id,
              "response_format": checked.format, "speed": checked.speed}  # fmt: skip
    return await _speak(request, ctx, services, fields, opts, checked.stream)


def _default_voice(services: Services, model: str) -> str:
    found = inferada_audio.find_model(services, model, "speech")
    voices = inferada_audio.voices_of(services, found) if found is not None else []
    if not voices:
        raise InvalidRequest(f"Name a voice: `{model}` lists none to default to.", param="voice_id")
    return voices[0]


async def _speak(
    request: Request, ctx: Context, services: Services, fields: dict[str, Any], opts: Any, stream: bool
) -> Response:
    if fields["voice"] is None:
        fields["voice"] = _default_voice(services, fields["model"])
    fields = {k: v for k, v in fields.items() if v is not None}
    parsed = GatewayRequest(validated(SpeechRequest, fields), opts, fields)
    result: Speech = await services.pipeline.run(SPEECH, ctx, parsed)
    if stream:
        return openai_audio.SPEECH_RENDERING.result(result, parsed, ctx)  # the bytes, chunked, as they come
    audio = await _collect(result)
    fmt = parsed.body.response_format
    mime = CONTENT_TYPES.get(fmt, result.content_type)
    b64 = base64.b64encode(audio).decode()
    usage = {"characters": len(parsed.body.input), **(result.usage or {})}
    item = {"url": f"data:{mime};base64,{b64}", "format": fmt, "base64_data": b64, "mime_type": mime}
    return _answer(ctx, MESSAGES["speech"], {**_data(ctx, parsed.body.input, usage), "audios": [item]})


async def _collect(result: Speech) -> bytes:
    chunks: list[bytes] = []
    try:
        async for chunk in result.audio:
            chunks.append(chunk)
    finally:
        await result.aclose()
    return b"".join(chunks)


async def _transcribe(request: Request, ctx: Context, services: Services) -> Response:
    ctx.dialect = "oneinfer"
    limit = openai_audio.upload_limit(services)
    files = {"file": AUDIO_TYPES | {"video/mp4", "video/webm"}}
    form = await read_upload_form(request, max_bytes=limit, files=files, kinds=_AUDIO_KINDS)
    with form:
        fields = await openai_audio.audio_fields(form)
        _, opts = _gateway(services, fields, "transcription")
        if isinstance(fields.get("language"), str):
            fields["language"] = fields["language"].split("-")[0].lower()  # en-IN: OpenAI's field is ISO-639-1
        fields["response_format"] = "json"
        parsed = GatewayRequest(validated(TranscriptionRequest, fields), opts, fields)
        result: Transcript = await services.pipeline.run(TRANSCRIPTION, ctx, parsed)
    duration = inferada_audio.inferada_transcript(result, parsed.body)["duration"]
    usage = {"seconds": duration, **(result.usage or {})}
    data = {**_data(ctx, result.text, usage), "language": result.language, "duration": duration}
    return _answer(ctx, MESSAGES["transcript"], data)


# ---- voices ------------------------------------------------------------------------------------------------


async def supported_voices(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    await inferada_audio.authenticate(request, ctx, inferada_audio.SPEECH_SCOPES)
    ctx.dialect = "oneinfer"
    raw = request.query_params.get("model_names")
    speech = [m for m in services.pipeline.catalog.models if m.type == "speech" and ctx.principal.may_use(m.name)]
    names = [n.strip() for n in raw.split(",") if n.strip()] if raw else [m.name for m in speech]
    known = {m.name: m for m in speech}
    by_model = {}
    for name in dict.fromkeys(names):
        if name in known:
            voices = inferada_audio.voices_of(services, known[name])
            provider = services.pipeline.catalog.targets(known[name])[0].provider.name
            by_model[name] = {"provider": provider, "default_voice_id": voices[0] if voices else None,
                              "voice_ids": voices}  # fmt: skip
    unknown = [n for n in dict.fromkeys(names) if n not in known]
    return _answer(ctx, MESSAGES["voices"], {"by_model": by_model, "unknown_models": unknown})


def _route(path: str, handler: Callable[..., Any], scope: str | None, method: str = "POST") -> Route:
    return Route(path, endpoint(render_error, handler, scope, "oneinfer"), methods=[method])


routes = [
    _route("/v1/ula/generate-image", generate_image, "images"),
    _route("/v1/ula/generate-video", generate_video, "video"),
    _route("/v1/ula/generate-video/{job_id}", video_status, "video", "GET"),
    _route("/v1/ula/generate-audio", generate_audio, None),  # authenticated by the handler: stt or tts
    _route("/v1/ula/get-supported-voice-for-audio-models", supported_voices, None, "GET"),
]
