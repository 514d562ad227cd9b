"""The video family: `/v1/videos`, OpenAI's asynchronous video jobs. Billed per second of video, by resolution.

A video is a job, not a call: the caller's POST submits it upstream (`VideoAdapter.video_submit`, the one call
of an attempt, routed like any other) and is answered at once with the job (`jobs/`); the gateway keeps a
durable row and polls the provider (`video_status`) from any replica until it completes or fails, then copies
the result into its own store (`video_content`) and settles the job's reservation. Every later call on the
job (status, content, cancel) goes to the deployment that took it, with that deployment's key: the row
records the deployment, and the adapter is handed that target again.

The canonical request is OpenAI's `CreateVideoRequest` (openai/openai-openapi: CreateVideoJsonBody and
CreateVideoMultipartBody): `model`, `prompt`, `seconds`, `size`, `input_reference` (an uploaded image, or a
reference object `{image_url | file_id}`), plus `user`. `seconds` and `size` are OpenAI's strings; other
providers take other durations and resolutions, so the gateway checks their form here (digits; `WxH`) and
each adapter refuses what its provider cannot make, with a 400 naming the field.

Interface notes for adapter authors (the plan's interface, plus two optional pieces):
- `VideoRequest.reference` is the uploaded `input_reference` (a `ReferenceFile` spooled to disk by the
  dialect), or None; `VideoRequest.input_reference` is the JSON reference object, or None.
- `VideoRemixAdapter` (optional): a provider that can remix one of its own finished videos. The gateway
  routes a remix to the source job's deployment only.
- `video_content` raises `errors.NotFound` for a variant the provider does not offer (a thumbnail, a
  spritesheet): the gateway then keeps the video alone.
- `video_cancel` returns False when the provider has no way to cancel; the job is cancelled at the gateway
  all the same and its reservation released.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from inferplex.accounts.pricing import Media, Tokens
from inferplex.config import ModelConfig
from inferplex.families.base import Family, Unit, no_output
from inferplex.gateway_request import GatewayRequest
from inferplex.providers.base import CallInfo
from inferplex.targets import Target

# OpenAI's values (VideoSeconds, VideoSize, VideoContentVariant); other providers' are checked by their adapter.
SORA_SECONDS = ("4", "8", "12")
SORA_SIZES = ("720x1280", "1280x720", "1024x1792", "1792x1024")
VARIANTS = ("video", "thumbnail", "spritesheet")
MAX_SECONDS = 600  # the longest clip any request may ask for: a bound on the worst case the guard reserves
Status = Literal["queued", "in_progress", "completed", "failed"]


def _no_nul(value: str | None) -> str | None:
    """Text is stored (the job's row): a NUL character, which PostgreSQL's text refuses, is refused here."""
    if value is not None and "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


@dataclass(frozen=True, slots=True)
class ReferenceFile:
    """An uploaded `input_reference`, spooled to disk by the dialect (its type checked against its bytes)."""

    path: str
    filename: str
    content_type: str
    bytes: int


class ImageReference(BaseModel):
    """OpenAI's ImageRefParam: exactly one of `image_url` (a URL or a data URL) and `file_id`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    image_url: str | None = Field(None, min_length=1, max_length=20_971_520)
    file_id: str | None = Field(None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _exactly_one(self) -> ImageReference:
        if (self.image_url is None) == (self.file_id is None):
            raise ValueError("provide exactly one of image_url and file_id")
        return self


class VideoRequest(BaseModel):
    """OpenAI's CreateVideoRequest. Defaults as OpenAI's: sora-2, 4 seconds, 720x1280."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str = Field("sora-2", min_length=1, max_length=200)
    prompt: str = Field(min_length=1, max_length=32_000)
    seconds: str = Field("4", pattern=r"^[1-9][0-9]{0,2}$")
    size: str = Field("720x1280", pattern=r"^[1-9][0-9]{1,4}x[1-9][0-9]{1,4}$")
    input_reference: ImageReference | None = None
    user: str | None = Field(None, max_length=256)
    _reference: ReferenceFile | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _bounded(self) -> VideoRequest:
        if int(self.seconds) > MAX_SECONDS:
            raise ValueError(f"seconds: at most {MAX_SECONDS}")
        return self

    _text = field_validator("prompt", "user")(_no_nul)

    @property
    def reference(self) -> ReferenceFile | None:
        """The uploaded `input_reference` file (multipart), or None."""
        return self._reference

    def with_reference(self, reference: ReferenceFile | None) -> VideoRequest:
        self._reference = reference
        return self


class VideoRemixRequest(BaseModel):
    """OpenAI's CreateVideoRemixBody: the new prompt (the remix keeps its source's model, seconds and size)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    prompt: str = Field(min_length=1, max_length=32_000)

    _text = field_validator("prompt")(_no_nul)


@dataclass(frozen=True, slots=True)
class UpstreamJob:
    """What the gateway keeps of a job upstream (in its row; never shown to the caller). `state` must be JSON."""

    upstream_id: str  # the provider's id / operation name / invocation ARN / task id
    state: dict[str, Any] = field(default_factory=dict)  # anything else the provider needs later


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A job as the provider reports it."""

    status: Status
    progress: int  # 0..100
    error: str | None = None  # the provider's message when failed
    seconds: int | None = None  # billed duration, when the provider says it
    size: str | None = None  # resolution, e.g. "1280x720"


@runtime_checkable
class VideoAdapter(Protocol):
    """A provider that makes videos as jobs. Every call after the submit is made on the target the job was
    submitted to (same deployment, same key)."""

    async def video_submit(
        self, request: GatewayRequest[VideoRequest], target: Target, info: CallInfo
    ) -> UpstreamJob: ...

    async def video_status(self, job: UpstreamJob, target: Target, info: CallInfo) -> JobStatus: ...

    def video_content(self, job: UpstreamJob, variant: str, target: Target, info: CallInfo) -> AsyncIterator[bytes]:
        """The finished asset's bytes, streamed; `errors.NotFound` for a variant the provider does not offer."""
        ...

    async def video_cancel(self, job: UpstreamJob, target: Target, info: CallInfo) -> bool:
        """Cancel (or delete) the job upstream; False when the provider cannot."""
        ...


@runtime_checkable
class VideoRemixAdapter(Protocol):
    """Optional: a provider that remixes one of its finished videos with a new prompt."""

    async def video_remix(
        self, source: UpstreamJob, request: GatewayRequest[VideoRequest], target: Target, info: CallInfo
    ) -> UpstreamJob: ...


class VideoMeter:
    """Worst case: every second asked for, at the size asked for (the guard takes the dearest deployment).
    Used: the seconds and size the finished job reports (`JobStatus`), else what was asked for."""

    def worst(self, request: VideoRequest, model: ModelConfig) -> tuple[Tokens, Media]:
        return Tokens(), Media(video_seconds=int(request.seconds), resolution=request.size)

    def used(self, request: VideoRequest, answer: Any) -> tuple[Tokens, Media]:
        seconds, size = int(request.seconds), request.size
        if isinstance(answer, JobStatus):
            seconds = answer.seconds if answer.seconds is not None else seconds
            size = answer.size or size
        return Tokens(), Media(video_seconds=seconds, resolution=size)


def _no_tokens(request: VideoRequest) -> int:
    return 0


# No `invoke`: a video is submitted through `jobs.VideoJobs.submit` (`services.jobs`), never `Pipeline.run`,
# which would settle the reservation when the submit returns; the job's row keeps it until the job completes.
VIDEOS: Family[VideoRequest, VideoAdapter, UpstreamJob] = Family(
    name="video",
    model_type="video",
    interface=VideoAdapter,
    unit=Unit.SECONDS,
    estimate_input=_no_tokens,
    max_output=no_output,
    meter=VideoMeter(),
)
