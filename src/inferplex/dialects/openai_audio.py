"""OpenAI's audio routes: `POST /v1/audio/speech`, `GET /v1/audio/voices`, `POST /v1/audio/transcriptions` and
`POST /v1/audio/translations`, through `Pipeline.run` with the speech and transcription families.

Speech answers the audio bytes as they come from the upstream, with the format's Content-Type, or with
`stream_format: sse` OpenAI's events (`speech.audio.delta` with base64 audio, then `speech.audio.done` with
the usage when the provider reported one). A failure after the first byte cuts an audio stream short (its
length was never promised) and ends an SSE stream with an `error` event.

Transcriptions take a multipart upload spooled to disk (media_store/uploads.py: size-limited, type checked
against the file's bytes) and measured (`families.transcription.measure_ms`) before any call, so a
per-second model is billed the audio's seconds even when its provider does not say them. The gateway renders
json, text, srt, vtt, verbose_json and diarized_json from the canonical `Transcript` itself; `stream: true`
answers OpenAI's `transcript.text.delta` / `transcript.text.done` events, replayed from the whole transcript.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.accounts.guard import add_cost
from inferplex.context import Context
from inferplex.dialects.failure import error_headers, stream_failure
from inferplex.dialects.registry import Rendering
from inferplex.edge import endpoint, json_response, read_json
from inferplex.errors import GatewayError, InvalidRequest
from inferplex.families.base import Family
from inferplex.families.speech import SPEECH, Speech, SpeechAdapter, SpeechRequest
from inferplex.families.transcription import (
    TRANSCRIPTION,
    TRANSLATION,
    Segment,
    Transcript,
    TranscriptionRequest,
    TranslationRequest,
    measure_ms,
)
from inferplex.gateway_request import GatewayRequest, parse_request
from inferplex.media_store.sniff import AUDIO_TYPES
from inferplex.media_store.uploads import FieldKind, UploadForm, read_upload_form
from inferplex.services import Services
from inferplex.sse import encode
from inferplex.streaming import SSEResponse

MAX_UPLOAD_BYTES = 25 * 1024 * 1024  # OpenAI's limit, without a media store's `max_upload_bytes`
# Every text field the routes take (OpenAI's, and the gateway's own routing and logging options); any other
# is a 400 naming it. Arrays come as `name[]` (OpenAI's SDKs), `chunking_strategy`'s object as `name[key]`.
_KINDS: dict[str, FieldKind] = {
    **dict.fromkeys(("model", "language", "prompt", "response_format", "chunking_strategy", "user"), "str"),
    **dict.fromkeys(("provider", "endpoint_id", "region", "tags", "signature"), "str"),
    **dict.fromkeys(
        (f"chunking_strategy[{k}]" for k in ("type", "prefix_padding_ms", "silence_duration_ms", "threshold")), "str"
    ),
    **dict.fromkeys(("timestamp_granularities", "include", "languages", "keywords", "models"), "list"),
    **dict.fromkeys(("known_speaker_names", "known_speaker_references"), "list"),
    **dict.fromkeys(("stream", "drop_params", "log_query_body", "log_response_body", "use_custom_keys"), "bool"),
    "temperature": "float",
    "timeout": "float",
}
_FILES = {"file": AUDIO_TYPES | {"video/mp4", "video/webm"}}  # mp4 and webm uploads of speech are common


def _render_error(err: GatewayError, ctx: Context) -> Response:
    """OpenAI's error object (as dialects/openai.render_error, which lists these routes)."""
    return json_response(err.to_openai(), error_headers(err, ctx), err.status)


async def _answer(
    family: Family[Any, Any, Any], services: Services, request: GatewayRequest[Any], ctx: Context
) -> Response:
    """`dialects.answer.answer` for the OpenAI dialect, whose renderings of these families are `RENDERS`."""
    return RENDERS[family.name].result(await services.pipeline.run(family, ctx, request), request, ctx)


# ---- speech ------------------------------------------------------------------------------------------------


