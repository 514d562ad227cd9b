"""OpenAI's video routes: `/v1/videos` (create, list), `/v1/videos/{id}` (retrieve, delete),
`/v1/videos/{id}/content` (download) and `/v1/videos/{id}/remix`, on the durable jobs of `jobs/`.

A create is JSON (OpenAI's CreateVideoJsonBody, with `input_reference` as `{image_url | file_id}`) or
multipart (CreateVideoMultipartBody, as the official SDKs send it, with `input_reference` an uploaded image,
checked against its bytes and spooled to disk). The answer is the job at once (`status: queued`); the
gateway polls the provider meanwhile, so a retrieve reads the job's row and never calls the provider. The
content is streamed from the gateway's store once the job is completed; before that it is a 400
(`video_not_ready`), and a variant the provider did not offer a 404. Every job belongs to the caller's
account (else its key): another owner's job is a 404, as is a deleted one.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.canonical import parse
from inferplex.context import Context
from inferplex.dialects.failure import error_headers
from inferplex.dialects.openai_videos_responses import Video, VideoDeleted, VideoList
from inferplex.dialects.paging import limit_of, list_page, order_of
from inferplex.dialects.registry import Rendering
from inferplex.edge import endpoint, json_response, read_json
from inferplex.errors import GatewayError, InvalidRequest, Unavailable
from inferplex.families.videos import VARIANTS, VIDEOS, ReferenceFile, VideoRemixRequest, VideoRequest
from inferplex.gateway_request import GatewayRequest, parse_request
from inferplex.jobs.rows import Job
from inferplex.jobs.service import VideoJobs, public_status
from inferplex.media_store.sniff import IMAGE_TYPES
from inferplex.media_store.uploads import FieldKind, read_upload_form
from inferplex.services import Services

FORM_FIELDS: dict[str, FieldKind] = {"model": "str", "prompt": "str", "seconds": "str", "size": "str", "user": "str"}
MAX_PAGE = 100


def video_object(job: Job) -> Video:
    """The job as OpenAI's `video` object."""
    status = public_status(job)
    error = {"code": job.error_code or "failed", "message": job.error_message or ""} if status == "failed" else None
    return {
        "id": job.id,
        "object": "video",
        "model": job.model,
        "status": status,  # type: ignore[typeddict-item]
        "progress": 100 if status == "completed" else job.progress,
        "created_at": int(job.created_at),
        "completed_at": None if job.completed_at is None else int(job.completed_at),
        "expires_at": None if job.expires_at is None else int(job.expires_at),
        "prompt": job.prompt,
        "seconds": job.seconds,
        "size": job.size,
        "remixed_from_video_id": job.remixed_from,
        "error": error,  # type: ignore[typeddict-item]
    }


def _jobs(request: Request) -> VideoJobs:
    jobs = request.app.state.services.jobs
    if jobs is None:
        raise Unavailable("Video jobs are not available on this gateway.", code="jobs_unavailable")
    assert isinstance(jobs, VideoJobs)
    return jobs


def _render_error(err: GatewayError, ctx: Context) -> Response:
    """OpenAI's error object (as `dialects.openai.render_error`, which imports this module)."""
    return json_response(err.to_openai(), error_headers(err, ctx), err.status)


async def _parsed(request: Request, services: Services) -> tuple[GatewayRequest[VideoRequest], Any]:
    """The create request, JSON or multipart; the form (to close: it holds the uploaded file) or None."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "multipart/form-data":
        data = await read_json(request, services.max_body_bytes, services.json_limits)
        return parse_request(VideoRequest, data), None
    limit = services.media.max_upload_bytes if services.media is not None else services.max_body_bytes
    form = await read_upload_form(request, max_bytes=limit, files={"input_reference": IMAGE_TYPES}, kinds=FORM_FIELDS)
    try:
        parsed = parse_request(VideoRequest, dict(form.fields))
        upload = form.file("input_reference")
        if upload is not None:
            ref = ReferenceFile(str(upload.path), upload.filename, upload.content_type, upload.bytes)
            parsed.body.with_reference(ref)
    except BaseException:
        form.close()
        raise
    return parsed, form


async def create_video(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    jobs = _jobs(request)
    parsed, form = await _parsed(request, services)
    try:
        job = await jobs.submit(ctx, parsed)
    finally:
        if form is not None:
            form.close()
    return _video_result(job, parsed, ctx)


def _video_result(job: Job, request: GatewayRequest[Any], ctx: Context) -> Response:
    return json_response(video_object(job), ctx.headers())


async def retrieve_video(request: Request, ctx: Context) -> Response:
    job = await _jobs(request).owned(ctx, request.path_params["video_id"])
    headers = ctx.headers()
    if job.status in ("submitting", "queued", "in_progress") and job.next_poll_at is not None:
        wait_ms = max(100, int((job.next_poll_at - time.time()) * 1000))
        headers["openai-poll-after-ms"] = str(wait_ms)  # read by the SDKs' `poll` helpers
    return json_response(video_object(job), headers)


def _page_args(request: Request) -> tuple[str | None, int, str]:
    limit, order = limit_of(request, 20, MAX_PAGE, minimum=0), order_of(request)
    after = request.query_params.get("after") or None
    if after is not None and len(after) > 200:
        raise InvalidRequest("Invalid 'after': not a video id.", param="after")
    return after, limit, order


async def list_videos(request: Request, ctx: Context) -> Response:
    after, limit, order = _page_args(request)
    jobs, more = await _jobs(request).page(ctx, after, limit, order)
    data = [video_object(j) for j in jobs]
    body: VideoList = list_page(data, more)
    return json_response(body, ctx.headers())


async def delete_video(request: Request, ctx: Context) -> Response:
    video_id = request.path_params["video_id"]
    await _jobs(request).delete(ctx, video_id)
    body: VideoDeleted = {"id": video_id, "object": "video.deleted", "deleted": True}
    return json_response(body, ctx.headers())


async def video_content(request: Request, ctx: Context) -> Response:
    variant = request.query_params.get("variant", "video")
    if variant not in VARIANTS:
        raise InvalidRequest(f"Invalid 'variant': one of {', '.join(VARIANTS)}.", param="variant")
    services: Services = request.app.state.services
    file = await _jobs(request).content(ctx, request.path_params["video_id"], variant)
    assert services.media is not None  # `content` found the file in it
    response = services.media.download_response(file, request.headers.get("range"))
    response.headers.update(ctx.headers())
    return response


async def remix_video(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    data = await read_json(request, services.max_body_bytes, services.json_limits)
    body: VideoRemixRequest = parse(VideoRemixRequest, data)
    job = await _jobs(request).remix(ctx, request.path_params["video_id"], body.prompt)
    return json_response(video_object(job), ctx.headers())


def _route(path: str, handler: Any, method: str) -> Route:
    return Route(path, endpoint(_render_error, handler, "video"), methods=[method])


routes = [
    _route("/v1/videos", create_video, "POST"),
    _route("/v1/videos", list_videos, "GET"),
    _route("/v1/videos/{video_id}", retrieve_video, "GET"),
    _route("/v1/videos/{video_id}", delete_video, "DELETE"),
    _route("/v1/videos/{video_id}/content", video_content, "GET"),
    _route("/v1/videos/{video_id}/remix", remix_video, "POST"),
]

# The OpenAI-shaped dialects' rendering of a video job (the job's row, as OpenAI's `video` object).
RENDERS = {VIDEOS.name: Rendering(_video_result)}
