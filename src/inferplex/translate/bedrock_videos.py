"""OpenAI's CreateVideoRequest <-> Amazon Bedrock's asynchronous invocation of Nova Reel.

StartAsyncInvoke (`POST /async-invoke`, botocore's bedrock-runtime model) takes `modelId`, `modelInput` (the
model's own body: Nova Reel's `taskType`, `textToVideoParams` or `multiShotAutomatedParams`,
`videoGenerationConfig`), `outputDataConfig.s3OutputDataConfig.s3Uri` and an idempotency
`clientRequestToken`, and answers `{"invocationArn"}`. GetAsyncInvoke (`GET /async-invoke/<arn>`) answers
`status` InProgress | Completed | Failed with `failureMessage`; the video is written by Bedrock to
`<s3Uri>/<invocation id>/output.mp4`. There is no operation to stop an invocation.

Nova Reel makes 1280x720 at 24 fps: six seconds as a single shot (TEXT_VIDEO), or 12 to 120 seconds in
six-second shots (MULTI_SHOT_AUTOMATED, Nova Reel 1.1, text only). Any other size or duration is a 400
naming the field: OpenAI's own 4 and 8 seconds are not durations Nova Reel makes.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from inferplex.errors import InvalidRequest
from inferplex.families.videos import JobStatus, VideoRequest

SIZE = "1280x720"
SHOT = 6
MAX_SECONDS = 120
MAX_TEXT = {"TEXT_VIDEO": 512, "MULTI_SHOT_AUTOMATED": 4000}
IMAGE_FORMATS = {"image/png": "png", "image/jpeg": "jpeg"}


def task(request: VideoRequest) -> str:
    seconds = int(request.seconds)
    if request.size != SIZE:
        raise InvalidRequest(f"size {request.size!r} is not one Nova Reel makes: it makes {SIZE}", param="size")
    if seconds == SHOT:
        return "TEXT_VIDEO"
    if seconds % SHOT == 0 and 2 * SHOT <= seconds <= MAX_SECONDS:
        return "MULTI_SHOT_AUTOMATED"
    raise InvalidRequest(
        f"seconds {request.seconds!r} is not a Nova Reel duration: 6, or 12 to 120 in steps of 6", param="seconds"
    )


def build_request(
    request: VideoRequest,
    model_id: str,
    s3_uri: str,
    token: str,
    image: tuple[str, str] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """The StartAsyncInvoke body. `image` is (mime type, base64 bytes) of the first frame (single shot only)."""
    kind = task(request)
    if len(request.prompt) > MAX_TEXT[kind]:
        raise InvalidRequest(f"prompt: Nova Reel takes at most {MAX_TEXT[kind]} characters here", param="prompt")
    config = {"durationSeconds": int(request.seconds), "fps": 24, "dimension": SIZE, "seed": seed}
    model_input: dict[str, Any] = {"taskType": kind, "videoGenerationConfig": config}
    if kind == "TEXT_VIDEO":
        params: dict[str, Any] = {"text": request.prompt}
        if image is not None:
            if image[0] not in IMAGE_FORMATS:
                raise InvalidRequest("input_reference: Nova Reel takes a PNG or JPEG image", param="input_reference")
            params["images"] = [{"format": IMAGE_FORMATS[image[0]], "source": {"bytes": image[1]}}]
        model_input["textToVideoParams"] = params
    else:
        if image is not None:
            raise InvalidRequest(
                "input_reference: Nova Reel takes an image for 6-second videos only", param="input_reference"
            )
        model_input["multiShotAutomatedParams"] = {"text": request.prompt}
    return {
        "modelId": model_id,
        "modelInput": model_input,
        "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": s3_uri}},
        "clientRequestToken": token,
    }


def invocation_path(arn: str) -> str:
    """The GetAsyncInvoke path: the ARN as one label, percent-encoded as botocore renders a URI label."""
    return "/async-invoke/" + quote(arn, safe="-._~")


def status(data: Any, seconds: int | None) -> JobStatus:
    if not isinstance(data, dict):
        raise ValueError("the invocation is not an object")
    state = data.get("status")
    if state == "Completed":
        return JobStatus("completed", 100, seconds=seconds, size=SIZE)
    if state == "Failed":
        return JobStatus("failed", 0, error=str(data.get("failureMessage") or "the invocation failed"))
    if state == "InProgress":
        return JobStatus("in_progress", 0)
    raise ValueError(f"unknown invocation status {state!r}")


def output_location(data: Any, arn: str) -> tuple[str, str]:
    """(bucket, key) of the invocation's video: `<s3Uri>/<invocation id>/output.mp4`."""
    uri = str((((data or {}).get("outputDataConfig") or {}).get("s3OutputDataConfig") or {}).get("s3Uri") or "")
    if not uri.startswith("s3://"):
        raise ValueError("the invocation names no S3 output")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    invocation = arn.rsplit("/", 1)[-1]
    key = "/".join(p for p in (prefix.strip("/"), invocation, "output.mp4") if p)
    return bucket, key
