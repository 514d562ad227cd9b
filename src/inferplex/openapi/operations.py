"""Every API route the gateway serves, per dialect, as `spec.Operation`s (the admin routes are in
`admin/openapi.py`). Request bodies are the models the routes validate with; answers are the dialects'
`*_responses.py` types. `tests/test_openapi.py` checks this table against the app's own router.
"""

from __future__ import annotations

from inferplex.dialects import oneinfer_responses as oir
from inferplex.dialects import openai_responses as oa
from inferplex.dialects.anthropic import responses as ar
from inferplex.dialects.anthropic.wire import CountTokensRequest, MessagesRequest
from inferplex.dialects.oneinfer import FORM_FIELDS
from inferplex.dialects.seed_wire import (
    GatewayChatRequest,
    GatewayEmbeddingRequest,
    OneInferChatRequest,
    UnifyChatRequest,
)
from inferplex.openapi.spec import Dialect, Operation, Param

OPENAI = Dialect("OpenAI", oa.OpenAIError)
ANTHROPIC = Dialect("Anthropic", ar.AnthropicError, ("bearer", "apiKey"))
ONEINFER = Dialect("OneInfer", oir.OneInferError)
UNIFY = Dialect("Unify", oa.OpenAIError)
INFEREXCHANGE = Dialect("InferExchange", oa.OpenAIError)
GATEWAY = Dialect("Gateway", oa.OpenAIError)

# The failures of a proxied call, and of a read-only catalogue route.
CHAT_ERRORS = (400, 401, 403, 404, 413, 415, 422, 429, 500, 502, 503, 504)
CATALOG_ERRORS = (400, 401, 403, 500, 503)
_FILTERS = (Param("model", description="only this public model"), Param("provider", description="only this provider"))
_STREAMS = "With `stream: true` the answer is server-sent events (`text/event-stream`), each `data:` frame one chunk."


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
    )


def _models(dialect: Dialect, prefix: str) -> list[Operation]:
    return [
        Operation("get", f"{prefix}/models", "The models this key may use", dialect, oa.ModelList, CATALOG_ERRORS),
        Operation("get", prefix + "/models/{model_id}", "One model", dialect, oa.ModelCard, (*CATALOG_ERRORS, 404)),
    ]


_FORM = {
    "type": "object",
    "properties": {name: {"type": "string"} for name in ("provider", "model", *FORM_FIELDS)},
    "description": "The JSON body's fields as form fields; `messages` (and a list `stop`) as JSON text.",
}

OPERATIONS: list[Operation] = [
    Operation("get", "/health", "Liveness", GATEWAY, oa.Health, (), authenticated=False),
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
    ),
    *_models(OPENAI, "/v1"),
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
        "/v1/ula/generate-image",
        "Image generation (not yet supported)",
        ONEINFER,
        None,
        (401, 403, 500, 501, 503),
    ),
    Operation(
        "post",
        "/v1/ula/generate-video",
        "Video generation (not yet supported)",
        ONEINFER,
        None,
        (401, 403, 500, 501, 503),
    ),
    # Unify
    _chat(UNIFY, "/v0/chat/completions", UnifyChatRequest),
    Operation(
        "get", "/v0/endpoints", "Every `model@provider` endpoint", UNIFY, list[str], CATALOG_ERRORS, params=_FILTERS
    ),
    # InferExchange
    _chat(INFEREXCHANGE, "/api/v1/chat/completions"),
    *_models(INFEREXCHANGE, "/api/v1"),
]
