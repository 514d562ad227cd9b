"""The transcription and translation families: `/v1/audio/transcriptions` and `/v1/audio/translations`.

The canonical requests are OpenAI's `CreateTranscriptionRequest` and `CreateTranslationRequest`, the file
being an upload the dialect spooled to disk (`AudioFile`, measured there: `audio_duration_ms`). Every adapter
answers a canonical `Transcript` (text, language, duration, segments, words, usage), and the dialect renders
json, text, srt, vtt or verbose_json from it, so subtitles look the same whichever provider heard the audio.

Metering (`TranscriptMeter`): per second of audio in (`Pricing.audio_second`) from the usage the provider
reports (`{"type": "duration", "seconds": ...}`), else the answer's `duration`, else the gateway's own
measure of the file, so a per-second model is never billed zero; or, for a model priced in tokens
(gpt-4o-transcribe: `{"type": "tokens", ...}`), its audio tokens at `audio_input`, text tokens at `input`
and output tokens at `output`. The worst case is the file's measured duration, or when it cannot be
measured a bound from its size at the lowest bitrate speech is coded at.
"""

from __future__ import annotations

import math
import wave
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from inferplex.accounts.pricing import Media, Tokens
from inferplex.config import ModelConfig
from inferplex.errors import InvalidRequest
from inferplex.families.base import Family, Unit, no_output
from inferplex.gateway_request import GatewayRequest
from inferplex.providers.base import CallInfo
from inferplex.targets import Target

TranscriptFormat = Literal["json", "text", "srt", "verbose_json", "vtt", "diarized_json"]
TranslationFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]

# The file types OpenAI takes (flac, mp3, mp4, mpeg, mpga, m4a, ogg, wav, webm), by extension and MIME type.
AUDIO_EXTENSIONS = frozenset({"flac", "mp3", "mp4", "mpeg", "mpga", "m4a", "ogg", "oga", "opus", "wav", "webm"})


class AudioFile(BaseModel):
    """An uploaded audio file, spooled to disk by the dialect: where it is, what it claims to be, its size,
    and its duration as the gateway measured it (None: not measurable, e.g. a webm). The spool path is the
    gateway's own and gone after the request: never dumped (the usage log keeps request bodies dumped)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str = Field(exclude=True)
    filename: str
    content_type: str
    bytes: int = Field(ge=0)
    duration_ms: int | None = None


class _Audio(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, arbitrary_types_allowed=True)
    file: AudioFile
    model: str = Field(min_length=1)
    prompt: str | None = None
    temperature: float | None = Field(None, ge=0, le=1)
    user: str | None = None


class TranscriptionRequest(_Audio):
    """OpenAI's CreateTranscriptionRequest."""

    language: str | None = Field(None, min_length=1, max_length=32)
    response_format: TranscriptFormat = "json"
    timestamp_granularities: list[Literal["word", "segment"]] | None = Field(None, max_length=2)
    include: list[Literal["logprobs"]] | None = Field(None, max_length=1)
    stream: bool | None = None
    chunking_strategy: Literal["auto"] | dict[str, Any] | None = None

    @property
    def task(self) -> str:
        return "transcribe"


class TranslationRequest(_Audio):
    """OpenAI's CreateTranslationRequest (into English)."""

    response_format: TranslationFormat = "json"

    @property
    def task(self) -> str:
        return "translate"


AudioRequest = TranscriptionRequest | TranslationRequest


class Segment(TypedDict, total=False):
    """OpenAI's TranscriptionSegment; `id`, `start`, `end` and `text` are always present."""

    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float


class Word(TypedDict):
    word: str
    start: float
    end: float


class TranscriptUsage(TypedDict, total=False):
    """`{"type": "duration", "seconds": 9}` or `{"type": "tokens", "input_tokens": ..., ...}`."""

    type: str
    seconds: float
    input_tokens: int
    input_token_details: dict[str, int]
    output_tokens: int
    total_tokens: int


@dataclass(slots=True)
class Transcript:
    """The canonical transcription (or translation) every adapter answers.

    `segments` and `words` are empty when the provider gave none (then srt and vtt are refused, never
    invented); `duration` is in seconds, None when the provider did not say it; `usage` as the provider
    reported it. `extra` keeps what a provider answered beyond these (logprobs) for the json rendering."""

    text: str
    task: str = "transcribe"
    language: str | None = None
    duration: float | None = None
    segments: list[Segment] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    usage: TranscriptUsage | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class TranscriptionAdapter(Protocol):
    """A provider that transcribes speech to text."""

    async def transcribe(
        self, request: GatewayRequest[TranscriptionRequest], target: Target, info: CallInfo
    ) -> Transcript:
        """The transcript, with segments (and words, when `timestamp_granularities` asks) wherever the
        provider can give them: the dialect needs segments for srt, vtt and verbose_json."""
        ...


@runtime_checkable
class TranslationAdapter(Protocol):
    """A provider that translates speech into English text."""

    async def translate(
        self, request: GatewayRequest[TranslationRequest], target: Target, info: CallInfo
    ) -> Transcript: ...


