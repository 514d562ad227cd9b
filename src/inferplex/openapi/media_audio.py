"""OpenAI's audio routes (dialects/openai_audio.py) in `/openapi.json`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inferplex.dialects import openai_audio_responses as ar
from inferplex.dialects import openai_responses as oa
from inferplex.families.speech import SpeechRequest
from inferplex.openapi.spec import Dialect, Operation, Param

_OPENAI = Dialect("OpenAI", oa.OpenAIError)
_ERRORS = (400, 401, 402, 403, 404, 413, 415, 429, 500, 502, 503, 504)


class TranscriptionForm(BaseModel):
    """The multipart form of `/v1/audio/transcriptions` (`/translations` takes the same, fewer fields)."""

    model_config = ConfigDict(extra="allow")
    file: str = Field(json_schema_extra={"format": "binary"}, description="flac, mp3, mp4, m4a, ogg, wav or webm")
    model: str
    language: str | None = None
    prompt: str | None = None
    response_format: Literal["json", "text", "srt", "verbose_json", "vtt", "diarized_json"] = "json"
    temperature: float | None = Field(None, ge=0, le=1)
    timestamp_granularities: list[Literal["word", "segment"]] | None = Field(None, alias="timestamp_granularities[]")
    include: list[Literal["logprobs"]] | None = Field(None, alias="include[]")
    stream: bool | None = None
    chunking_strategy: str | None = None


_FORM: dict[str, Any] = TranscriptionForm.model_json_schema(by_alias=True)

_SPEECH = (
    "Text to speech. Answers the audio bytes in `response_format` (mp3 audio/mpeg, opus audio/ogg, aac, flac, "
    "wav, pcm: raw 24 kHz 16-bit mono), streamed as the provider produces them; with `stream_format: sse`, "
    "`text/event-stream` events `speech.audio.delta` (base64 `audio`) then `speech.audio.done` (`usage` where "
    "the provider reports it). Billed per character of `input` (or the provider's audio tokens). An unknown "
    "voice is a 400 listing the model's voices."
)
_HEAR = (
    "Multipart upload (`file`, up to `media.max_upload_bytes`), its type checked against its bytes (415 for a "
    "format not taken). `response_format` json, text, srt, vtt, verbose_json (segments; words with "
    "`timestamp_granularities[]=word`) or diarized_json, rendered by the gateway; `stream=true` answers "
    "`transcript.text.delta` / `transcript.text.done` events. Billed per second of audio (the provider's figure, "
    "else the gateway's measure of the file) or by the provider's audio and text tokens."
)

OPERATIONS: list[Operation] = [
    Operation("post", "/v1/audio/speech", "Text to speech", _OPENAI, None, _ERRORS, SpeechRequest,
              description=_SPEECH, ok_media="audio/mpeg"),
    Operation("get", "/v1/audio/voices", "The voices of the speech models this key may use", _OPENAI,
              ar.VoiceList, (401, 403, 500, 503), params=(Param("model", description="only this model's"),)),
    Operation("post", "/v1/audio/transcriptions", "Speech to text", _OPENAI, ar.TranscriptionAnswer, _ERRORS,
              TranscriptionForm, form=_FORM, description=_HEAR, stream=ar.TranscriptTextEvent, stream_done=False),
    Operation("post", "/v1/audio/translations", "Speech to English text", _OPENAI, ar.TranscriptionAnswer,
              _ERRORS, TranscriptionForm, form=_FORM, description=_HEAR),
]  # fmt: skip
