"""Every API route the gateway serves, per dialect, as `spec.Operation`s (the admin routes are in
`admin/openapi.py`). Request bodies are the models the routes validate with; answers are the dialects'
`*_responses.py` types. `tests/test_openapi.py` checks this table against the app's own router.
"""

from __future__ import annotations

import dataclasses

from inferplex.dialects import inferada_responses as ir
from inferplex.dialects import inferada_wire as iw
from inferplex.dialects import inferexchange_responses as ixr
from inferplex.dialects import oneinfer_responses as oir
from inferplex.dialects import openai_responses as oa
from inferplex.dialects import unify_custom as uc
from inferplex.dialects import unify_responses as ur
from inferplex.dialects.anthropic import responses as ar
from inferplex.dialects.anthropic.wire import CountTokensRequest, MessagesRequest
from inferplex.dialects.oneinfer import FORM_FIELDS
from inferplex.dialects.seed_wire import (
    GatewayChatRequest,
    GatewayEmbeddingRequest,
    OneInferChatRequest,
    UnifyChatRequest,
)
from inferplex.dialects.unify_wire import LogQuery
from inferplex.openapi import (
    console,
    console_views,
    files_batches,
    media_audio,
    media_images,
    media_seeds,
    media_storage,
    media_videos,
    observe,
    responses_api,
)
from inferplex.openapi.spec import Dialect, Operation, Param
from inferplex.serving.readiness import ReadyBody

OPENAI = Dialect("OpenAI", oa.OpenAIError)
ANTHROPIC = Dialect("Anthropic", ar.AnthropicError, ("bearer", "apiKey"))
ONEINFER = Dialect("OneInfer", oir.OneInferError)
INFERADA = Dialect("Inferada", ir.InferadaError)
UNIFY = Dialect("Unify", oa.OpenAIError)
UNIFY_PLATFORM = Dialect("Unify platform", ur.UnifyError)
INFEREXCHANGE = Dialect("InferExchange", ixr.InferExchangeError)
GATEWAY = Dialect("Gateway", oa.OpenAIError)

# The failures of a proxied call, and of a read-only catalogue route.
CHAT_ERRORS = (400, 401, 402, 403, 404, 413, 415, 422, 429, 500, 502, 503, 504)  # 402: a monthly spending cap
CATALOG_ERRORS = (400, 401, 403, 500, 503)
_FILTERS = (Param("model", description="only this public model"), Param("provider", description="only this provider"))
_STREAMS = "With `stream: true` the answer is server-sent events (`text/event-stream`), each `data:` frame one chunk."


# The response cache's per-request control and what the answer says of it (docs/caching.md), on every route
# whose answers may be cached.
CACHE_PARAMS = (
    Param("Cache-Control", where="header", description="`no-cache`: do not answer from the cache (the answer is "
          "still stored); `no-store`: store nothing; `max-age=N`: only an entry younger than N seconds"),
    Param("x-inferplex-cache", where="header", description="comma-separated: `bypass`, `use` (with the operator's "
          "default_off mode), `semantic`, `no-cache`, `no-store`, `namespace=NAME`, `ttl=SECONDS`, `threshold=0..1`"),
)  # fmt: skip
CACHE_HEADERS = {
    "x-inferplex-cache": {"description": "the cache's outcome when the model is cached",
                          "schema": {"type": "string", "enum": ["hit", "semantic-hit", "miss", "bypass"]}},
    "x-inferplex-cache-similarity": {"description": "a semantic hit's cosine similarity", "schema": {"type": "string"}},
    "x-inferplex-cache-entry": {"description": "the entry's id (for `POST /admin/cache/purge`)",
                                "schema": {"type": "string"}},
}  # fmt: skip


def _chat(dialect: Dialect, path: str, body: type[GatewayChatRequest] = GatewayChatRequest) -> Operation:
    return Operation(
        "post",
        path,
        "Chat completion",
        dialect,
        oa.ChatCompletion,
        CHAT_ERRORS,
        body,
        stream=oa.ChatCompletionChunk,
        description=_STREAMS,
        params=CACHE_PARAMS,
        headers=CACHE_HEADERS,
    )


