"""Anthropic's Message Batches API: `POST /v1/messages/batches`, `GET /v1/messages/batches` (`before_id`,
`after_id`, `limit`), `GET /v1/messages/batches/{id}`, `POST .../{id}/cancel`, `GET .../{id}/results`
(JSON Lines) and `DELETE .../{id}`, on the gateway's batch machinery (`services.batches`, batches/).

Each request's `params` is a `/v1/messages` request: it is validated with the same model as `/v1/messages`
when the batch is created (a bad one is a 400 naming `requests[<i>].params.<field>`, the whole batch refused,
before anything is reserved) and translated as `/v1/messages` translates it; the worker then runs it on the
chat pipeline like any chat line, against whichever provider serves its model. A line's canonical body is
`to_canonical`'s full request (Anthropic's own details kept for an Anthropic upstream); `line_request` turns
it into the request `/v1/messages` would have run, whose wire an OpenAI-compatible upstream is sent without
them. (batches/runners.py's chat runner does not call it yet: it forwards such a body as it is.) The results
are rendered with the dialect's own message rendering (`to_message`), and every failure, of a route or of a
line, in Anthropic's error shape.

Batches of this dialect have `msgbatch_` ids and are not seen by OpenAI's `/v1/batches` (nor the other way
round). The counts are live (`processing` falls as lines end) where Anthropic reports them at the end only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from inferplex.accounts.guard import add_cost
from inferplex.batches.runners import Env, register
from inferplex.batches.service import Batch, BatchService, LineInput, LineResult
from inferplex.canonical import ChatRequest, parse
from inferplex.context import Context
from inferplex.dialects.anthropic.batches_wire import (
    CreateMessageBatch,
    DeletedMessageBatch,
    MessageBatch,
    MessageBatchIndividualResponse,
    MessageBatchList,
)
from inferplex.dialects.anthropic.translate import error_body, strip_anthropic, to_canonical, to_message
from inferplex.dialects.failure import error_headers
from inferplex.edge import endpoint, json_response, read_json
from inferplex.errors import GatewayError, InvalidRequest, NotFound, Unavailable
from inferplex.gateway_request import NO_OPTIONS, GatewayRequest
from inferplex.services import Services

ENDPOINT = "/v1/messages"  # the lines run as /v1/messages runs them (`_run`, registered below)
MAX_PAGE = 1000
# Anthropic's error type for each status (as the dialect's routes render them; the rest 400 or 5xx).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_PROCESSING = {"validating": "in_progress", "in_progress": "in_progress", "finalizing": "in_progress",
               "cancelling": "canceling"}  # fmt: skip


def error_type(status: int) -> str:
    return "api_error" if status >= 500 and status != 529 else ERROR_TYPES.get(status, "invalid_request_error")


def render_error(err: GatewayError, ctx: Context) -> Response:
    headers = error_headers(err, ctx)
    headers["request-id"] = ctx.request_id
    return json_response(error_body(error_type(err.status), err.message), headers, err.status)


def rfc3339(ts: int | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def message_batch(batch: Batch, base_url: str) -> MessageBatch:
    """A batch as Anthropic's `message_batch`; `base_url` makes `results_url` absolute, as the SDKs fetch it."""
    c = batch.counts
    status = _PROCESSING.get(batch.status, "ended")
    results = f"{base_url.rstrip('/')}/v1/messages/batches/{batch.id}/results" if status == "ended" else None
    return {
        "id": batch.id,
        "type": "message_batch",
        "processing_status": status,  # type: ignore[typeddict-item]
        "request_counts": {
            "processing": c.processing,
            "succeeded": c.completed,
            "errored": c.failed,
            "canceled": c.cancelled,
            "expired": c.expired,
        },
        "created_at": rfc3339(batch.created_at) or "",
        "expires_at": rfc3339(batch.expires_at) or "",
        "ended_at": rfc3339(batch.ended_at) if status == "ended" else None,
        "cancel_initiated_at": rfc3339(batch.cancelling_at),
        "archived_at": None,
        "results_url": results,
    }


def individual_response(line: LineResult) -> MessageBatchIndividualResponse:
    """One line's result as Anthropic's: the chat answer as a `message`, a failure as Anthropic's error."""
    if line.outcome == "succeeded" and line.body is not None:
        answer = to_message(line.body, str(line.body.get("model") or ""))
        return {"custom_id": line.custom_id, "result": {"type": "succeeded", "message": answer}}  # type: ignore[typeddict-item]
    if line.outcome == "cancelled":
        return {"custom_id": line.custom_id, "result": {"type": "canceled"}}
    if line.outcome == "expired":
        return {"custom_id": line.custom_id, "result": {"type": "expired"}}
    found = (line.body or {}).get("error") or line.error or {}
    message = str(found.get("message") or "The request failed.") if isinstance(found, dict) else str(found)
    error = error_body(error_type(line.status_code or 500), message)
    return {"custom_id": line.custom_id, "result": {"type": "errored", "error": error}}  # type: ignore[typeddict-item]


def line_request(body: dict[str, Any]) -> GatewayRequest[ChatRequest]:
    """The chat request a line of an Anthropic batch runs: as `/v1/messages` runs it (routes._canonical)."""
    return GatewayRequest(parse(ChatRequest, body), NO_OPTIONS, strip_anthropic(body), strip_anthropic)


