"""OpenAI's CreateVideoRequest <-> Google's Veo long-running operations (Gemini API, `predictLongRunning`).

The wire is the one google-genai's `models.generate_videos` speaks in its Gemini Developer API mode:
`{"instances": [{"prompt", "image"?: {"bytesBase64Encoded", "mimeType"}}], "parameters": {"aspectRatio",
"durationSeconds", "resolution", ...}}` answered by an operation `{"name": "models/<m>/operations/<id>"}`,
polled until `done`, then either `error` (a google.rpc.Status) or `response.generateVideoResponse` with
`generatedSamples[].video.uri` (a Files API download link) and, when the safety filter removed the videos,
`raiMediaFilteredCount` / `raiMediaFilteredReasons`.

Veo makes 16:9 and 9:16 videos at 720p or 1080p, so OpenAI's `size` becomes an aspect ratio and a
resolution; a size it cannot make is a 400 naming `size`. `seconds` is sent as Veo's `durationSeconds`
(4 to 8; which of those a model takes, and that 1080p needs 8, is the provider's to say, in its own words).
"""

from __future__ import annotations

import re
from typing import Any

from inferplex.errors import InvalidRequest
from inferplex.families.videos import JobStatus, VideoRequest

# OpenAI-style size -> (aspectRatio, resolution)
SIZES = {
    "1280x720": ("16:9", "720p"),
    "720x1280": ("9:16", "720p"),
    "1920x1080": ("16:9", "1080p"),
    "1080x1920": ("9:16", "1080p"),
}
SECONDS = range(4, 9)  # every Veo model's durations lie in 4..8
_FILE = re.compile(r"files/([a-z0-9]+)")


def build_request(request: VideoRequest, image: tuple[str, str] | None = None) -> dict[str, Any]:
    """The `predictLongRunning` body. `image` is (mime type, base64 bytes) of the reference image."""
    if request.size not in SIZES:
        raise InvalidRequest(f"size {request.size!r} is not one Veo makes: use one of {', '.join(SIZES)}", param="size")
    if int(request.seconds) not in SECONDS:
        raise InvalidRequest(
            f"seconds {request.seconds!r} is not a Veo duration: Veo makes 4 to 8 seconds", param="seconds"
        )
    aspect, resolution = SIZES[request.size]
    instance: dict[str, Any] = {"prompt": request.prompt}
    if image is not None:
        instance["image"] = {"bytesBase64Encoded": image[1], "mimeType": image[0]}
    parameters = {"aspectRatio": aspect, "durationSeconds": int(request.seconds), "resolution": resolution}
    return {"instances": [instance], "parameters": parameters}


def operation_name(data: Any) -> str:
    """The operation's resource name from the submit answer (`models/<model>/operations/<id>`)."""
    name = data.get("name") if isinstance(data, dict) else None
    if not isinstance(name, str) or "/operations/" not in name:
        raise ValueError("the answer names no operation")
    return name


def samples(operation: dict[str, Any]) -> list[dict[str, Any]]:
    response = operation.get("response") or {}
    found = (response.get("generateVideoResponse") or {}).get("generatedSamples") or []
    return [s for s in found if isinstance(s, dict)]


def status(operation: Any, seconds: int | None, size: str | None) -> JobStatus:
    """An operation as a `JobStatus`. Veo reports no progress while it works, so a running job is at 0."""
    if not isinstance(operation, dict):
        raise ValueError("the operation is not an object")
    if not operation.get("done"):
        return JobStatus("in_progress", 0)
    error = operation.get("error")
    if isinstance(error, dict):
        return JobStatus("failed", 0, error=str(error.get("message") or f"operation failed (code {error.get('code')})"))
    if not any(video_uri(s) for s in samples(operation)):
        response = (operation.get("response") or {}).get("generateVideoResponse") or {}
        reasons = response.get("raiMediaFilteredReasons") or []
        message = "; ".join(str(r) for r in reasons) or "the operation finished without a video"
        return JobStatus("failed", 0, error=message)
    return JobStatus("completed", 100, seconds=seconds, size=size)


def video_uri(sample: dict[str, Any]) -> str | None:
    uri = (sample.get("video") or {}).get("uri")
    return uri if isinstance(uri, str) and uri else None


def file_name(uri: str) -> str:
    """The Files API name in a generated video's link, as google-genai's `t_file_name` reads it: the video is
    fetched from the configured base URL with the deployment's key, never from whatever host the link names."""
    match = _FILE.search(uri)
    if match is None:
        raise ValueError(f"not a Files API link: {uri[:200]}")
    return match.group(1)
