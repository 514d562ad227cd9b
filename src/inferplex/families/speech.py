"""The speech family: `/v1/audio/speech` (text to speech) and `/v1/audio/voices`.

The canonical request is OpenAI's `CreateSpeechRequest`; the answer is a `Speech`: the audio's content type
and its bytes as an async iterator, streamed from the upstream as they come (an adapter pulls the first
chunk before it returns, so a failure surfaces before the caller sees a byte and the router can fall back).

Metering (`SpeechMeter`): every character of `input` is billed (`Pricing.character`, per million), worst
case and used alike; a model priced in tokens (gpt-4o-mini-tts: text tokens in, audio tokens out) is billed
from the usage its provider reports, and reserved on a bound of the audio a text can become.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from inferplex.accounts.pricing import Media, Tokens
from inferplex.config import ModelConfig
from inferplex.families.base import Family, Unit, no_output
from inferplex.gateway_request import GatewayRequest
from inferplex.providers.base import CallInfo
from inferplex.targets import Target

# OpenAI's built-in voices (CreateSpeechRequest.voice), which its speech models take.
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse")
OPENAI_VOICES_NEW = ("marin", "cedar")

AudioFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
FORMATS: tuple[AudioFormat, ...] = ("mp3", "opus", "aac", "flac", "wav", "pcm")

# The Content-Type of each format, as OpenAI answers it (pcm: raw 24 kHz 16-bit signed little-endian mono).
CONTENT_TYPES: dict[str, str] = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}

MAX_INPUT = 4096  # characters: OpenAI's limit on `input` (and on `instructions`)


class CustomVoice(BaseModel):
    """A custom voice by its id (`{"id": "voice_1234"}`)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    id: str = Field(min_length=1, max_length=256)


class SpeechRequest(BaseModel):
    """OpenAI's CreateSpeechRequest. Unknown fields are kept and reach OpenAI-compatible upstreams."""

    model_config = ConfigDict(extra="allow", strict=True)
    model: str = Field(min_length=1)
    input: str = Field(min_length=1, max_length=MAX_INPUT)
    voice: str | CustomVoice
    instructions: str | None = Field(None, max_length=MAX_INPUT)
    response_format: AudioFormat = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: Literal["audio", "sse"] = "audio"
    user: str | None = None

    @property
    def voice_id(self) -> str:
        return self.voice if isinstance(self.voice, str) else self.voice.id


class SpeechUsage(TypedDict, total=False):
    """What a token-priced speech model reports (OpenAI's `speech.audio.done` usage)."""

    input_tokens: int
    output_tokens: int
    total_tokens: int


@dataclass(slots=True)
class Speech:
    """A speech answer: the audio's `content_type` and its bytes, streamed from the upstream.

    `usage` is the provider's token usage when it reported one before the adapter returned (settlement
    reads it then); an adapter whose upstream reports it only at the end of its stream may set it when the
    stream ends, for the `speech.audio.done` event. `format` is the response_format the audio is in."""

    content_type: str
    audio: AsyncIterator[bytes]
    format: str = "mp3"
    usage: SpeechUsage | None = None

    async def aclose(self) -> None:
        close = getattr(self.audio, "aclose", None)
        if close is not None:
            await close()


@runtime_checkable
class SpeechAdapter(Protocol):
    """A provider that reads text aloud."""

    async def speak(self, request: GatewayRequest[SpeechRequest], target: Target, info: CallInfo) -> Speech:
        """The audio in the requested `response_format`; a format or voice the provider cannot give is an
        `InvalidRequest` naming it (never silently another)."""
        ...

    def voices(self, target: Target) -> list[str]:
        """The voice ids the target's model takes (`/v1/audio/voices`, and the check of `voice`)."""
        ...


# ---- metering ----------------------------------------------------------------------------------------------

# The bounds a token-priced speech model is reserved on: speech slower than 5 characters a second at speed
# 1.0 (people read 12-15), and at most 50 audio tokens a second (gpt-4o-mini-tts makes about 21).
SLOWEST_CHARS_PER_SECOND = 5
MOST_AUDIO_TOKENS_PER_SECOND = 50


def characters(request: SpeechRequest) -> int:
    return len(request.input)


def worst_audio_seconds(request: SpeechRequest) -> int:
    return math.ceil(len(request.input) / (SLOWEST_CHARS_PER_SECOND * request.speed)) + 1


class SpeechMeter:
    """Characters of input, always; text and audio tokens where the provider reports them."""

    def worst(self, request: SpeechRequest, model: ModelConfig) -> tuple[Tokens, Media]:
        text_tokens = len(request.input) + len(request.instructions or "")  # at most a token a character
        audio = worst_audio_seconds(request) * MOST_AUDIO_TOKENS_PER_SECOND
        return Tokens(prompt=text_tokens), Media(characters=characters(request), audio_output_tokens=audio)

    def used(self, request: SpeechRequest, answer: Speech | None) -> tuple[Tokens, Media]:
        usage = answer.usage if answer is not None else None
        if not usage:
            return Tokens(), Media(characters=characters(request))
        tokens = Tokens(prompt=_count(usage.get("input_tokens")))
        return tokens, Media(characters=characters(request), audio_output_tokens=_count(usage.get("output_tokens")))


def _count(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0


async def speak(
    adapter: SpeechAdapter, request: GatewayRequest[SpeechRequest], target: Target, info: CallInfo
) -> Speech:
    return await adapter.speak(request, target, info)


SPEECH: Family[SpeechRequest, SpeechAdapter, Speech] = Family(
    name="speech",
    model_type="speech",
    interface=SpeechAdapter,
    unit=Unit.CHARACTERS,
    estimate_input=characters,
    max_output=no_output,
    invoke=speak,
    meter=SpeechMeter(),
)
