"""OpenAI's Responses API routes: `POST /v1/responses` (buffered, streamed, background), `GET` / `DELETE
/v1/responses/{id}` (a background one streamed from where it is with `?stream=true&starting_after=N`),
`GET /v1/responses/{id}/input_items`, `POST /v1/responses/{id}/cancel` and `POST /v1/responses/input_tokens`,
on `services.responses` (responses_api/service.py).

A stream is OpenAI's: `event: <type>` and `data: <json>` per event, no `[DONE]`. A failure before the first
event is an HTTP error in OpenAI's shape; after it, the stream ends with `response.failed` (or, if the
gateway itself fails, an `error` event), never a silent cut. Errors are OpenAI's error object everywhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.context import Context
from inferplex.dialects.failure import error_headers, stream_failure
from inferplex.dialects.paging import limit_of, order_of
from inferplex.edge import endpoint, json_response, read_json
from inferplex.errors import GatewayError, InvalidRequest, Unavailable
from inferplex.responses_api.service import ResponsesService
from inferplex.responses_api.wire import parse
from inferplex.services import Services
from inferplex.sse import encode
from inferplex.streaming import SSEResponse

MAX_PAGE = 100


def _render_error(err: GatewayError, ctx: Context) -> Response:
    """OpenAI's error object (as `dialects.openai.render_error`, which imports this module)."""
    return json_response(err.to_openai(), error_headers(err, ctx), err.status)


def _service(request: Request) -> ResponsesService:
    service = request.app.state.services.responses
    if not isinstance(service, ResponsesService):
        raise Unavailable("The Responses API is not available on this gateway.", code="responses_unavailable")
    return service


async def _sse(events: AsyncIterator[dict[str, Any]], ctx: Context) -> AsyncIterator[bytes]:
    """OpenAI's Responses stream frames; the gateway's own failure after the first frame as an `error` event."""
    sequence = -1
    try:
        async for event in events:
            sequence = event.get("sequence_number", sequence)
            yield encode(orjson.dumps(event), str(event.get("type", "message")))
    except Exception as exc:
        error = stream_failure(exc, ctx)
        body = {"type": "error", "sequence_number": sequence + 1, "code": error.code, "message": error.message,
                "param": error.param}  # fmt: skip
        yield encode(orjson.dumps(body), "error")
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


def _stream(events: AsyncIterator[dict[str, Any]], ctx: Context) -> Response:
    return SSEResponse(_sse(events, ctx), ctx.headers())  # type: ignore[return-value]


async def create_response(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    service = _service(request)
    data = await read_json(request, services.max_body_bytes, services.json_limits)
    raw = dict(data) if isinstance(data, dict) else data
    parsed = parse(data)
    body = parsed.body
    if body.background:
        response = await service.start_background(ctx, parsed, raw)
        if body.stream:
            return _stream(await service.follow(ctx, response["id"], -1), ctx)
        return json_response(response, ctx.headers())
    if body.stream:
        return _stream(await service.stream(ctx, parsed), ctx)
    return json_response(await service.respond(ctx, parsed), ctx.headers())


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise InvalidRequest(f"Invalid '{name}': true or false.", param=name)
    return value in ("true", "1")


async def retrieve_response(request: Request, ctx: Context) -> Response:
    service = _service(request)
    response_id = request.path_params["response_id"]
    if _flag(request, "stream"):
        raw = request.query_params.get("starting_after", "-1")
        if not raw.lstrip("-").isdigit():
            raise InvalidRequest("Invalid 'starting_after': an integer sequence number.", param="starting_after")
        return _stream(await service.follow(ctx, response_id, int(raw)), ctx)
    return json_response(await service.retrieve(ctx, response_id), ctx.headers())


async def delete_response(request: Request, ctx: Context) -> Response:
    deleted = await _service(request).delete(ctx, request.path_params["response_id"])
    return json_response(deleted, ctx.headers())


async def cancel_response(request: Request, ctx: Context) -> Response:
    response = await _service(request).cancel(ctx, request.path_params["response_id"])
    return json_response(response, ctx.headers())


async def list_input_items(request: Request, ctx: Context) -> Response:
    limit, order = limit_of(request, 20, MAX_PAGE), order_of(request)
    after = request.query_params.get("after") or None
    page = await _service(request).input_items(ctx, request.path_params["response_id"], after, limit, order)
    return json_response(page, ctx.headers())


async def count_input_tokens(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    data = await read_json(request, services.max_body_bytes, services.json_limits)
    if isinstance(data, dict) and data.get("model") is None:
        data["model"] = "-"  # the count needs no model: the gateway's estimate is the same for all
    counted = await _service(request).input_tokens(ctx, parse(data))
    return json_response(counted, ctx.headers())


def _route(path: str, handler: Any, method: str, scope: str = "chat") -> Route:
    return Route(path, endpoint(_render_error, handler, scope), methods=[method])


routes = [
    _route("/v1/responses", create_response, "POST"),
    _route("/v1/responses/input_tokens", count_input_tokens, "POST"),
    _route("/v1/responses/{response_id}", retrieve_response, "GET"),
    _route("/v1/responses/{response_id}", delete_response, "DELETE"),
    _route("/v1/responses/{response_id}/input_items", list_input_items, "GET"),
    _route("/v1/responses/{response_id}/cancel", cancel_response, "POST"),
]
