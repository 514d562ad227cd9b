"""OpenAI's video routes (dialects/openai_videos.py) in `/openapi.json`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from inferplex.dialects import openai_responses as oa
from inferplex.dialects import openai_videos_responses as vr
from inferplex.families.videos import VideoRemixRequest, VideoRequest
from inferplex.openapi.spec import Dialect, Operation, Param

_OPENAI = Dialect("OpenAI", oa.OpenAIError)
_CALL = (400, 401, 402, 403, 404, 413, 415, 429, 500, 502, 503, 504)
_READ = (400, 401, 403, 404, 500, 503)


class VideoForm(BaseModel):
    """The multipart form of `POST /v1/videos` (CreateVideoMultipartBody), as OpenAI's SDKs send it."""

    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(min_length=1, max_length=32_000)
    model: str = "sora-2"
    seconds: str = "4"
    size: str = "720x1280"
    input_reference: str | None = Field(None, json_schema_extra={"format": "binary"}, description="png, jpeg or webp")
    user: str | None = None


_FORM: dict[str, Any] = VideoForm.model_json_schema()
_CREATE = (
    "Starts a video job and answers it at once (`status: queued`); the gateway polls the provider and keeps "
    "the job, so `GET /v1/videos/{video_id}` reads its progress. Reserves every second asked for at the size "
    "asked for; the job is billed, when it completes, on the seconds and size the provider reports, and costs "
    "nothing if it fails or is deleted first. JSON, or multipart with an `input_reference` image. At most "
    "`jobs.max_concurrent_per_key` unfinished jobs per key (429)."
)
_CONTENT = (
    "The finished video (`variant=video`, mp4), its `thumbnail` (webp) or `spritesheet` (jpeg), streamed from "
    "the gateway's store; byte ranges are served. 400 `video_not_ready` until the job is completed; 404 for a "
    "variant the provider did not offer."
)
_ID = "video_id"
_PAGE = (
    Param("after", description="the id of the last video of the previous page"),
    Param("limit", {"type": "integer", "minimum": 0, "maximum": 100}, description="at most this many (20)"),
    Param("order", {"type": "string", "enum": ["asc", "desc"]}, description="by creation time (desc)"),
)
_VARIANT = Param("variant", {"type": "string", "enum": ["video", "thumbnail", "spritesheet"]})

OPERATIONS: list[Operation] = [
    Operation("post", "/v1/videos", "Create a video job", _OPENAI, vr.Video, _CALL, VideoRequest, form=_FORM,
              description=_CREATE),
    Operation("get", "/v1/videos", "The caller's video jobs, newest first", _OPENAI, vr.VideoList, _READ,
              params=_PAGE),
    Operation("get", "/v1/videos/{video_id}", "A video job", _OPENAI, vr.Video, _READ),
    Operation("delete", "/v1/videos/{video_id}", "Delete a video job (an unfinished one is cancelled upstream)",
              _OPENAI, vr.VideoDeleted, _READ),
    Operation("get", "/v1/videos/{video_id}/content", "Download a finished video", _OPENAI, None,
              (*_READ, 416), params=(_VARIANT,), description=_CONTENT, ok_media="video/mp4"),
    Operation("post", "/v1/videos/{video_id}/remix", "Remix a finished video with a new prompt", _OPENAI,
              vr.Video, _CALL, VideoRemixRequest),
]  # fmt: skip
