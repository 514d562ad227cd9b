"""What OneInfer's media routes answer (`oneinfer_media.py`), as TypedDicts, in its envelope.

Described for `/openapi.json` and for the tests that validate real answers; the routes build plain dicts.
Audio's `data` is published; images' and the video job's polling are inferred (docs/dialects.md).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict

from inferplex.dialects.oneinfer_responses import OneInferApiDetails, OneInferEmpty


class _MediaData(TypedDict):
    """What every answer's `data` has, as the chat answer's: the request id, time, the prompt (or the
    transcript) as `text`, and who served it."""

    id: str
    created: int
    text: str
    finish_reason: str | None
    provider: str | None
    model: str | None
    usage: dict[str, Any]
    latency_ms: int


class OneInferImage(TypedDict):
    url: str  # the gateway's signed, expiring download URL (a data: URI without a media store)
    base64_data: str
    mime_type: str
    revised_prompt: NotRequired[str]


class OneInferImageData(_MediaData):
    images: list[OneInferImage]


class OneInferImageEnvelope(TypedDict):
    api_details: OneInferApiDetails
    data: OneInferImageData
    error: OneInferEmpty


class OneInferVideo(TypedDict):
    url: str  # the gateway's signed, expiring download URL
    mime_type: str
    format: str


class OneInferJobError(TypedDict):
    code: str
    message: str


class OneInferVideoData(_MediaData):
    status: Literal["queued", "in_progress", "completed", "failed"]
    progress: int
    videos: list[OneInferVideo]  # one once completed
    error: NotRequired[OneInferJobError]


class OneInferVideoEnvelope(TypedDict):
    """200 once the job is completed, 202 (blocking call) while it still runs."""

    api_details: OneInferApiDetails
    data: OneInferVideoData
    error: OneInferEmpty


class OneInferAudio(TypedDict):
    url: str  # a data: URI
    format: str
    base64_data: str
    mime_type: str


class OneInferSpeechData(_MediaData):
    audios: list[OneInferAudio]


class OneInferTranscriptData(_MediaData):
    language: str | None
    duration: float | None


class OneInferAudioEnvelope(TypedDict):
    """Text to speech (`audios`), or speech to text (`text`, `language`, `duration`)."""

    api_details: OneInferApiDetails
    data: OneInferSpeechData | OneInferTranscriptData
    error: OneInferEmpty


class OneInferModelVoices(TypedDict):
    provider: str
    default_voice_id: str | None
    voice_ids: list[str]


class OneInferVoicesData(TypedDict):
    by_model: dict[str, OneInferModelVoices]
    unknown_models: list[str]


class OneInferVoicesEnvelope(TypedDict):
    api_details: OneInferApiDetails
    data: OneInferVoicesData
    error: OneInferEmpty
