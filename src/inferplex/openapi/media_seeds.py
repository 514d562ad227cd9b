"""The seed services' media routes in `/openapi.json`: OneInfer's (dialects/oneinfer_media.py).

Inferada's audio routes are OpenAI's paths (dialects/inferada_audio.py), described by `media_audio.py`.
"""

from __future__ import annotations

from typing import Any

from inferplex.dialects import oneinfer_media as om
from inferplex.dialects import oneinfer_media_responses as omr
from inferplex.dialects import oneinfer_responses as oir
from inferplex.openapi.spec import Dialect, Operation, Param

_ONEINFER = Dialect("OneInfer", oir.OneInferError)
_CALL = (400, 401, 403, 413, 415, 422, 429, 500, 502, 503, 504)
_READ = (400, 401, 403, 500, 503)

_IMAGE = (
    "Images from a prompt. `data.images[]`: the gateway's signed download URL, the image inline "
    "(`base64_data`) and its `mime_type`. `negative_prompt` is dropped and named in `x-inferplex-dropped-params`."
)
_VIDEO = (
    "Blocks (up to `wait_s`, default 150 s) on the durable job `/v1/videos` also creates: 200 with "
    "`data.videos[0].url` once completed; 202 with `data.id` and `data.status` while it runs (poll "
    "`GET /v1/ula/generate-video/{job_id}`); a failed job is a 502 with the provider's message. JSON, or "
    "multipart with a reference image under `files`."
)
_AUDIO = (
    "JSON: text to speech, `data.audios[]` (`url` a data: URI, `base64_data`); with `stream: true` the audio "
    "bytes, chunked. multipart/form-data: speech to text, the transcript in `data.text`."
)
_VIDEO_FORM: dict[str, Any] = {
    **om.VideoBody.model_json_schema(),
    "properties": {
        **om.VideoBody.model_json_schema()["properties"],
        "files": {"type": "string", "format": "binary", "description": "a reference image"},
    },
}
_AUDIO_FORM: dict[str, Any] = om.TranscriptionForm.model_json_schema()

OPERATIONS: list[Operation] = [
    Operation("post", "/v1/ula/generate-image", "Image generation (OneInfer's envelope)", _ONEINFER,
              omr.OneInferImageEnvelope, _CALL, om.ImageBody, description=_IMAGE),
    Operation("post", "/v1/ula/generate-video", "Video generation, blocking on a job (OneInfer's envelope)",
              _ONEINFER, omr.OneInferVideoEnvelope, _CALL, om.VideoBody, form=_VIDEO_FORM, description=_VIDEO,
              also_ok=(202,)),
    Operation("get", "/v1/ula/generate-video/{job_id}", "A video job's status (inferred)", _ONEINFER,
              omr.OneInferVideoEnvelope, (*_READ, 404)),
    Operation("post", "/v1/ula/generate-audio", "Text to speech (JSON) or speech to text (multipart)", _ONEINFER,
              omr.OneInferAudioEnvelope, _CALL, om.SpeechBody, form=_AUDIO_FORM, description=_AUDIO),
    Operation("get", "/v1/ula/get-supported-voice-for-audio-models", "The voices of the speech models",
              _ONEINFER, omr.OneInferVoicesEnvelope, _READ,
              params=(Param("model_names", description="comma-separated model names (absent: all)"),)),
]  # fmt: skip
