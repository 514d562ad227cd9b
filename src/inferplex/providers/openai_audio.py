"""Speech, transcription and translation on OpenAI-compatible upstreams (OpenAI, Groq, Azure OpenAI).

A mixin of the OpenAI-compatible adapter (`OpenAIAudio`) and of the Azure one (`AzureAudio`, which hands each
call to its deployment's OpenAI-compatible adapter). `/audio/speech` is JSON in, audio bytes out, streamed to
the caller as they arrive; `/audio/transcriptions` and `/audio/translations` are multipart, the file streamed
from the gateway's spool. The vendors differ in voices, formats and limits (`AudioProfile`, by the adapter's
vendor profile); what a vendor cannot do is refused with a 400 naming it before any call.

A transcript is always asked for as JSON (`json`, or `verbose_json` when the caller wants segments: srt, vtt,
verbose_json), so the gateway renders every format itself and always has the answer's `duration` or
`usage` to bill from; `stream: true` is served from one buffered call (its usage is then known before
settlement) and replayed as deltas by the dialect.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from yarl import URL

from inferplex.config import Pricing, Timeouts
from inferplex.errors import InvalidRequest
from inferplex.families.speech import (
    CONTENT_TYPES,
    FORMATS,
    OPENAI_VOICES,
    OPENAI_VOICES_NEW,
    Speech,
    SpeechRequest,
    SpeechUsage,
)
from inferplex.families.transcription import AudioRequest, Transcript, TranscriptionRequest, TranslationRequest
from inferplex.gateway_request import GatewayRequest
from inferplex.providers import http
from inferplex.providers.base import CallInfo
from inferplex.providers.failures import ErrorMap
from inferplex.providers.openai_host import OpenAIHost
from inferplex.targets import Target
from inferplex.translate.openai_audio import read_transcript, upstream_format

CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class AudioProfile:
    """What an OpenAI-compatible vendor's audio endpoints take. `voices` by upstream model (`"*"`: any
    model); `speech_formats` and `transcript_formats` the response formats it answers; `max_file_bytes` its
    upload limit; `custom_voices` whether `{"id": ...}` voices exist there."""

    voices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    speech_formats: frozenset[str] = frozenset(FORMATS)
    transcript_formats: frozenset[str] = frozenset({"json", "text", "srt", "verbose_json", "vtt", "diarized_json"})
    max_file_bytes: int = 25 * 1024 * 1024
    custom_voices: bool = False
    speech_sse: bool = True
    json_usage: bool = True  # whether its json transcript says the usage (else verbose_json is asked for)
    min_billed_seconds: float = 0.0  # a vendor that bills short audio as this long (Groq: 10 s)


_OPENAI_ALL = OPENAI_VOICES + OPENAI_VOICES_NEW
_TTS1 = ("alloy", "ash", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer")
_ORPHEUS_EN = ("autumn", "diana", "hannah", "austin", "daniel", "troy")
_ORPHEUS_AR = ("abdullah", "fahad", "sultan", "lulwa", "noura", "aisha")

AUDIO_PROFILES: dict[str, AudioProfile] = {
    "openai": AudioProfile(
        voices={"tts-1": _TTS1, "tts-1-hd": _TTS1, "*": _OPENAI_ALL},
        custom_voices=True,
    ),
    # Groq (console.groq.com/docs/speech-to-text, /text-to-speech): Whisper large-v3 (and turbo) answer json,
    # text and verbose_json (the gateway makes srt and vtt from its segments), files up to 25 MB on the
    # free tier (`options.max_file_bytes` for a higher tier), audio shorter than 10 s billed as 10 s; its
    # Orpheus speech models answer wav with their own voices.
    "groq": AudioProfile(
        voices={"canopylabs/orpheus-v1-english": _ORPHEUS_EN, "canopylabs/orpheus-arabic-saudi": _ORPHEUS_AR},
        speech_formats=frozenset({"wav"}),
        transcript_formats=frozenset({"json", "text", "verbose_json"}),
        speech_sse=False,
        json_usage=False,
        min_billed_seconds=10.0,
    ),
}
_ANY = AudioProfile()


def audio_profile(name: str) -> AudioProfile:
    return AUDIO_PROFILES.get(name, _ANY)


def _token_priced(target: Target) -> bool:
    """Whether the target's model is billed by the audio tokens its provider reports (gpt-4o-mini-tts)."""
    price: Pricing = target.deployment.pricing or target.model.pricing
    return price.audio_output is not None and not price.free


