"""The InferExchange dialect: `POST /api/v1/chat/completions` and `GET /api/v1/models`.

InferExchange's API is OpenAI's Chat Completions under another prefix (its docs say so, and its request,
response and stream shapes are OpenAI's), so its chat route parses and renders as the OpenAI dialect does,
under `/api/v1`: one pipeline, one renderer, and so one billing path (per token, from the usage the provider
reports). What it publishes of its own is kept here: per-route rate limits with `X-RateLimit-*` headers
(`inferexchange_limits.py`), its error body for a 429 and for a model without serving capacity (a 503: also
a model whose deployments are all cooling down, refused at once rather than probed), and its model list,
whose items carry `pricing: {prompt, completion, unit}`.

Every other failure keeps OpenAI's error object: InferExchange publishes no other error body, and the
clients it documents are OpenAI SDKs, which parse that one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.canonical import ChatRequest
from inferplex.config import ModelConfig
from inferplex.context import Context
from inferplex.dialects.answer import answer_chat
from inferplex.dialects.failure import error_headers
from inferplex.dialects.inferexchange_limits import limited
from inferplex.dialects.openai import RENDERS, model_handlers
from inferplex.dialects.registry import Dialect
from inferplex.edge import Handler, endpoint, json_response, read_json
from inferplex.errors import GatewayError
from inferplex.gateway_request import GatewayRequest, parse_request
from inferplex.services import Services

# The 503s that mean the model has nothing able to serve it: the router's `Unavailable` (no deployment could
# serve), and a provider that says it is overloaded. Any other 503 is the gateway's own store or limits.
_NO_CAPACITY = frozenset({"model_unavailable", "upstream_overloaded"})


def _seconds(err: GatewayError) -> int:
    """The wait a 429 announces, in the same whole seconds as its `Retry-After` (failure.error_headers)."""
    return max(int((err.retry_after or 1) + 0.999), 1)


def error_body(err: GatewayError) -> dict[str, Any]:
    if err.status == 429:
        message = f"Rate limit exceeded. Try again in {_seconds(err)} seconds."
        return {"error": {"code": "RATE_LIMITED", "message": message}}
    if err.status == 503:
        code = "MODEL_UNAVAILABLE" if err.code in _NO_CAPACITY else "SERVICE_UNAVAILABLE"
        return {"error": {"code": code, "message": err.message}}
    return err.to_openai()


def render_error(err: GatewayError, ctx: Context) -> Response:
    headers = error_headers(err, ctx)
    if err.status == 429:
        headers["retry-after"] = str(_seconds(err))  # always, as published: a provider's 429 may not say
    return json_response(error_body(err), headers, err.status)


def model_card(services: Services, model: ModelConfig) -> dict[str, Any]:
    p = model.pricing
    return {
        "id": model.name,
        "object": "model",
        "created": model.created,
        "owned_by": services.pipeline.catalog.targets(model)[0].provider.name,
        "pricing": {"prompt": str(p.input), "completion": str(p.output), "unit": "per_million_tokens"},
    }


list_models, get_model = model_handlers(model_card)


async def chat_completions(request: Request, ctx: Context) -> Response:
    """OpenAI's chat, with InferExchange's one routing rule: a model whose deployments are all cooling down
    answers 503 at once (its published "no serving capacity"), whatever the model's own `when_all_open`."""
    services: Services = request.app.state.services
    chat = parse_request(ChatRequest, await read_json(request, services.max_body_bytes, services.json_limits))
    options = replace(chat.options, refuse_when_all_open=True)
    return await answer_chat(DIALECT, services, GatewayRequest(chat.body, options, chat.wire()), ctx)


def _route(path: str, handler: Handler, scope: str, bucket: str, method: str) -> Route:
    return Route(path, endpoint(render_error, limited(bucket, handler), scope, "inferexchange"), methods=[method])


routes = [
    _route("/api/v1/chat/completions", chat_completions, "chat", "chat", "POST"),
    _route("/api/v1/models", list_models, "models:read", "models", "GET"),
    _route("/api/v1/models/{model_id:path}", get_model, "models:read", "models", "GET"),
]

DIALECT = Dialect("inferexchange", routes, render_error, error_body, ("/api/v1/",), RENDERS)
