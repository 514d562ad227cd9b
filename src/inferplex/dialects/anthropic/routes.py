"""The Anthropic dialect's routes: `POST /v1/messages` and `/v1/messages/count_tokens`.

Parse the Anthropic request (wire schema in `wire.py`, translated by `translate.py`) into the canonical
request, call the pipeline exactly as the OpenAI dialect does, and render the canonical answer as an
Anthropic Message or as Anthropic's SSE event grammar. Errors use Anthropic's shape and status mapping;
an unknown model is a JSON 404 even for a stream (nothing is sent before the pipeline has a first chunk),
and a failure after the first byte is an `event: error` frame.

Token counts: an Anthropic target answers with the provider's own count (its adapter's `count_tokens`);
any other target gets the estimate in `estimate_input_tokens`.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.canonical import ChatRequest, parse
from inferplex.capabilities import uses_cache_control
from inferplex.context import Context
from inferplex.dialects.answer import answer_chat
from inferplex.dialects.anthropic import batches
from inferplex.dialects.anthropic.translate import (
    MessageStreamWriter,
    error_body,
    strip_anthropic,
    to_canonical,
    to_message,
)
from inferplex.dialects.anthropic.wire import CountTokensRequest, MessagesRequest
from inferplex.dialects.failure import error_headers, stream_failure
from inferplex.dialects.registry import Dialect, Rendering
from inferplex.edge import endpoint, json_response, read_json
from inferplex.errors import GatewayError, InvalidRequest
from inferplex.families.chat import CHAT
from inferplex.families.token_count import TOKEN_COUNT
from inferplex.gateway_request import NO_OPTIONS, GatewayOptions, GatewayRequest, cache_object
from inferplex.pipeline import ChatStream
from inferplex.prompting.assembly import assemble
from inferplex.providers.failures import UpstreamOverloaded
from inferplex.responses import ChatCompletion
from inferplex.services import Services
from inferplex.streaming import SSEResponse

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}

# Anthropic-only request details (thinking, top_k, cache_control). An adapter that forwards the caller's JSON
# (kinds openai, azure) is sent the request without them, so they are named here; every other adapter gets
# them on the canonical request, and its declared capabilities decide (`capabilities.plan`: dropped and
# named, or refused with drop_params: false), as for any parameter.
_FORWARDS_JSON = frozenset({"openai", "azure"})


def error_shape(err: GatewayError) -> tuple[int, str]:
    """(HTTP status, Anthropic error type) for a gateway error."""
    if isinstance(err, UpstreamOverloaded):
        return 529, "overloaded_error"
    status = err.status
    if status >= 500:
        return status, "api_error"
    return status, _TYPES.get(status, "invalid_request_error")


def render_error(err: GatewayError, ctx: Context) -> Response:
    status, kind = error_shape(err)
    headers = error_headers(err, ctx)
    headers["request-id"] = ctx.request_id
    return json_response(error_body(kind, err.message), headers, status)


def _note_dropped(ctx: Context, chat: ChatRequest) -> None:
    """Name the Anthropic-only details (extras of the canonical request) a target was not sent: all of them
    for a target that forwards OpenAI's JSON, the Anthropic API's own ones for any other but Anthropic."""
    if ctx.target is None:
        return
    kind = ctx.target.provider.kind
    extras = chat.model_extra or {}
    lost: list[str] = []
    if kind in _FORWARDS_JSON:
        lost = [k for k in ("thinking", "top_k") if k in extras]
        if uses_cache_control(chat):
            lost.append("cache_control")
    if kind != "anthropic":
        extra = extras.get("anthropic_extra") or {}
        lost += ["anthropic-beta" if k == "betas" else "server_tools" if k == "tools" else k for k in extra]
    if lost:
        ctx.info.dropped_params = sorted({*ctx.info.dropped_params, *lost})


def _headers(ctx: Context) -> dict[str, str]:
    return {**ctx.headers(), "request-id": ctx.request_id}


async def render_stream(stream: ChatStream, writer: MessageStreamWriter) -> AsyncIterator[bytes]:
    ctx = stream.ctx
    try:
        async for chunk in stream:
            for frame in writer.feed(chunk):
                yield frame
        for frame in writer.end():
            yield frame
    except Exception as exc:
        err = stream_failure(exc, ctx)
        for frame in writer.error(error_shape(err)[1], err.message):
            yield frame
    finally:
        await stream.aclose()


def _canonical(
    wire: CountTokensRequest, request: Request, options: GatewayOptions = NO_OPTIONS
) -> tuple[dict[str, Any], GatewayRequest[ChatRequest]]:
    """The canonical request (`full`, Anthropic's details kept for an Anthropic target) and the request to
    run: an OpenAI-compatible upstream is sent it without them (`strip_anthropic`), derived again the same
    way when a stage rewrites the body. The Anthropic API has no gateway options but the response cache's
    `cache` object (docs/caching.md), taken out of the body before it is read."""
    full, stripped = to_canonical(wire)
    betas = [b.strip() for b in request.headers.get("anthropic-beta", "").split(",") if b.strip()]
    if betas:
        full.setdefault("anthropic_extra", {})["betas"] = betas
    return full, GatewayRequest(parse(ChatRequest, full), options, stripped, strip_anthropic)


async def messages(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    body = await read_json(request, services.max_body_bytes, services.json_limits)
    options = NO_OPTIONS
    if isinstance(body, dict) and "cache" in body:  # the response cache's control: never a field sent upstream
        options = replace(NO_OPTIONS, cache=cache_object({"cache": body.pop("cache")}))
    wire: MessagesRequest = parse(MessagesRequest, body)
    _, chat = _canonical(wire, request, options)
    return await answer_chat(DIALECT, services, chat, ctx)


def _message(response: ChatCompletion, request: GatewayRequest[ChatRequest], ctx: Context) -> Response:
    _note_dropped(ctx, request.body)
    return json_response(to_message(response, request.body.model), _headers(ctx))


def _message_stream(stream: ChatStream, request: GatewayRequest[ChatRequest], ctx: Context) -> Response:
    """Anthropic's event grammar; `message_start` carries an input estimate made from what an OpenAI-compatible
    upstream is sent (`wire()`, the caller's request without Anthropic's details: the same texts)."""
    _note_dropped(ctx, request.body)
    writer = MessageStreamWriter(request.body.model, estimate_input_tokens(request.wire()))
    return SSEResponse(render_stream(stream, writer), _headers(ctx))  # type: ignore[return-value]


async def count_tokens(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    body = await read_json(request, services.max_body_bytes, services.json_limits)
    wire: CountTokensRequest = parse(CountTokensRequest, body)
    if not wire.messages:
        raise InvalidRequest("messages: at least one message is required", param="messages")
    _, chat = _canonical(wire, request)
    resolved = services.pipeline.resolve(ctx, chat.body.model, chat.options.provider_name, TOKEN_COUNT)
    chat = assemble(chat, resolved.model)  # counted as it would be sent: with the model's own system prompt
    target = ctx.target = resolved.targets[0]
    counter = TOKEN_COUNT.implemented_by(services.pipeline.adapters[target.provider.name])
    count = await counter.count_tokens(chat.body, target) if counter is not None else estimate_input_tokens(chat.wire())
    return json_response({"input_tokens": count}, _headers(ctx))


def estimate_input_tokens(full: dict[str, Any]) -> int:
    """A provider-neutral estimate of a request's input tokens.

    Method: one token per 4 characters of every text, tool name, description and JSON schema (the usual
    ratio for English with BPE tokenizers), plus 4 tokens of framing per message and 1,600 per image or
    document part (Anthropic's documented cost of a ~1.15 megapixel image, the largest sent unscaled).
    It is meant for budgeting, not billing: billing uses the usage the provider reports.
    """
    chars = 0
    media = 0
    messages = full.get("messages") or []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            chars += len(content)
        for part in content if isinstance(content, list) else ():
            if part.get("type") in ("image_url", "file"):
                media += 1
            chars += len(part.get("text") or "")
        for call in m.get("tool_calls") or ():
            chars += len(call["function"]["name"]) + len(call["function"]["arguments"])
    for tool in full.get("tools") or ():
        fn = tool["function"]
        chars += len(fn["name"]) + len(fn.get("description") or "") + len(str(fn.get("parameters") or ""))
    return max(math.ceil(chars / 4) + 4 * len(messages) + 1600 * media, 1)


routes = [
    Route("/v1/messages", endpoint(render_error, messages, "chat", "anthropic"), methods=["POST"]),
    Route("/v1/messages/count_tokens", endpoint(render_error, count_tokens, "chat", "anthropic"), methods=["POST"]),
    *batches.routes,  # Message Batches on the gateway's batch machinery (batches/, issue 23)
]


def _error_body(err: GatewayError) -> dict[str, Any]:
    return error_body(error_shape(err)[1], err.message)


DIALECT = Dialect(
    "anthropic", routes, render_error, _error_body, ("/v1/messages",), {CHAT.name: Rendering(_message, _message_stream)}
)