def _models(dialect: Dialect, prefix: str) -> list[Operation]:
    return [
        Operation("get", f"{prefix}/models", "The models this key may use", dialect, oa.ModelList, CATALOG_ERRORS),
        Operation("get", prefix + "/models/{model_id}", "One model", dialect, oa.ModelCard, (*CATALOG_ERRORS, 404)),
    ]


_COUNT = {"schema": {"type": "string", "pattern": "^[0-9]+$"}}
# On every answer to a caller whose key was counted (docs/dialects.md, InferExchange).
_RATE_HEADERS = {
    "X-RateLimit-Limit": {"description": "requests per minute this route allows the key", **_COUNT},
    "X-RateLimit-Remaining": {"description": "how many more it would admit now", **_COUNT},
    "X-RateLimit-Reset": {"description": "unix time at which the key's bucket is full again", **_COUNT},
}


def _inferexchange() -> list[Operation]:
    """Chat as OpenAI's, the models list in InferExchange's own shape; both limited per route (a 429)."""
    ix, prefix = INFEREXCHANGE, "/api/v1"
    models = (*CATALOG_ERRORS, 429)
    return [
        dataclasses.replace(_chat(ix, prefix + "/chat/completions"), headers={**CACHE_HEADERS, **_RATE_HEADERS}),
        Operation("get", f"{prefix}/models", "The models this key may use, priced", ix, ixr.InferExchangeModelList,
                  models, headers=_RATE_HEADERS),
        Operation("get", prefix + "/models/{model_id}", "One model", ix, ixr.InferExchangeModel, (*models, 404),
                  headers=_RATE_HEADERS),
    ]  # fmt: skip


def _unify_platform() -> list[Operation]:
    """Unify's `/v0` routes but chat: FastAPI's errors, a 422 for a bad parameter (`UnifyError`)."""
    q, p = Param, UNIFY_PLATFORM
    read = (401, 403, 422, 500, 503)
    when = "`YYYY-MM-DD hh:mm:ss` or ISO 8601, UTC unless it names a zone"
    times = (q("start_time", description=when), q("end_time", description=when))
    listed = "comma-separated, or the parameter repeated"
    return [
        Operation("get", "/v0/endpoints", "Every `model@provider` endpoint", p, list[str], read, params=_FILTERS),
        Operation("get", "/v0/models", "The models served", p, list[str], read, params=_FILTERS[1:]),
        Operation("get", "/v0/providers", "The providers serving", p, list[str], read, params=_FILTERS[:1]),
        Operation(
            "get",
            "/v0/queries",
            "The query history, newest first, 100 per page",
            p,
            list[ur.QueryItem],
            read,
            params=(
                q("tags", description="any of these tags; " + listed),
                q("endpoints", description="only these `model@provider`; " + listed),
                *times,
                q("page_number", {"type": "string"}, description="from 1"),
                q("failures", description="false (default): successes; true: both; `only`: failures"),
            ),
        ),
        Operation(
            "post",
            "/v0/queries",
            "Log a query made elsewhere (never billed)",
            p,
            ur.QueryLogged,
            (400, 413, 415, *read),
            LogQuery,
        ),
        Operation("get", "/v0/tags", "Every tag on the caller's queries", p, list[str], read),
        Operation(
            "get",
            "/v0/metrics",
            "Per interval: requests, tokens, p50/p95 generation time and tokens per second",
            p,
            list[ur.MetricsInterval],
            read,
            params=(
                *times,
                q("models", description=listed),
                q("providers", description=listed),
                q("interval", description="seconds, default 300"),
                q("secondary_user_id", description="the `user` a chat request sent"),
            ),
        ),
        Operation(
            "get",
            "/v0/endpoint-metrics",
            "Time to first token and inter-token latency measured from traffic, and prices, per hour",
            p,
            list[ur.EndpointMetric],
            (*read, 404),
            params=(q("model", required=True), q("provider", required=True), *times),
        ),
        Operation("get", "/v0/credits", "The account's balance in USD", p, ur.Credits, read),
    ]


