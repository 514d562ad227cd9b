"""What OpenAI's audio routes answer, as TypedDicts (dialects/openai_audio.py), for `/openapi.json` and the tests.

Speech itself is binary (`Operation.ok_media`); its SSE events, the transcription objects (json,
verbose_json, diarized_json) and their stream events, and the voice list are described here. srt, vtt and
text answers are plain text.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict

from inferplex.dialects.openai_responses import Cost
from inferplex.families.transcription import Word


class TranscriptUsageDuration(TypedDict):
    type: Literal["duration"]
    seconds: float


class TranscriptUsageTokens(TypedDict):
    type: Literal["tokens"]
    input_tokens: int
    input_token_details: NotRequired[dict[str, int]]
    output_tokens: int
    total_tokens: NotRequired[int]


class TranscriptionJson(TypedDict):
    """response_format json (the default)."""

    text: str
    usage: NotRequired[TranscriptUsageTokens | TranscriptUsageDuration]
    logprobs: NotRequired[list[dict[str, Any]]]
    cost: NotRequired[Cost]


class TranscriptionSegment(TypedDict):
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


class TranscriptionVerboseJson(TypedDict):
    """response_format verbose_json: `segments` with the `segment` granularity (the default), `words` with
    `word`."""

    task: str
    language: str
    duration: float
    text: str
    segments: NotRequired[list[TranscriptionSegment]]
    words: NotRequired[list[Word]]
    usage: NotRequired[TranscriptUsageDuration | TranscriptUsageTokens]
    cost: NotRequired[Cost]


class TranscriptionAnswer(TypedDict):
    """Any JSON transcription answer (json, verbose_json, diarized_json); text, srt and vtt are plain text."""

    text: str
    task: NotRequired[str]
    language: NotRequired[str]
    duration: NotRequired[float]
    segments: NotRequired[list[dict[str, Any]]]
    words: NotRequired[list[Word]]
    usage: NotRequired[TranscriptUsageTokens | TranscriptUsageDuration]
    logprobs: NotRequired[list[dict[str, Any]]]
    cost: NotRequired[Cost]


class TranscriptTextEvent(TypedDict):
    """`transcript.text.delta` (with `delta`) and `transcript.text.done` (with `text` and `usage`)."""

    type: Literal["transcript.text.delta", "transcript.text.done"]
    delta: NotRequired[str]
    text: NotRequired[str]
    usage: NotRequired[TranscriptUsageTokens | TranscriptUsageDuration]


class SpeechUsage(TypedDict):
    input_tokens: int
    output_tokens: int
    total_tokens: int


class SpeechAudioEvent(TypedDict):
    """`speech.audio.delta` (base64 `audio`) and `speech.audio.done` (`usage` when the provider reported it)."""

    type: Literal["speech.audio.delta", "speech.audio.done"]
    audio: NotRequired[str]
    usage: NotRequired[SpeechUsage]


class Voice(TypedDict):
    id: str
    object: Literal["voice"]
    name: str
    model: str


class VoiceList(TypedDict):
    object: Literal["list"]
    data: list[Voice]