async def _run(env: Env, ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """One line, on the batch worker's pipeline, as `/v1/messages` runs it."""
    response = await env.pipeline.chat(line_request(body), ctx)
    add_cost(response, ctx)
    return dict(response)


def _check(body: dict[str, Any]) -> None:
    parse(ChatRequest, body)


register(ENDPOINT, _run, _check)


def lines_of(request: CreateMessageBatch, betas: list[str]) -> list[LineInput]:
    """Each request translated to the canonical body as `/v1/messages` translates it (its params were validated
    with the create body); a repeated custom_id or a stream is a 400 naming its index. `betas` (the
    `anthropic-beta` header) apply to every line."""
    lines: list[LineInput] = []
    seen: set[str] = set()
    for i, item in enumerate(request.requests):
        where = f"requests[{i}]"
        if item.custom_id in seen:
            raise InvalidRequest(
                f"{where}.custom_id: the custom_id {item.custom_id!r} is used more than once.",
                param=f"{where}.custom_id",
            )
        seen.add(item.custom_id)
        wire = item.params
        if wire.stream:
            raise InvalidRequest(
                f"{where}.params.stream: streaming is not supported in a batch.", param=f"{where}.params.stream"
            )
        full, _ = to_canonical(wire)
        if betas:
            full.setdefault("anthropic_extra", {})["betas"] = betas
        lines.append(LineInput(item.custom_id, full))
    return lines


def service_of(request: Request) -> BatchService:
    batches = request.app.state.services.batches
    if not isinstance(batches, BatchService):  # not configured, or this replica's wiring failed to start
        raise Unavailable("Message batches are not available on this gateway.", code="batches_unavailable")
    return batches


async def owned(request: Request, ctx: Context) -> Batch:
    """The caller's Message Batch of the path (an OpenAI batch is not found here)."""
    batch_id = request.path_params["batch_id"]
    batch = await service_of(request).get(ctx, batch_id)
    if batch.dialect != "anthropic":
        raise NotFound(f"No message batch found with id '{batch_id}'.", param="batch_id")
    return batch


def _base(request: Request) -> str:
    return str(request.base_url)


async def create_batch(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    limit = max(services.max_body_bytes, services.media.max_upload_bytes if services.media is not None else 0)
    data = await read_json(request, limit, services.json_limits)
    body: CreateMessageBatch = parse(CreateMessageBatch, data)
    betas = [b.strip() for b in request.headers.get("anthropic-beta", "").split(",") if b.strip()]
    batch = await service_of(request).create(ctx, "anthropic", ENDPOINT, lines_of(body, betas))
    return json_response(message_batch(batch, _base(request)), ctx.headers())


async def retrieve_batch(request: Request, ctx: Context) -> Response:
    return json_response(message_batch(await owned(request, ctx), _base(request)), ctx.headers())


async def list_batches(request: Request, ctx: Context) -> Response:
    q = request.query_params
    raw = q.get("limit", "20")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise InvalidRequest(f"limit: an integer from 1 to {MAX_PAGE}.", param="limit")
    after, before = q.get("after_id") or None, q.get("before_id") or None
    if after is not None and before is not None:
        raise InvalidRequest("Only one of after_id and before_id may be given.", param="before_id")
    try:
        found, more = await service_of(request).page(ctx, "anthropic", after=after, before=before, limit=int(raw))
    except InvalidRequest as err:  # an unknown cursor: named as this API names it
        raise InvalidRequest(err.message, param=f"{err.param}_id" if err.param else None) from None
    data = [message_batch(b, _base(request)) for b in found]
    body: MessageBatchList = {
        "data": data,
        "has_more": more,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }
    return json_response(body, ctx.headers())


async def cancel_batch(request: Request, ctx: Context) -> Response:
    batch = await service_of(request).cancel(ctx, (await owned(request, ctx)).id)
    return json_response(message_batch(batch, _base(request)), ctx.headers())


async def delete_batch(request: Request, ctx: Context) -> Response:
    batch = await service_of(request).delete(ctx, (await owned(request, ctx)).id)
    body: DeletedMessageBatch = {"id": batch.id, "type": "message_batch_deleted"}
    return json_response(body, ctx.headers())


async def batch_results(request: Request, ctx: Context) -> Response:
    """The results as JSON Lines, streamed. The first result is read before answering, so a batch that is
    not the caller's, or has not ended, is a proper error rather than a broken stream."""
    batch = await owned(request, ctx)
    lines = service_of(request).results(ctx, batch.id)
    first = await anext(lines, None)

    async def body() -> AsyncIterator[bytes]:
        if first is not None:
            yield orjson.dumps(individual_response(first)) + b"\n"
        async for line in lines:
            yield orjson.dumps(individual_response(line)) + b"\n"

    return StreamingResponse(body(), 200, ctx.headers(), media_type="application/x-jsonl")


def _route(path: str, handler: Any, method: str) -> Route:
    return Route(path, endpoint(render_error, handler, "chat", "anthropic"), methods=[method])


routes = [
    _route("/v1/messages/batches", create_batch, "POST"),
    _route("/v1/messages/batches", list_batches, "GET"),
    _route("/v1/messages/batches/{batch_id}", retrieve_batch, "GET"),
    _route("/v1/messages/batches/{batch_id}", delete_batch, "DELETE"),
    _route("/v1/messages/batches/{batch_id}/cancel", cancel_batch, "POST"),
    _route("/v1/messages/batches/{batch_id}/results", batch_results, "GET"),
]