def _unify_custom() -> list[Operation]:
    """Unify's custom keys and endpoints (dialects/unify_custom.py): every argument a query parameter."""
    q, p, ok = Param, UNIFY_PLATFORM, uc.Info
    errs = (400, 401, 403, 404, 422, 500, 503)
    name, new = q("name", required=True), q("new_name", required=True)
    endpoint = (
        q("name", required=True, description="`name@custom`"),
        q("url", required=True, description="the upstream's OpenAI-compatible base URL; internal addresses refused"),
        q("key_name", required=True, description="a key stored with POST /v0/custom_api_key"),
        q("model_arg", description="the model name sent upstream; default the endpoint's name"),
        q("model_name", description="model_arg's earlier name"),
        q("provider", description="`custom` (a bare name then needs no @custom)"),
    )
    op, keys, endpoints = Operation, list[uc.CustomKey], list[uc.CustomEndpointItem]
    value = q("value", required=True)
    return [
        op("post", "/v0/custom_api_key", "Store a provider key, sealed", p, ok, errs, params=(name, value)),
        op("get", "/v0/custom_api_key", "A stored key, masked", p, uc.CustomKey, errs, params=(name,)),
        op("delete", "/v0/custom_api_key", "Delete a stored key", p, ok, errs, params=(name,)),
        op("get", "/v0/custom_api_key/list", "The account's keys, masked", p, keys, errs),
        op("post", "/v0/custom_api_key/rename", "Rename a stored key", p, ok, errs, params=(name, new)),
        op("post", "/v0/custom_endpoint", "Register an OpenAI-compatible upstream", p, ok, errs, params=endpoint),
        op("delete", "/v0/custom_endpoint", "Delete a custom endpoint", p, ok, errs, params=(name,)),
        op("get", "/v0/custom_endpoint/list", "The account's custom endpoints", p, endpoints, errs),
        op("post", "/v0/custom_endpoint/rename", "Rename a custom endpoint", p, ok, errs, params=(name, new)),
    ]


_FORM = {
    "type": "object",
    "properties": {name: {"type": "string"} for name in ("provider", "model", *FORM_FIELDS)},
    "description": "The JSON body's fields as form fields; `messages` (and a list `stop`) as JSON text.",
}


def _inferada() -> list[Operation]:
    """Inferada's standalone routes (dialects/inferada.py); `/v2/check` also takes LanguageTool's form."""
    errors = (400, 401, 403, 404, 413, 422, 500, 503)
    form = {
        "type": "object",
        "properties": {name: {"type": "string"} for name in iw.CheckRequest.model_fields},
        "description": "LanguageTool's parameters as form fields (booleans as text); `text` or `data`.",
    }
    return [
        Operation("post", "/v1/pii/analyse", "Find PII", INFERADA, ir.PiiAnalysis, errors, iw.PiiTextRequest),
        Operation("post", "/v1/pii/redact", "Replace PII with placeholders", INFERADA, ir.PiiRedaction, errors,
                  iw.PiiTextRequest),
        Operation("post", "/v1/pii/restore", "Put a redaction's originals back", INFERADA, ir.PiiRestoration,
                  errors, iw.PiiRestoreRequest),
        Operation("post", "/v1/language/correct", "Correct spelling", INFERADA, ir.LanguageCorrection, errors,
                  iw.CorrectRequest),
        Operation("post", "/v2/check", "Check a text (LanguageTool's API)", INFERADA, ir.LtCheck, errors,
                  iw.CheckRequest, form=form, form_media="application/x-www-form-urlencoded"),
        Operation("get", "/v2/languages", "The checker's languages (LanguageTool's API)", INFERADA,
                  list[ir.LtLanguageEntry], (401, 403, 500, 503)),
        Operation("get", "/v1/services", "The services this key reaches, per scope", INFERADA, ir.ServiceList,
                  (400, 401, 403, 500, 503), params=(Param("scope", description="only this scope"),)),
    ]  # fmt: skip


