"""The OneInfer dialect ("ULA"): `POST /v1/ula/chat/completions`, for clients written for OneInfer, with
the token exchange its clients start with (`POST /v1/ula/oauth-authentication`) and its models list
(`GET /v1/ula/models`, inferred); see "Keys, tokens and models" below.

A request names `provider` (default `"openai"`) and `model` beside OpenAI-style `messages`; OneInfer's
defaults are applied (temperature 0.7, max_tokens 1000) and the result is the canonical request, run on the
same pipeline as every other dialect. Answers use OneInfer's envelope
`{"api_details": {"api_status", "api_message"}, "data": {...}, "error": {...}}`; streams are its
`{"id", "text", "finish_reason"}` chunks ending with `data: [DONE]`. Without `model`, the provider's first
configured chat model is used. `endpoint_id` must name a configured deployment (the catalog checks, before
anything is reserved) and `service_tier` is checked by the gateway's one rule for it (routing/options.py:
"default" or "flex", and OpenAI's "auto" for "default"); both are passed on to the router.

Status codes are OneInfer's table, read as follows:
- 400: the body is not valid JSON (or not a valid form); a required field is missing (`messages`, or a
  `provider`/`model` sent empty); the provider is not configured ("unsupported provider"); or a value has
  the right type but is not allowed (temperature 3, an unknown role, service_tier "turbo", an unknown
  endpoint_id, a model the provider does not serve): the doc's "invalid field values".
- 422: the body does not fit the schema: not a JSON object, or a field of the wrong JSON type (messages as
  a string, temperature "hot", max_tokens 1.5): the doc's "failed schema validation".
- 401 bad credentials; 403 insufficient credit (and a key that may not use the model); 415 a body that is
  neither `application/json` nor `multipart/form-data`; 500 an unexpected failure. Statuses the table does
  not list keep the gateway's meaning (413 too large, 429 limits, 502/503/504 provider failures), and the
  media routes (image, video, text-to-speech) answer 501 until the media issue lands.

Keys, tokens and models. OneInfer's clients trade their key for a token with
`POST /v1/ula/oauth-authentication?api_key=KEY` (no body) and send `Authorization: Bearer <token>` after;
its docs also accept the raw key as `Authorization: Bearer KEY` and as `X-API-KEY: KEY`, which every route
of the gateway reads (auth.credential). The answer is `{"access_token"}` alone, as published, and the token
is the gateway's own (accounts/tokens.py, as `/v1/auth/token` mints it): the key's scopes, bound to its
secret, living `accounts.token_ttl_s` (OneInfer publishes no lifetime). Any key that does not authenticate
(unknown, revoked, expired, or a token in the key's place) is one 403, "API key is invalid or expired.",
that never says which. `GET /v1/ula/models` answers the catalogue's models the caller may use, in the
envelope: OneInfer's docs point to a "GET Models" page for "provider and model details" and context
lengths, and that page was never found, so its path and fields are ours.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.accounts import tokens
from inferplex.accounts.wiring import AccountServices
from inferplex.canonical import ChatRequest
from inferplex.catalog import Catalog
from inferplex.config import ModelConfig
from inferplex.context import Context
from inferplex.dialects import oneinfer_media
from inferplex.dialects.answer import answer_chat
from inferplex.dialects.failure import stream_failure
from inferplex.dialects.forms import FieldKind, read_form
from inferplex.dialects.oneinfer_envelope import error_envelope, render_error, status_for
from inferplex.dialects.oneinfer_envelope import schema_error as _schema_error
from inferplex.dialects.oneinfer_envelope import success as _success
from inferplex.dialects.oneinfer_envelope import validated as _validated
from inferplex.dialects.openai import price_card
from inferplex.dialects.registry import Dialect, Rendering
from inferplex.edge import endpoint, json_response, read_json
from inferplex.errors import GatewayError, InvalidRequest, PermissionDenied, Unauthenticated, UnsupportedMediaType
from inferplex.families.chat import CHAT
from inferplex.gateway_request import ROUTING_KEYS, Flags, GatewayRequest, RoutingFields, flags, options, split
from inferplex.json_limits import JsonLimits
from inferplex.pipeline import ChatStream
from inferplex.responses import ChatCompletion
from inferplex.services import Services
from inferplex.sse import DONE, encode
from inferplex.streaming import SSEResponse

DEFAULT_PROVIDER = "openai"
DEFAULTS = {"temperature": 0.7, "max_tokens": 1000}
SUCCESS_MESSAGE = "Chat completion generated successfully."
MODELS_MESSAGE = "Models retrieved successfully."  # inferred, in the chat message's style
INVALID_KEY = "API key is invalid or expired."
FORM_FIELDS: dict[str, FieldKind] = {
    "messages": "json",
    "stop": "json_or_text",
    "temperature": "float",
    "top_p": "float",
    "max_tokens": "int",
    "stream": "bool",
}


# ---- request ----------------------------------------------------------------------------------------------


def parse_chat(full: dict[str, Any], found: dict[str, Any], checked: Flags) -> GatewayRequest[ChatRequest]:
    """The canonical request and the gateway's options (`to_canonical`'s), each bad field a 400 or a 422."""
    body = _validated(ChatRequest, full)
    fields = {k: found[k] for k in ROUTING_KEYS if k in found}
    routed = _validated(RoutingFields, fields)
    return GatewayRequest(body, options(found, checked, routed), full)


def _optional_str(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise _schema_error(f"Invalid type for '{name}': expected a string.", name)
    if value == "":
        raise InvalidRequest(f"Missing required parameter: '{name}'.", param=name)
    return value


def to_canonical(body: Any, catalog: Catalog) -> tuple[dict[str, Any], dict[str, Any], Flags]:
    """OneInfer's body as the canonical request dict (model resolved, defaults applied), and the gateway's
    options taken out of it (`gateway_request.split`: the provider, resolved, among them) with their flags
    checked."""
    if not isinstance(body, dict):
        raise _schema_error("The request body must be a JSON object.")
    found = split(body)
    try:
        checked = flags(found)  # the gateway's own options (tags, log flags), as on the OpenAI routes
    except InvalidRequest as err:
        err.status, err.code = 422, "schema_validation_error"  # a wrong JSON type, in OneInfer's table
        raise
    provider = _optional_str(found, "provider") or DEFAULT_PROVIDER
    if not catalog.has_provider(provider):
        raise InvalidRequest(
            f"Unsupported provider `{provider}`: it is not configured on this gateway.",
            param="provider",
            code="unsupported_provider",
        )
    model = _optional_str(body, "model") or catalog.default_model(provider)
    _optional_str(body, "service_tier")  # its type and emptiness; its value is the router's (routing/options.py)
    endpoint_id = _optional_str(found, "endpoint_id")
    if endpoint_id is not None:
        catalog.check_endpoint(endpoint_id)
    full = {**body, "model": model}
    if full.get("temperature") is None:
        full["temperature"] = DEFAULTS["temperature"]
    if full.get("max_tokens") is None and full.get("max_completion_tokens") is None:
        full["max_tokens"] = DEFAULTS["max_tokens"]
    return full, {**found, "provider": provider}, checked


async def read_body(request: Request, max_bytes: int, limits: JsonLimits) -> Any:
    content_type = request.headers.get("content-type", "")
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "multipart/form-data":
        return await read_form(request, max_bytes, FORM_FIELDS, limits)
    if media != "application/json":
        raise UnsupportedMediaType(
            f"Unsupported content type {content_type or '(none)'!r}: "
            "send the body as application/json or multipart/form-data."
        )
    return await read_json(request, max_bytes, limits)


# ---- responses --------------------------------------------------------------------------------------------


def context_full(usage: dict[str, int], model: ModelConfig | None) -> bool:
    window = model.context_window if model is not None else None
    return window is not None and usage["total_tokens"] >= window


def render_completion(response: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
    """The `data` object of OneInfer's envelope from a canonical completion."""
    choice = (response.get("choices") or [{}])[0]
    usage_in = response.get("usage") or {}
    usage = {k: int(usage_in.get(k) or 0) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    target = ctx.target
    return {
        "id": ctx.request_id,
        "created": int(response.get("created") or time.time()),
        "text": (choice.get("message") or {}).get("content") or "",
        "finish_reason": choice.get("finish_reason") or "stop",
        "provider": target.provider.name if target is not None else None,
        "model": target.upstream_model if target is not None else response.get("model"),
        "usage": usage,
        "latency_ms": round(ctx.timings.as_dict()["total_ms"]),
        "is_context_length_full": context_full(usage, ctx.model),
    }


def _frame(data: dict[str, Any]) -> bytes:
    return encode(orjson.dumps(data))


async def render_stream(stream: ChatStream) -> AsyncIterator[bytes]:
    """OneInfer's chunks: one per piece of text, then `chunk_final` with the finish reason, then [DONE].
    A failure after the first byte is an error envelope frame before [DONE], never a silent cut."""
    ctx = stream.ctx
    count = 0
    finish: str | None = None
    try:
        async for chunk in stream:
            for choice in chunk.get("choices") or ():
                if choice.get("index", 0) != 0:
                    continue
                text = (choice.get("delta") or {}).get("content")
                if text:
                    count += 1
                    yield _frame({"id": f"chunk_{count}", "text": text, "finish_reason": None})
                finish = choice.get("finish_reason") or finish
        yield _frame({"id": "chunk_final", "text": "", "finish_reason": finish or "stop"})
    except Exception as exc:
        err = stream_failure(exc, ctx)
        yield _frame(error_envelope(err, status_for(err)))
    finally:
        await stream.aclose()
    yield DONE


# ---- routes -----------------------------------------------------------------------------------------------


async def chat_completions(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    catalog = services.pipeline.catalog
    body = await read_body(request, services.max_body_bytes, services.json_limits)
    if oneinfer_media.is_speech(body):  # seed 001's text-to-speech example: `input` and `voice`, no `messages`
        return await oneinfer_media.chat_speech(request, body, ctx)
    full, found, checked = to_canonical(body, catalog)
    return await answer_chat(DIALECT, services, parse_chat(full, found, checked), ctx)


def _chat_result(response: ChatCompletion, request: GatewayRequest[ChatRequest], ctx: Context) -> Response:
    return json_response(_success(SUCCESS_MESSAGE, render_completion(response, ctx)), ctx.headers())


def _chat_stream(stream: ChatStream, request: GatewayRequest[ChatRequest], ctx: Context) -> Response:
    return SSEResponse(render_stream(stream), ctx.headers())  # type: ignore[return-value]


# ---- keys and tokens --------------------------------------------------------------------------------------


def _invalid_key() -> PermissionDenied:
    """OneInfer's one answer for a key that cannot be exchanged: the same whatever is wrong with it, so the
    route tells a key-guesser nothing, and without the key (which is in the URL) anywhere in it."""
    return PermissionDenied(INVALID_KEY, param="api_key", code="invalid_api_key")


def _presenting(request: Request, key: str) -> Request:
    """The request as if the key had come as `Authorization: Bearer`: the authenticator reads headers, and
    every check it makes of the caller (the key's IP allowlist, its proxies' X-Forwarded-For) still sees
    this caller. The caller's own credential headers are dropped, so only the query's key counts."""
    kept = [(k, v) for k, v in request.scope["headers"] if k not in (b"authorization", b"x-api-key")]
    header = (b"authorization", b"Bearer " + key.encode("utf-8", "replace"))
    return Request({**request.scope, "headers": [*kept, header]})


async def oauth_authentication(request: Request, ctx: Context) -> Response:
    """Trade the query's API key for one of the gateway's short-lived tokens, minted as `/v1/auth/token`
    mints them: the key's own scopes, bound to its current secret, so revoking or rotating the key ends the
    token at once. A token is refused in the key's place: the route is for keys, and a token traded here
    could otherwise outlive the token it came from."""
    key = request.query_params.get("api_key")
    if key is None:
        raise _schema_error("Missing required query parameter: 'api_key'.", "api_key")
    if key.startswith(tokens.TOKEN_PREFIX):
        raise _invalid_key()
    services: Services = request.app.state.services
    try:
        principal = ctx.principal = await services.auth.authenticate(_presenting(request, key))
    except Unauthenticated:
        raise _invalid_key() from None
    accounts: AccountServices = request.app.state.accounts
    expires_at = int(time.time()) + accounts.config.accounts.token_ttl_s
    token = tokens.issue(accounts.token_secret, principal.key_id, principal.scopes, expires_at, principal.binding)
    return json_response({"access_token": token}, ctx.headers())


# ---- models -----------------------------------------------------------------------------------------------


def model_entry(catalog: Catalog, model: ModelConfig) -> dict[str, Any]:
    """One model as OneInfer's clients read it: the `model` and `provider` values its chat route takes,
    what kind of model it is, its context length, and its prices per million tokens as decimal strings
    (exact, as the OpenAI dialect's model card writes them)."""
    return {
        "model": model.name,
        "display_name": model.display_name or model.name,
        "description": model.description or "",
        "providers": sorted({t.provider.name for t in catalog.targets(model)}),
        "kind": model.type,
        "context_length": model.context_window,
        "max_output_tokens": model.max_output,
        "pricing": price_card(model.pricing),
    }


async def list_models(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    catalog = services.pipeline.catalog
    data = [model_entry(catalog, m) for m in catalog.models if ctx.principal.may_use(m.name)]
    return json_response(_success(MODELS_MESSAGE, data), ctx.headers())


routes = [
    Route("/v1/ula/chat/completions", endpoint(render_error, chat_completions, "chat", "oneinfer"), methods=["POST"]),
    Route(
        "/v1/ula/oauth-authentication",
        endpoint(render_error, oauth_authentication, None, "oneinfer"),  # the key is in the query, not a header
        methods=["POST"],
    ),
    Route("/v1/ula/models", endpoint(render_error, list_models, "models:read", "oneinfer"), methods=["GET"]),
    *oneinfer_media.routes,
]


def _error_body(err: GatewayError) -> dict[str, Any]:
    return error_envelope(err, err.status)


DIALECT = Dialect(
    "oneinfer", routes, render_error, _error_body, ("/v1/ula/",), {CHAT.name: Rendering(_chat_result, _chat_stream)}
)
