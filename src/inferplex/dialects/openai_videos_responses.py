"""OpenAI's video job objects as the gateway answers them (openai/openai-openapi: VideoResource,
VideoListResource, DeletedVideoResource)."""

from __future__ import annotations

from typing import Literal

from typing_extensions import TypedDict


class VideoError(TypedDict):
    code: str
    message: str


class Video(TypedDict):
    """A video job. `id` is the gateway's own (`video_<random>`), never the provider's."""

    id: str
    object: Literal["video"]
    model: str
    status: Literal["queued", "in_progress", "completed", "failed"]
    progress: int
    created_at: int
    completed_at: int | None
    expires_at: int | None
    prompt: str | None
    seconds: str
    size: str
    remixed_from_video_id: str | None
    error: VideoError | None


class VideoList(TypedDict):
    object: Literal["list"]
    data: list[Video]
    first_id: str | None
    last_id: str | None
    has_more: bool


class VideoDeleted(TypedDict):
    id: str
    object: Literal["video.deleted"]
    deleted: bool