OPERATIONS: list[Operation] = [
    Operation("get", "/health", "Liveness", GATEWAY, oa.Health, (), authenticated=False),
    Operation(
        "get",
        "/health/ready",
        "Readiness",
        GATEWAY,
        ReadyBody,
        (503,),
        authenticated=False,
        description="200 while this process takes new requests; 503 (code `draining`) from the moment it is told "
        "to stop (SIGTERM), so that a load balancer takes it out of rotation before it stops accepting.",
    ),
    # OpenAI
    _chat(OPENAI, "/v1/chat/completions"),
    Operation(
        "post",
        "/v1/embeddings",
        "Embeddings",
        OPENAI,
        oa.EmbeddingList,
        (400, 401, 403, 404, 413, 415, 429, 500, 502, 503, 504),
        GatewayEmbeddingRequest,
        params=CACHE_PARAMS,
        headers=CACHE_HEADERS,
    ),
    *_models(OPENAI, "/v1"),
    *media_storage.OPERATIONS,
    *media_audio.OPERATIONS,
    *media_images.OPERATIONS,
    *media_videos.OPERATIONS,
    *responses_api.OPERATIONS,
    *files_batches.OPERATIONS,
    *observe.OPERATIONS,
    *console.OPERATIONS,
    *console_views.OPERATIONS,
    Operation(
        "get",
        "/v1/endpoints",
        "Every model@provider pair with prices and limits",
        OPENAI,
        oa.EndpointList,
        CATALOG_ERRORS,
        params=_FILTERS,
    ),
    # Anthropic
    Operation(
        "post",
        "/v1/messages",
        "Create a message",
        ANTHROPIC,
        ar.AnthropicMessage,
        (*CHAT_ERRORS, 529),
        MessagesRequest,
        stream=ar.StreamEvent,
        stream_done=False,
        description=_STREAMS + " Anthropic's event grammar.",
        params=CACHE_PARAMS,
        headers=CACHE_HEADERS,
    ),
    Operation(
        "post",
        "/v1/messages/count_tokens",
        "Count a request's input tokens",
        ANTHROPIC,
        ar.AnthropicTokenCount,
        (*CHAT_ERRORS, 529),
        CountTokensRequest,
    ),
    # OneInfer
    Operation(
        "post",
        "/v1/ula/chat/completions",
        "Chat completion (OneInfer's envelope)",
        ONEINFER,
        oir.OneInferCompletionEnvelope,
        (400, 401, 403, 413, 415, 422, 429, 500, 502, 503, 504),
        OneInferChatRequest,
        stream=oir.OneInferStreamChunk,
        form=_FORM,
        description=_STREAMS,
    ),
    Operation(
        "post",
        "/v1/ula/oauth-authentication",
        "Trade an API key for a short-lived bearer token",
        ONEINFER,
        oir.OneInferAccessToken,
        (403, 422, 500, 503),
        params=(Param("api_key", required=True, description="the API key; a bad one is a 403"),),
        description="No body. The token is the gateway's own (`/v1/auth/token`'s), with the key's scopes.",
        authenticated=False,
    ),
    Operation(
        "get",
        "/v1/ula/models",
        "The models this key may use (inferred: OneInfer's page for it was not found)",
        ONEINFER,
        oir.OneInferModelsEnvelope,
        CATALOG_ERRORS,
    ),
    *media_seeds.OPERATIONS,
    # Unify
    _chat(UNIFY, "/v0/chat/completions", UnifyChatRequest),
    *_unify_platform(),
    *_unify_custom(),
    # InferExchange
    *_inferexchange(),
    *_inferada(),
]
