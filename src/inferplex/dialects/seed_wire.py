"""The request bodies of the OpenAI-shaped routes as `/openapi.json` publishes them: the canonical request
plus the gateway's own options (every route) and what each seed dialect adds or relaxes (OneInfer, Unify).

The routes take the gateway's options out and check them (`gateway_request.parse_request`), and the seeds'
fields by hand (`oneinfer.to_canonical`, `unify.split_endpoint`), before the canonical `ChatRequest` (whose
errors they reuse) sees the body, so these models are not on the request path: they describe those fields
next to the canonical ones they extend, so the document cannot drift from `ChatRequest`.
tests/test_openapi.py holds their field names to the keys the dialects take out of the caller's JSON
(`gateway_request.GATEWAY_KEYS`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from inferplex.canonical import ChatRequest, EmbeddingRequest


class OptionFields(BaseModel):
    """The gateway's own options, accepted on every OpenAI-shaped route and never sent upstream."""

    provider: str | dict[str, Any] | None = Field(
        None, description="a provider name, or OpenRouter's preferences object (docs/routing.md)"
    )
    models: list[str] | None = Field(None, description="fallback models, in order (docs/routing.md)")
    endpoint_id: str | None = Field(None, description="a configured deployment id")
    region: str | None = Field(None, description="serve from a deployment in this region")
    timeout: float | None = Field(None, gt=0, description="seconds the gateway waits for the answer")

    tags: str | list[str] | None = Field(None, description="usage-log tags: a comma-separated string or a list")
    log_query_body: bool | None = Field(None, description="store the request in the usage log (default: operator's)")
    log_response_body: bool | None = Field(None, description="store the answer in the usage log (default: operator's)")
    drop_params: bool | None = Field(None, description="false: a parameter the provider cannot take is a 400")
    use_custom_keys: bool | None = Field(None, description="send the `x-provider-api-key` header's key upstream")
    signature: str | None = None
    processors: list[str | dict[str, Any]] | None = Field(None, description="request processors (docs/processors.md)")
    inferada: dict[str, Any] | None = Field(None, description="Inferada's spelling of processors and language")
    cache: dict[str, Any] | None = Field(
        None,
        description="the response cache, per request (LiteLLM's spelling): `no-cache`, `no-store`, `ttl`, `s-maxage`, "
        "`namespace`, `use-cache`, and `semantic`, `threshold` (docs/caching.md)",
    )


class GatewayChatRequest(ChatRequest, OptionFields):
    """`POST /v1/chat/completions` and `/api/v1/chat/completions`."""


class GatewayEmbeddingRequest(EmbeddingRequest, OptionFields):
    """`POST /v1/embeddings`."""

    provider: str | None = Field(None, description="a provider name")


class OneInferChatRequest(GatewayChatRequest):
    """`POST /v1/ula/chat/completions`: `model` optional (the provider's first chat model), `provider` a
    configured provider name (default `openai`), OneInfer's defaults (temperature 0.7, max_tokens 1000)."""

    model: str | None = Field(None, min_length=1)  # type: ignore[assignment]
    provider: str | None = Field(None, min_length=1)
    endpoint_id: str | None = Field(None, min_length=1, description="a configured deployment id")
    service_tier: Literal["default", "flex"] | None = None


class UnifyChatRequest(GatewayChatRequest):
    """`POST /v0/chat/completions`: `model` names an endpoint, `model@provider` (GET /v0/endpoints)."""

    model: str = Field(pattern=r"^.+@.+$", description="an endpoint, `model@provider`")


OPTION_FIELDS = frozenset(OptionFields.model_fields)