# ---- metering ----------------------------------------------------------------------------------------------

# When a file cannot be measured: speech is coded at no less than 6 kbit/s (Opus's lowest voice rate), so
# a file of n bytes holds at most n / 750 seconds.
LOWEST_BYTES_PER_SECOND = 750
# A token-priced model's bounds: about 17 audio tokens a second of audio (gpt-4o-transcribe), reserved at 50;
# at most 10 text tokens a second of speech out (people say 2-3 words a second), and the prompt's text.
MOST_AUDIO_TOKENS_PER_SECOND = 50
MOST_TEXT_TOKENS_PER_SECOND = 10


def measure_ms(path: str) -> int | None:
    """The audio's duration in ms as the gateway measures it: a WAV's header (the stdlib's `wave`), else
    mutagen's reading of mp3, flac, ogg/opus and m4a headers; None when neither can (webm, a broken file)."""
    try:
        with wave.open(path, "rb") as w:
            rate = w.getframerate()
            return math.ceil(w.getnframes() * 1000 / rate) if rate > 0 else None
    except (wave.Error, EOFError, OSError):
        pass
    try:
        import mutagen  # imported when a non-WAV file is measured

        info = mutagen.File(path)
    except Exception:  # mutagen raises many kinds on a file it cannot read
        return None
    length = getattr(getattr(info, "info", None), "length", None)
    return math.ceil(length * 1000) if isinstance(length, int | float) and length > 0 else None


def worst_ms(file: AudioFile) -> int:
    if file.duration_ms is not None:
        return file.duration_ms
    return math.ceil(file.bytes * 1000 / LOWEST_BYTES_PER_SECOND)


def estimate_input(request: AudioRequest) -> int:
    """The worst case in seconds of audio (what `audio_duration_seconds` limit rules count)."""
    return math.ceil(worst_ms(request.file) / 1000)


class TranscriptMeter:
    def worst(self, request: AudioRequest, model: ModelConfig) -> tuple[Tokens, Media]:
        ms = worst_ms(request.file)
        seconds = math.ceil(ms / 1000)
        prompt = len(request.prompt or "")  # at most a token a character
        tokens = Tokens(prompt=prompt, completion=seconds * MOST_TEXT_TOKENS_PER_SECOND)
        return tokens, Media(audio_ms=ms, audio_input_tokens=seconds * MOST_AUDIO_TOKENS_PER_SECOND)

    def used(self, request: AudioRequest, answer: Transcript | None) -> tuple[Tokens, Media]:
        usage = answer.usage if answer is not None else None
        if usage and usage.get("type") == "tokens":
            details = usage.get("input_token_details") or {}
            audio = _count(details.get("audio_tokens"))
            text = _count(details.get("text_tokens"))
            if not audio and not text:
                audio = _count(usage.get("input_tokens"))
            tokens = Tokens(prompt=text, completion=_count(usage.get("output_tokens")))
            return tokens, Media(audio_input_tokens=audio, audio_ms=used_ms(request, answer))
        return Tokens(), Media(audio_ms=used_ms(request, answer))


def used_ms(request: AudioRequest, answer: Transcript | None) -> int:
    """The seconds of audio billed, in ms: the provider's usage, else its duration, else the gateway's measure
    of the file (else the bound from its size): never zero for a file with sound in it."""
    usage = answer.usage if answer is not None else None
    if usage and usage.get("type") == "duration":
        seconds = usage.get("seconds")
        if isinstance(seconds, int | float) and seconds > 0:
            return math.ceil(seconds * 1000)
    if answer is not None and answer.duration is not None and answer.duration > 0:
        return math.ceil(answer.duration * 1000)
    return worst_ms(request.file)


def _count(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0


async def transcribe(
    adapter: TranscriptionAdapter, request: GatewayRequest[TranscriptionRequest], target: Target, info: CallInfo
) -> Transcript:
    return await adapter.transcribe(request, target, info)


async def translate(
    adapter: object, request: GatewayRequest[TranslationRequest], target: Target, info: CallInfo
) -> Transcript:
    if not isinstance(adapter, TranslationAdapter):  # optional: a model's provider may only transcribe
        raise InvalidRequest(
            f"The model `{target.model.name}` cannot translate on provider {target.provider.name}; "
            "use /v1/audio/transcriptions.",
            param="model",
        )
    return await adapter.translate(request, target, info)


_METER = TranscriptMeter()

TRANSCRIPTION: Family[TranscriptionRequest, TranscriptionAdapter, Transcript] = Family(
    name="transcription",
    model_type="transcription",
    interface=TranscriptionAdapter,
    unit=Unit.SECONDS,
    estimate_input=estimate_input,
    max_output=no_output,
    invoke=transcribe,
    meter=_METER,
)

TRANSLATION: Family[TranslationRequest, TranslationAdapter, Transcript] = Family(
    name="translation",
    model_type="transcription",
    interface=TranslationAdapter,
    unit=Unit.SECONDS,
    estimate_input=estimate_input,
    max_output=no_output,
    invoke=translate,
    required=False,
    meter=_METER,
)