class OpenAIAudio(OpenAIHost):
    """The audio endpoints of the OpenAI-compatible adapter. Uses the adapter's session, headers, key
    handling (`_auth`), error map and chat URL (whose base and query the audio URLs share)."""

    @property
    def _audio(self) -> AudioProfile:
        return audio_profile(self.profile.name)

    def _audio_url(self, name: str) -> URL:
        base = self._chat_url.parent.parent  # {base}/chat/completions -> {base}
        return (base / "audio" / name).with_query(self._chat_url.query)

    # ---- speech ----------------------------------------------------------------------------------------

    def voices(self, target: Target) -> list[str]:
        configured = self.config.options.get("voices")
        if isinstance(configured, Mapping):
            own = configured.get(target.upstream_model, configured.get("*"))
            if isinstance(own, list):
                return [str(v) for v in own]
        table = self._audio.voices
        return list(table.get(target.upstream_model, table.get("*", ())))

    def _check_speech(self, request: SpeechRequest, target: Target) -> None:
        audio = self._audio
        if request.response_format not in audio.speech_formats:
            raise InvalidRequest(
                f"response_format '{request.response_format}' is not available for model `{target.model.name}` "
                f"on provider {target.provider.name}; supported: {', '.join(sorted(audio.speech_formats))}.",
                param="response_format",
            )
        if request.stream_format == "sse" and not audio.speech_sse:
            raise InvalidRequest(
                f"stream_format 'sse' is not available for model `{target.model.name}`.", param="stream_format"
            )
        check_voice(request, self.voices(target), target, custom=audio.custom_voices)

    async def speak(self, request: GatewayRequest[SpeechRequest], target: Target, info: CallInfo) -> Speech:
        body = request.body
        self._check_speech(body, target)
        wire = {k: v for k, v in request.wire().items() if k != "user"}
        wire["model"] = target.upstream_model
        buffered = _token_priced(target) and self._audio.speech_sse  # its usage comes only with SSE
        if buffered:
            wire["stream_format"] = "sse"
        headers = {**self._auth(self._headers, info), "Accept": "*/*"}
        url = self._audio_url("speech")

        async def open_(t: Timeouts) -> aiohttp.ClientResponse:
            return await http.open_stream(self._session, url, wire, headers, t, self.errors)

        resp = await (open_(info.timeouts) if info.timeouts is not None else http.bounded(target, open_))
        content_type = CONTENT_TYPES[body.response_format]
        sse = wire.get("stream_format") == "sse"
        speech = Speech(content_type, _empty(), body.response_format)
        chunks = self._sse_audio(resp, speech) if sse else self._raw_audio(resp)
        if buffered:
            audio = [c async for c in chunks]
            if not any(audio):
                raise self.errors.malformed("sent no audio")
            speech.audio = _replay(audio)
        else:
            speech.audio = await _started(chunks, self.errors)
        if not sse:
            speech.content_type = resp.headers.get("Content-Type", content_type).split(";")[0] or content_type
        return speech

    async def _raw_audio(self, resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        try:
            async for data in resp.content.iter_chunked(CHUNK):
                yield data
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise self.errors.transport(exc) from exc
        finally:
            resp.close()

    async def _sse_audio(self, resp: aiohttp.ClientResponse, speech: Speech) -> AsyncIterator[bytes]:
        """OpenAI's `speech.audio.delta` events as bytes; `speech.audio.done`'s usage onto `speech`."""
        try:
            async for _, event in http.json_events(resp, self.errors):
                if not isinstance(event, dict):
                    continue
                if event.get("type") == "speech.audio.delta" and isinstance(event.get("audio"), str):
                    yield base64.b64decode(event["audio"])
                elif event.get("type") == "speech.audio.done":
                    usage = event.get("usage")
                    speech.usage = _speech_usage(usage) if isinstance(usage, dict) else None
                    return
                elif "error" in event:
                    raise self.errors.event(event)
        finally:
            resp.close()
        raise self.errors.malformed("ended the speech stream before speech.audio.done")

    # ---- transcription and translation -------------------------------------------------------------------

    async def transcribe(
        self, request: GatewayRequest[TranscriptionRequest], target: Target, info: CallInfo
    ) -> Transcript:
        return await self._hear(request, target, info, "transcriptions")

    async def translate(
        self, request: GatewayRequest[TranslationRequest], target: Target, info: CallInfo
    ) -> Transcript:
        return await self._hear(request, target, info, "translations")

    async def _hear(self, request: GatewayRequest[Any], target: Target, info: CallInfo, path: str) -> Transcript:
        body: AudioRequest = request.body
        audio = self._audio
        limit = int(self.config.options.get("max_file_bytes", audio.max_file_bytes))
        if body.file.bytes > limit:
            raise InvalidRequest(
                f"The file is {body.file.bytes} bytes; provider {target.provider.name} takes at most {limit} bytes.",
                param="file",
                status=413,
            )
        fmt = upstream_format(body, audio.transcript_formats, target.model.name, json_usage=audio.json_usage)
        fields = form_fields(body, target.upstream_model, fmt)
        headers = {
            k: v for k, v in self._auth(self._headers, info).items() if k.lower() not in ("content-type", "accept")
        }
        headers["Accept"] = "application/json"
        url = self._audio_url(path)

        async def post(t: Timeouts) -> Any:
            return await post_form(self._session, url, fields, body, headers, t, self.errors)

        data = await (post(info.timeouts) if info.timeouts is not None else http.bounded(target, post))
        transcript = read_transcript(data, body.task, self.errors)
        if audio.min_billed_seconds and transcript.usage is None:  # what the vendor bills, stated
            heard = transcript.duration or (body.file.duration_ms or 0) / 1000
            transcript.usage = {"type": "duration", "seconds": max(heard, audio.min_billed_seconds)}
        return transcript


def check_voice(request: SpeechRequest, voices: list[str], target: Target, *, custom: bool) -> None:
    """A voice the model has, or a 400 listing them; a custom voice (`{"id": ...}`) where the vendor has them."""
    if not isinstance(request.voice, str):
        if custom:
            return
        raise InvalidRequest(
            f"Custom voices are not available for model `{target.model.name}`; use one of: {', '.join(voices)}.",
            param="voice",
        )
    if voices and request.voice not in voices:
        raise InvalidRequest(
            f"Voice '{request.voice}' is not available for model `{target.model.name}`; "
            f"supported voices: {', '.join(voices)}.",
            param="voice",
            code="unsupported_voice",
        )


def form_fields(body: AudioRequest, upstream_model: str, fmt: str) -> list[tuple[str, str]]:
    """The multipart fields besides the file, as OpenAI's SDK sends them (arrays as `name[]`)."""
    fields = [("model", upstream_model), ("response_format", fmt)]
    for name in ("language", "prompt"):
        value = getattr(body, name, None)
        if value is not None:
            fields.append((name, value))
    if body.temperature is not None:
        fields.append(("temperature", repr(float(body.temperature))))
    if isinstance(body, TranscriptionRequest):
        if fmt == "verbose_json":
            for g in body.timestamp_granularities or ["segment"]:
                fields.append(("timestamp_granularities[]", g))
        for item in body.include or ():
            fields.append(("include[]", item))
        if body.chunking_strategy is not None:
            cs = body.chunking_strategy
            fields.append(("chunking_strategy", cs if isinstance(cs, str) else orjson.dumps(cs).decode()))
    for name, value in (body.model_extra or {}).items():
        if value is not None:
            fields.append((name, value if isinstance(value, str) else orjson.dumps(value).decode()))
    return fields


async def post_form(
    session: aiohttp.ClientSession,
    url: URL,
    fields: list[tuple[str, str]],
    body: AudioRequest,
    headers: Mapping[str, str],
    timeouts: Timeouts,
    errors: ErrorMap,
) -> Any:
    """POST a multipart form with the spooled file streamed from disk; the JSON answer, or the mapped error."""
    form = aiohttp.FormData()
    for name, value in fields:
        form.add_field(name, value)
    try:
        with open(body.file.path, "rb") as f:  # noqa: ASYNC230 (aiohttp reads it in chunks as it sends)
            form.add_field("file", f, filename=body.file.filename, content_type=body.file.content_type)
            async with session.post(
                url, data=form, headers=headers, timeout=http.client_timeout(timeouts.connect), allow_redirects=False
            ) as resp:
                raw = await resp.read()
                status, resp_headers = resp.status, resp.headers
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise errors.transport(exc) from exc
    if status >= 400:
        raise errors.status(status, raw, resp_headers)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise errors.malformed("sent a transcription that is not JSON") from exc


def _speech_usage(usage: dict[str, Any]) -> SpeechUsage:
    out: SpeechUsage = {}
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        value = usage.get(key)
        if isinstance(value, int):
            out[key] = value
    return out


async def _empty() -> AsyncIterator[bytes]:
    return
    yield b""  # pragma: no cover


async def _replay(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for c in chunks:
        yield c


async def _started(chunks: AsyncIterator[bytes], errors: ErrorMap) -> AsyncIterator[bytes]:
    """The stream with its first chunk already pulled, so an upstream failure surfaces before the caller
    sees a byte (and the router can try another target)."""
    try:
        first = await chunks.__anext__()
    except StopAsyncIteration:
        raise errors.malformed("sent no audio") from None
    except BaseException:
        await chunks.aclose()  # type: ignore[attr-defined]
        raise

    async def rest() -> AsyncIterator[bytes]:
        try:
            yield first
            async for c in chunks:
                yield c
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]

    return rest()


class AzureAudio:
    """Azure OpenAI's audio endpoints: each call on the deployment's OpenAI-compatible adapter, at
    `{base}/openai/deployments/{deployment}/audio/...?api-version=...` with the `api-key` header."""

    if TYPE_CHECKING:  # the Azure adapter's

        def _for(self, target: Target) -> OpenAIAudio: ...

    def voices(self, target: Target) -> list[str]:
        return self._for(target).voices(target)

    async def speak(self, request: GatewayRequest[SpeechRequest], target: Target, info: CallInfo) -> Speech:
        return await self._for(target).speak(request, target, info)

    async def transcribe(
        self, request: GatewayRequest[TranscriptionRequest], target: Target, info: CallInfo
    ) -> Transcript:
        return await self._for(target).transcribe(request, target, info)

    async def translate(
        self, request: GatewayRequest[TranslationRequest], target: Target, info: CallInfo
    ) -> Transcript:
        return await self._for(target).translate(request, target, info)
