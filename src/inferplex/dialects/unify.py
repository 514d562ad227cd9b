"""The Unify dialect: `POST /v0/chat/completions`, its catalogue (`GET /v0/endpoints`, `/v0/models`,
`/v0/providers`) and its observability routes (unify_usage.py), for clients written for Unify.

Unify is OpenAI's Chat Completions with two differences, so this module is a parser in front of the OpenAI
dialect's own renderers (`openai.RENDERS`, `openai.render_error`):

- `model` names an endpoint, `{model}@{provider}`. A model without a non-empty model and provider part is
  a 400 (`invalid_model`); a well-formed one the catalog does not serve is OpenAI's 404 (`model_not_found`
  or `provider_not_found`), since Unify defers to OpenAI's reference for everything it does not define.
- Platform arguments steer the gateway and are never forwarded upstream: they are the request's
  `GatewayOptions` (gateway_request.py, parsed as on /v1). `drop_params` is read by the capability planner,
  `region` by the router; `tags` (a comma-separated string or a list of strings) and `log_query_body` /
  `log_response_body` by the usage log (omitted, the operator's settings decide, not Unify's default of
  true, so a silent caller's bodies are kept only where the operator keeps bodies); `signature` is checked
  and not used;
  `use_custom_keys: true` sends the caller's own provider key, read from the `x-provider-api-key` header,
  to that provider for this request only (`CallInfo.caller_key`): it is never stored or logged.
  A platform argument of the wrong type is a 400 naming it.

An account's own upstreams, `name@custom`, and the keys they use are dialects/unify_custom.py (resolved for
the caller's account by custom_endpoints/, before the catalog); such a request always uses its stored key.

`GET /v0/endpoints` answers a JSON list of `model@provider` strings (what Unify's client `list_endpoints`
returns), filtered by the `model` and `provider` query parameters; `GET /v0/models` (`?provider=`) and
`GET /v0/providers` (`?model=`) answer the names in them, sorted. Each lists only what the caller may use.

Unify's own client for the chat route is the OpenAI SDK (unifyai wraps `openai.OpenAI` and re-raises its
`APIStatusError`s), so that route keeps OpenAI's error object. Every other `/v0` route is Unify's FastAPI
service, and fails as it does (unify_wire.py): a 422 `detail` list for bad parameters, `{"detail": "..."}`
otherwise.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.canonical import ChatRequest
from inferplex.context import Context
from inferplex.custom_endpoints.service import PROVIDER as CUSTOM
from inferplex.dialects import unify_custom
from inferplex.dialects import unify_usage as usage
from inferplex.dialects.answer import answer_chat
from inferplex.dialects.openai import DIALECT as OPENAI
from inferplex.dialects.openai import RENDERS, endpoint_rows, render_error
from inferplex.dialects.registry import Dialect
from inferplex.dialects.unify_wire import Params, render_unify_error
from inferplex.edge import endpoint, json_response, read_json
from inferplex.errors import InvalidRequest
from inferplex.gateway_request import parse_request
from inferplex.providers.base import CallerKey
from inferplex.services import Services

CUSTOM_KEY_HEADER = "x-provider-api-key"
# Only the OpenAI-compatible adapter knows how to use a caller's key; elsewhere it would be silently ignored.
CUSTOM_KEY_KINDS = frozenset({"openai"})


def split_endpoint(model: Any) -> tuple[str, str]:
    """`{model}@{provider}` into its two parts; anything else is a 400 naming `model`."""
    if isinstance(model, str):
        name, at, provider = model.rpartition("@")
        if at and name and provider:
            return name, provider
    raise InvalidRequest(
        f"Invalid value for 'model': {model!r}. Unify names an endpoint as `model@provider` "
        "(e.g. `gpt-4o-mini@openai`); GET /v0/endpoints lists them.",
        param="model",
        code="invalid_model",
    )


def _caller_key(request: Request, services: Services, model: str, provider: str) -> CallerKey:
    secret = request.headers.get(CUSTOM_KEY_HEADER, "").strip()
    if not secret:
        raise InvalidRequest(
            f"use_custom_keys is true but no provider key was sent: send it in the `{CUSTOM_KEY_HEADER}` header.",
            param="use_custom_keys",
            code="missing_provider_key",
        )
    resolved = services.pipeline.catalog.resolve(model, provider)
    if any(t.provider.kind not in CUSTOM_KEY_KINDS for t in resolved.targets):
        raise InvalidRequest(
            f"use_custom_keys is not supported for provider `{provider}` on this gateway.",
            param="use_custom_keys",
            code="custom_keys_not_supported",
        )
    return CallerKey(provider, secret)


async def chat_completions(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    raw = await read_json(request, services.max_body_bytes, services.json_limits)
    if not isinstance(raw, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    if "model" not in raw:
        raise InvalidRequest("Missing required parameter: 'model'.", param="model")
    model, provider = split_endpoint(raw["model"])
    chat = parse_request(ChatRequest, raw)
    if chat.options.use_custom_keys and provider != CUSTOM:  # `x@custom` always uses its stored key
        ctx.info.caller_key = _caller_key(request, services, model, provider)
    return await answer_chat(DIALECT, services, chat, ctx)


def _endpoints(request: Request, ctx: Context, *names: str) -> list[dict[str, Any]]:
    """The endpoints the caller may use, narrowed by the query parameters `names` (each an exact match)."""
    params = Params(request.query_params)
    wanted = {name: params.string(name) for name in names}
    params.done()
    services: Services = request.app.state.services
    return [
        r
        for r in endpoint_rows(services)
        if ctx.principal.may_use(r["model"]) and all(v is None or r[k] == v for k, v in wanted.items())
    ]


async def list_endpoints(request: Request, ctx: Context) -> Response:
    return json_response([r["id"] for r in _endpoints(request, ctx, "model", "provider")], ctx.headers())


async def list_models(request: Request, ctx: Context) -> Response:
    return json_response(sorted({r["model"] for r in _endpoints(request, ctx, "provider")}), ctx.headers())


async def list_providers(request: Request, ctx: Context) -> Response:
    return json_response(sorted({r["provider"] for r in _endpoints(request, ctx, "model")}), ctx.headers())


def _route(path: str, handler: Any, scope: str, methods: tuple[str, ...] = ("GET",)) -> Route:
    return Route(path, endpoint(render_unify_error, handler, scope, "unify"), methods=list(methods))


# Scopes: the catalogue and the endpoints' measurements are `models:read`; the query log, its tags and
# metrics, and the credits are the account's own traffic and money, read (or, for POST /v0/queries,
# written) with the scope that makes that traffic, `chat`.
routes = [
    Route("/v0/chat/completions", endpoint(render_error, chat_completions, "chat", "unify"), methods=["POST"]),
    _route("/v0/endpoints", list_endpoints, "models:read"),
    _route("/v0/models", list_models, "models:read"),
    _route("/v0/providers", list_providers, "models:read"),
    _route("/v0/endpoint-metrics", usage.get_endpoint_metrics, "models:read"),
    _route("/v0/queries", usage.get_queries, "chat"),
    _route("/v0/queries", usage.post_query, "chat", ("POST",)),
    _route("/v0/tags", usage.get_tags, "chat"),
    _route("/v0/metrics", usage.get_metrics, "chat"),
    _route("/v0/credits", usage.get_credits, "chat"),
    *unify_custom.routes,  # custom keys and endpoints
]

# Errors before a route runs take OpenAI's shape under /v0/, the chat route's (its client is the OpenAI SDK).
DIALECT = Dialect("unify", routes, render_error, OPENAI.error_body, ("/v0/",), RENDERS)