async def speech(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    data = await read_json(request, services.max_body_bytes, services.json_limits)
    return await _answer(SPEECH, services, parse_request(SpeechRequest, data), ctx)


def _speech_result(result: Speech, request: GatewayRequest[SpeechRequest], ctx: Context) -> Response:
    headers = ctx.headers()
    if request.body.stream_format == "sse":
        return SSEResponse(_speech_events(result, ctx), headers)  # type: ignore[return-value]
    headers["content-type"] = result.content_type
    return SSEResponse(_speech_bytes(result), headers)  # type: ignore[return-value]


async def _speech_bytes(result: Speech) -> AsyncIterator[bytes]:
    try:
        async for chunk in result.audio:
            if chunk:
                yield chunk
    finally:
        await result.aclose()


async def _speech_events(result: Speech, ctx: Context) -> AsyncIterator[bytes]:
    """OpenAI's speech SSE events; a failure mid-way ends the stream with an `error` event."""
    try:
        async for chunk in result.audio:
            if chunk:
                yield _event({"type": "speech.audio.delta", "audio": base64.b64encode(chunk).decode()})
    except Exception as exc:
        yield _event({"type": "error", **stream_failure(exc, ctx).to_openai()})
        return
    finally:
        await result.aclose()
    done: dict[str, Any] = {"type": "speech.audio.done"}
    if result.usage:
        done["usage"] = result.usage
    yield _event(done)


def _event(data: dict[str, Any]) -> bytes:
    return encode(orjson.dumps(data))


async def voices(request: Request, ctx: Context) -> Response:
    """The voices of every speech model the caller may use (`?model=` narrows to one)."""
    services: Services = request.app.state.services
    wanted = request.query_params.get("model")
    rows: list[dict[str, Any]] = []
    catalog = services.pipeline.catalog
    for m in catalog.models:
        if m.type != "speech" or not ctx.principal.may_use(m.name) or (wanted is not None and m.name != wanted):
            continue
        seen: set[str] = set()
        for target in catalog.targets(m):
            adapter = services.pipeline.adapters.get(target.provider.name)
            if not isinstance(adapter, SpeechAdapter):
                continue
            for v in adapter.voices(target):
                if v not in seen:
                    seen.add(v)
                    rows.append({"id": v, "object": "voice", "name": v, "model": m.name})
    return json_response({"object": "list", "data": rows}, ctx.headers())


# ---- transcription and translation -------------------------------------------------------------------------


async def transcriptions(request: Request, ctx: Context) -> Response:
    return await _hear(request, ctx, TRANSCRIPTION, TranscriptionRequest)


async def translations(request: Request, ctx: Context) -> Response:
    return await _hear(request, ctx, TRANSLATION, TranslationRequest)


def upload_limit(services: Services) -> int:
    media = services.media
    return media.max_upload_bytes if media is not None else MAX_UPLOAD_BYTES


async def read_audio_form(request: Request, max_bytes: int) -> UploadForm:
    """The multipart form with its `file` on disk (size-limited, its type checked against its bytes)."""
    return await read_upload_form(request, max_bytes=max_bytes, files=_FILES, kinds=_KINDS)


async def audio_fields(form: UploadForm) -> dict[str, Any]:
    """The form as the canonical request's fields: the file as a measured `AudioFile` (a 400 without one),
    and `chunking_strategy[type]`-style fields gathered into their object."""
    upload = form.file("file")
    if upload is None:
        raise InvalidRequest("Missing required parameter: 'file'.", param="file")
    duration = await anyio.to_thread.run_sync(measure_ms, str(upload.path))
    fields: dict[str, Any] = {}
    for name, value in form.fields.items():
        match = re.fullmatch(r"(\w+)\[(\w+)\]", name)
        if match:
            fields.setdefault(match[1], {})[match[2]] = _scalar(value)
        else:
            fields[name] = value
    # As JSON, like every wire; validated into the request's AudioFile (whose dump leaves the path out).
    fields["file"] = {
        "path": str(upload.path),
        "filename": Path(upload.filename).name or "audio",
        "content_type": upload.content_type,
        "bytes": upload.bytes,
        "duration_ms": duration,
    }
    return fields


def _scalar(value: Any) -> Any:
    """A nested form value (`chunking_strategy[threshold]=0.5`) as the number it spells, else as sent."""
    if isinstance(value, str):
        try:
            return orjson.loads(value) if re.fullmatch(r"-?\d+(\.\d+)?", value) else value
        except orjson.JSONDecodeError:
            return value
    return value


async def _hear(
    request: Request,
    ctx: Context,
    family: Family[Any, Any, Transcript],
    model: type[TranscriptionRequest | TranslationRequest],
) -> Response:
    services: Services = request.app.state.services
    form = await read_audio_form(request, upload_limit(services))
    with form:
        parsed = parse_request(model, await audio_fields(form))
        return await _answer(family, services, parsed, ctx)


def _transcript_result(result: Transcript, request: GatewayRequest[Any], ctx: Context) -> Response:
    body = request.body
    fmt = body.response_format
    headers = ctx.headers()
    if getattr(body, "stream", None) and fmt in ("json", "text"):
        return SSEResponse(_transcript_events(result), headers)  # type: ignore[return-value]
    if fmt == "text":
        return _plain(result.text + "\n", "text/plain", headers)
    if fmt == "srt":
        return _plain(srt(_need_segments(result)), "text/plain", headers)
    if fmt == "vtt":
        return _plain(vtt(_need_segments(result)), "text/vtt", headers)
    out = (
        verbose(result, body)
        if fmt == "verbose_json"
        else diarized(result)
        if fmt == "diarized_json"
        else brief(result)
    )
    add_cost(out, ctx)  # type: ignore[arg-type]
    return json_response(out, headers)


def _plain(text: str, media_type: str, headers: dict[str, str]) -> Response:
    return Response(text.encode(), headers={**headers, "content-type": f"{media_type}; charset=utf-8"})


def brief(t: Transcript) -> dict[str, Any]:
    out: dict[str, Any] = {"text": t.text, **t.extra}
    if t.usage:
        out["usage"] = t.usage
    return out


def verbose(t: Transcript, body: Any) -> dict[str, Any]:
    granularities = getattr(body, "timestamp_granularities", None) or ["segment"]
    out: dict[str, Any] = {
        "task": t.task,
        "language": t.language or "",
        "duration": t.duration if t.duration is not None else _end(t),
        "text": t.text,
    }
    if "word" in granularities:
        out["words"] = t.words
    if "segment" in granularities:
        out["segments"] = [_full_segment(s) for s in t.segments]
    if t.usage:
        out["usage"] = t.usage
    return out


def diarized(t: Transcript) -> dict[str, Any]:
    out: dict[str, Any] = {"task": t.task, "duration": t.duration or _end(t), "text": t.text, "segments": t.segments}
    if t.usage:
        out["usage"] = t.usage
    return out


def _end(t: Transcript) -> float:
    return max((s["end"] for s in t.segments), default=0.0)


_SEGMENT_DEFAULTS: dict[str, Any] = {
    "seek": 0,
    "tokens": [],
    "temperature": 0.0,
    "avg_logprob": 0.0,
    "compression_ratio": 0.0,
    "no_speech_prob": 0.0,
}


def _full_segment(s: Segment) -> dict[str, Any]:
    """A segment with every field OpenAI's TranscriptionSegment requires (a provider may omit its scores)."""
    return {**_SEGMENT_DEFAULTS, **s}


def _need_segments(t: Transcript) -> list[Segment]:
    if not t.segments:
        raise InvalidRequest(
            "The provider answered no timestamped segments, so subtitles cannot be made; ask for json or text.",
            param="response_format",
        )
    return t.segments


def _stamp(seconds: float, sep: str) -> str:
    ms = max(0, math.floor(seconds * 1000 + 0.5))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def srt(segments: list[Segment]) -> str:
    """SubRip: numbered cues from 1, `HH:MM:SS,mmm --> HH:MM:SS,mmm`, a blank line after each."""
    cues = [
        f"{i}\n{_stamp(s['start'], ',')} --> {_stamp(s['end'], ',')}\n{s['text'].strip()}\n"
        for i, s in enumerate(segments, 1)
    ]
    return "\n".join(cues) + "\n"


def vtt(segments: list[Segment]) -> str:
    """WebVTT: the `WEBVTT` header, then cues `HH:MM:SS.mmm --> HH:MM:SS.mmm`."""
    cues = [f"{_stamp(s['start'], '.')} --> {_stamp(s['end'], '.')}\n{s['text'].strip()}\n" for s in segments]
    return "WEBVTT\n\n" + "\n".join(cues) + "\n"


def deltas(t: Transcript) -> list[str]:
    """The transcript's text cut into the deltas a stream sends: its words with the spaces before them."""
    return [d for d in re.findall(r"\s*\S+", t.text)] or [t.text]


async def _transcript_events(t: Transcript) -> AsyncIterator[bytes]:
    for delta in deltas(t):
        yield _event({"type": "transcript.text.delta", "delta": delta})
    done: dict[str, Any] = {"type": "transcript.text.done", "text": t.text}
    if t.usage:
        done["usage"] = t.usage
    yield _event(done)


SPEECH_RENDERING = Rendering(_speech_result)
TRANSCRIPT_RENDERING = Rendering(_transcript_result)
RENDERS = {
    SPEECH.name: SPEECH_RENDERING,
    TRANSCRIPTION.name: TRANSCRIPT_RENDERING,
    TRANSLATION.name: TRANSCRIPT_RENDERING,
}

routes = [
    Route("/v1/audio/speech", endpoint(_render_error, speech, "audio"), methods=["POST"]),
    Route("/v1/audio/voices", endpoint(_render_error, voices, "audio"), methods=["GET"]),
    Route("/v1/audio/transcriptions", endpoint(_render_error, transcriptions, "audio"), methods=["POST"]),
    Route("/v1/audio/translations", endpoint(_render_error, translations, "audio"), methods=["POST"]),
]
