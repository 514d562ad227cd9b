"""OpenAI's Batch API: `POST /v1/batches`, `GET /v1/batches`, `GET /v1/batches/{id}`,
`POST /v1/batches/{id}/cancel`, on the gateway's own batch machinery (`services.batches`, batches/).

The gateway runs every line itself, against whichever provider serves its model, so a batch works for every
provider; the input is a Files API file of the caller's (purpose `batch`, one request per line), and the
results are two Files API files (`output_file_id`, `error_file_id`, purpose `batch_output`) in OpenAI's line
format. This module only parses the request and renders `batches.service.Batch` as OpenAI's `batch`
object; what the lines do is the worker's. Endpoints the gateway cannot batch (`/v1/completions`,
`/v1/moderations`, images, videos) are a 400 naming `endpoint`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.batches.service import ENDPOINTS, Batch, BatchService
from inferplex.canonical import parse
from inferplex.context import Context
from inferplex.dialects.failure import error_headers
from inferplex.dialects.openai_files_wire import BatchError, BatchList, BatchObject
from inferplex.dialects.paging import limit_of, list_page
from inferplex.edge import endpoint, json_response, read_json
from inferplex.errors import GatewayError, InvalidRequest, NotFound, Unavailable
from inferplex.media_store.store import owner_of
from inferplex.services import Services

MAX_PAGE = 100
# OpenAI's Metadata: at most 16 pairs, keys up to 64 characters, values up to 512.
MAX_METADATA, MAX_KEY, MAX_VALUE = 16, 64, 512
OpenAIEndpoint = Literal[
    "/v1/responses",
    "/v1/chat/completions",
    "/v1/embeddings",
    "/v1/completions",
    "/v1/moderations",
    "/v1/images/generations",
    "/v1/images/edits",
    "/v1/videos",
]


class ExpiresAfter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    anchor: Literal["created_at"]
    seconds: int = Field(ge=3600, le=2_592_000)


class CreateBatchRequest(BaseModel):
    """OpenAI's CreateBatchRequest. `output_expires_after` is accepted and checked; the output files are
    kept as long as the media store keeps files (`media.retention_s`)."""

    model_config = ConfigDict(extra="forbid")
    input_file_id: str = Field(min_length=1, max_length=100)
    endpoint: OpenAIEndpoint
    completion_window: Literal["24h"]
    metadata: dict[str, str] | None = None
    output_expires_after: ExpiresAfter | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if len(value) > MAX_METADATA:
            raise ValueError(f"at most {MAX_METADATA} pairs")
        for key, item in value.items():
            if len(key) > MAX_KEY or len(item) > MAX_VALUE:
                raise ValueError(f"keys of at most {MAX_KEY} characters, values of at most {MAX_VALUE}")
        return value


def batch_object(batch: Batch) -> BatchObject:
    """A batch as OpenAI's `batch` object."""
    c = batch.counts
    return {
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": None if batch.errors is None else {"object": "list", "data": [_error(e) for e in batch.errors]},
        "input_file_id": batch.input_file_id or "",
        "completion_window": batch.completion_window,
        "status": batch.status,
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        "created_at": batch.created_at,
        "in_progress_at": batch.in_progress_at,
        "expires_at": batch.expires_at,
        "finalizing_at": batch.finalizing_at,
        "completed_at": batch.completed_at,
        "failed_at": batch.failed_at,
        "expired_at": batch.expired_at,
        "cancelling_at": batch.cancelling_at,
        "cancelled_at": batch.cancelled_at,
        # OpenAI counts a line cancelled or expired before it ran as failed: it is in the error file.
        "request_counts": {"total": c.total, "completed": c.completed, "failed": c.failed + c.cancelled + c.expired},
        "metadata": batch.metadata,
    }


def _error(e: dict[str, Any]) -> BatchError:
    return {
        "code": str(e.get("code") or "invalid_request"),
        "message": str(e.get("message") or ""),
        "param": e.get("param"),
        "line": e.get("line"),
    }


def service_of(request: Request) -> BatchService:
    batches = request.app.state.services.batches
    if not isinstance(batches, BatchService):  # not configured, or this replica's wiring failed to start
        raise Unavailable("Batches are not available on this gateway.", code="batches_unavailable")
    return batches


def render_error(err: GatewayError, ctx: Context) -> Response:
    """OpenAI's error object (as `dialects.openai.render_error`, which imports this module)."""
    return json_response(err.to_openai(), error_headers(err, ctx), err.status)


async def create_batch(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    data = await read_json(request, services.max_body_bytes, services.json_limits)
    body: CreateBatchRequest = parse(CreateBatchRequest, data)
    if body.endpoint not in ENDPOINTS:
        raise InvalidRequest(
            f"The endpoint {body.endpoint} is not supported for batches on this gateway: "
            f"use one of {', '.join(ENDPOINTS)}.",
            param="endpoint",
            code="unsupported_endpoint",
        )
    service = service_of(request)
    await _check_input(request, ctx, body.input_file_id)
    batch = await service.create(
        ctx, "openai", body.endpoint, body.input_file_id, body.completion_window, body.metadata
    )
    return json_response(batch_object(batch), ctx.headers())


async def _check_input(request: Request, ctx: Context, file_id: str) -> None:
    """The input must be a Files API file of the caller's uploaded for batches (purpose `batch`), as OpenAI's."""
    media = request.app.state.services.media
    file = None if media is None else await media.get(file_id, owner_of(ctx.principal))
    if file is None:
        raise NotFound(f"No such File object: {file_id}", param="input_file_id", code="file_not_found")
    if file.purpose != "batch":
        raise InvalidRequest(
            f"The file {file_id} was uploaded with purpose '{file.purpose}': a batch's input needs purpose 'batch'.",
            param="input_file_id",
            code="invalid_file_purpose",
        )


async def owned(request: Request, ctx: Context) -> Batch:
    """The caller's OpenAI batch of the path (an Anthropic one is not found here, as on either API)."""
    batch_id = request.path_params["batch_id"]
    batch = await service_of(request).get(ctx, batch_id)
    if batch.dialect != "openai":
        raise NotFound(f"No batch found with id '{batch_id}'.", param="batch_id", code="batch_not_found")
    return batch


async def retrieve_batch(request: Request, ctx: Context) -> Response:
    return json_response(batch_object(await owned(request, ctx)), ctx.headers())


async def list_batches(request: Request, ctx: Context) -> Response:
    limit = limit_of(request, 20, MAX_PAGE)
    after = request.query_params.get("after") or None
    found, more = await service_of(request).page(ctx, "openai", after=after, limit=limit)
    data = [batch_object(b) for b in found]
    body: BatchList = list_page(data, more)
    return json_response(body, ctx.headers())


async def cancel_batch(request: Request, ctx: Context) -> Response:
    batch = await service_of(request).cancel(ctx, (await owned(request, ctx)).id)
    return json_response(batch_object(batch), ctx.headers())


def _route(path: str, handler: Any, method: str) -> Route:
    return Route(path, endpoint(render_error, handler, "chat"), methods=[method])


routes = [
    _route("/v1/batches", create_batch, "POST"),
    _route("/v1/batches", list_batches, "GET"),
    _route("/v1/batches/{batch_id}", retrieve_batch, "GET"),
    _route("/v1/batches/{batch_id}/cancel", cancel_batch, "POST"),
]
