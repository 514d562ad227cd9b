"""Gemini's speech models through generateContent, a mixin of the Gemini adapter: text to speech (the `*-tts`
models, audio out) and transcription or translation (audio in, text out).

Translation in `translate/gemini_speech.py`. What Gemini does not do is said, never guessed: speech comes
as 24 kHz PCM, answered as `wav` or `pcm` (mp3, opus, aac and flac are a 400 naming the two); `speed` is
dropped and named (a 400 with `drop_params: false`); custom voices are refused. A transcript has no
timestamps, so srt, vtt and verbose_json are a 400 before any call; files over 20 MB (Gemini's inline
request limit) are a 413.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from inferplex.errors import InvalidRequest
from inferplex.families.speech import CONTENT_TYPES, Speech, SpeechRequest
from inferplex.families.transcription import AudioRequest, Transcript, TranscriptionRequest, TranslationRequest
from inferplex.gateway_request import GatewayRequest
from inferplex.providers import http
from inferplex.providers.base import CallInfo
from inferplex.providers.failures import ErrorMap, ProviderFailure
from inferplex.providers.openai_audio import check_voice
from inferplex.targets import Target
from inferplex.translate import gemini_speech as tr

MAX_INLINE_BYTES = 20 * 1024 * 1024
_SUBTITLES = ("srt", "vtt", "verbose_json", "diarized_json")


async def _one(chunk: bytes) -> Any:
    yield chunk


class GeminiSpeech:
    if TYPE_CHECKING:  # the Gemini adapter's
        import aiohttp

        from inferplex.config import ProviderConfig

        config: ProviderConfig
        errors: ErrorMap
        _session: aiohttp.ClientSession
        _headers: dict[str, str]

        def _url(self, model: str, method: str) -> str: ...

    def voices(self, target: Target) -> list[str]:
        configured = self.config.options.get("voices")
        return [str(v) for v in configured] if isinstance(configured, list) else list(tr.VOICES)

    async def speak(self, request: GatewayRequest[SpeechRequest], target: Target, info: CallInfo) -> Speech:
        body = request.body
        if body.response_format not in tr.FORMATS:
            raise InvalidRequest(
                f"response_format '{body.response_format}' is not available for model `{target.model.name}` "
                "(Gemini speaks 24 kHz PCM); supported: pcm, wav.",
                param="response_format",
            )
        check_voice(body, self.voices(target), target, custom=False)
        if body.speed != 1.0:
            if not request.options.drop_params:
                raise InvalidRequest(f"speed is not supported by model `{target.model.name}`.", param="speed")
            info.dropped_params = sorted({*info.dropped_params, "speed"})
        data = await self._generate(target, info, tr.speech_body(body))
        try:
            pcm, rate = tr.audio_of(data)
        except ProviderFailure as failure:
            raise self.errors.failure(failure) from failure
        audio = tr.encode(pcm, rate, body.response_format)
        return Speech(CONTENT_TYPES[body.response_format], _one(audio), body.response_format, tr.speech_usage(data))

    async def _generate(self, target: Target, info: CallInfo, payload: dict[str, Any]) -> Any:
        url = self._url(target.upstream_model, "generateContent")
        data, _ = await http.post_json_within(
            target, info.timeouts, self._session, url, payload, self._headers, self.errors
        )
        return data

    async def transcribe(
        self, request: GatewayRequest[TranscriptionRequest], target: Target, info: CallInfo
    ) -> Transcript:
        return await self._hear(request.body, target, info)

    async def translate(
        self, request: GatewayRequest[TranslationRequest], target: Target, info: CallInfo
    ) -> Transcript:
        return await self._hear(request.body, target, info)

    async def _hear(self, body: AudioRequest, target: Target, info: CallInfo) -> Transcript:
        if body.response_format in _SUBTITLES:
            raise InvalidRequest(
                f"response_format '{body.response_format}' needs timestamped segments, which model "
                f"`{target.model.name}` cannot give; it answers json and text.",
                param="response_format",
            )
        if body.file.bytes > MAX_INLINE_BYTES:
            raise InvalidRequest(
                f"The file is {body.file.bytes} bytes; model `{target.model.name}` takes at most "
                f"{MAX_INLINE_BYTES} bytes inline.",
                param="file",
                status=413,
            )
        audio = await anyio.Path(body.file.path).read_bytes()
        language = getattr(body, "language", None)
        payload = tr.hear_body(audio, body.file.content_type, body.task, language, body.prompt)
        data = await self._generate(target, info, payload)
        try:
            text = tr.text_of(data)
        except ProviderFailure as failure:
            raise self.errors.failure(failure) from failure
        duration = body.file.duration_ms / 1000 if body.file.duration_ms is not None else None
        return Transcript(text, body.task, language, duration, usage=tr.hear_usage(data))
