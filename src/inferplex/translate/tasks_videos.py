"""OpenAI's CreateVideoRequest <-> Replicate's predictions (an asynchronous task API).

A prediction is created with `POST /v1/models/<owner>/<name>/predictions` (the model's latest version) or
`POST /v1/predictions` with a `version`, each with `{"input": {...}}`, and answered 201 with the prediction:
`id`, `status` (starting | processing | succeeded | failed | canceled), `output` (a URL, or a list of them),
`error`, `logs`, `metrics.predict_time`, `urls.get` / `urls.cancel` (replicate-python's `Prediction`). Its
progress is read from the logs as replicate-python reads it (the last `NN%|...| k/n` line of a progress bar).

A video model's input is its own; the one sent here is what Replicate's video models share: `prompt`,
`duration` (seconds), `aspect_ratio` and `resolution` (from OpenAI's `size`), and `image` (a data URL or
an https link) for a first frame. What a given model refuses it refuses itself, with a 422 naming the input.
"""

from __future__ import annotations

import re
from typing import Any

from inferplex.errors import InvalidRequest
from inferplex.families.videos import JobStatus, VideoRequest

# OpenAI-style size -> (aspect_ratio, resolution)
SIZES = {
    "1280x720": ("16:9", "720p"),
    "720x1280": ("9:16", "720p"),
    "1920x1080": ("16:9", "1080p"),
    "1080x1920": ("9:16", "1080p"),
}
_VERSION = re.compile(r"^[0-9a-f]{64}$")
_PROGRESS = re.compile(r"^\s*(?P<percentage>\d+)%\s*\|.+?\|\s*(?P<current>\d+)\/(?P<total>\d+)")


def endpoint(model: str) -> tuple[str, str | None]:
    """(path under the API base, version or None) for a deployment's model: `owner/name` runs the model's
    latest version; `owner/name:<version>` or a bare 64-hex version runs that version."""
    if _VERSION.match(model):
        return "/predictions", model
    name, _, version = model.partition(":")
    owner, slash, rest = name.partition("/")
    if not slash or not owner or not rest or "/" in rest:
        raise ValueError(f"not a Replicate model: {model!r} (owner/name, owner/name:version, or a version id)")
    if version:
        return "/predictions", version
    return f"/models/{owner}/{rest}/predictions", None


def build_request(request: VideoRequest, model: str, image: str | None = None) -> dict[str, Any]:
    """The prediction's body. `image` is a data URL or an https link to the first frame."""
    if request.size not in SIZES:
        raise InvalidRequest(
            f"size {request.size!r} is not one this model makes: use one of {', '.join(SIZES)}", param="size"
        )
    aspect, resolution = SIZES[request.size]
    inputs: dict[str, Any] = {
        "prompt": request.prompt,
        "duration": int(request.seconds),
        "aspect_ratio": aspect,
        "resolution": resolution,
    }
    if image is not None:
        inputs["image"] = image
    _, version = endpoint(model)
    return {"input": inputs} if version is None else {"version": version, "input": inputs}


def progress(logs: Any) -> int:
    """The percentage of the last progress-bar line in the logs, else 0."""
    if not isinstance(logs, str):
        return 0
    for line in reversed(logs.split("\n")):
        match = _PROGRESS.match(line.strip())
        if match:
            return min(int(match.group("percentage")), 99)
    return 0


def status(prediction: Any, seconds: int | None, size: str | None) -> JobStatus:
    if not isinstance(prediction, dict):
        raise ValueError("the prediction is not an object")
    state = prediction.get("status")
    if state == "starting":
        return JobStatus("queued", 0)
    if state == "processing":
        return JobStatus("in_progress", progress(prediction.get("logs")))
    if state == "succeeded":
        if output_url(prediction) is None:
            return JobStatus("failed", 0, error="the prediction succeeded without an output")
        return JobStatus("completed", 100, seconds=seconds, size=size)
    if state == "failed":
        return JobStatus("failed", 0, error=str(prediction.get("error") or "the prediction failed"))
    if state == "canceled":
        return JobStatus("failed", 0, error="the prediction was canceled")
    raise ValueError(f"unknown prediction status {state!r}")


def output_url(prediction: dict[str, Any]) -> str | None:
    """The video's URL: the output itself, or the first of a list of them."""
    output = prediction.get("output")
    if isinstance(output, list):
        output = next((o for o in output if isinstance(o, str)), None)
    return output if isinstance(output, str) and output.startswith(("https://", "http://")) else None
