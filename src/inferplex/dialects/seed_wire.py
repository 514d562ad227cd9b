"""The request bodies of the seed dialects (OneInfer, Unify) as pydantic models: the canonical request plus
what each seed adds or relaxes.

The seed routes validate their own fields by hand before the canonical `ChatRequest` (whose errors they
reuse) sees the body, so these models are not on the request path: they are the description of those
fields that `/openapi.json` publishes, next to the canonical fields they extend, so that the document
cannot drift from `ChatRequest`. Their field names are tested against the dialects' own handling.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from inferplex.canonical import ChatRequest


class OneInferChatRequest(ChatRequest):
    """`POST /v1/ula/chat/completions`: `model` optional (the provider's first chat model), `provider` a
    configured provider name (default `openai`), OneInfer's defaults (temperature 0.7, max_tokens 1000)."""

    model: str | None = Field(None, min_length=1)  # type: ignore[assignment]
    provider: str | None = Field(None, min_length=1)
    endpoint_id: str | None = Field(None, min_length=1, description="a configured deployment id")
    service_tier: Literal["default", "flex"] | None = None


class UnifyChatRequest(ChatRequest):
    """`POST /v0/chat/completions`: `model` names an endpoint, `model@provider`, plus the platform arguments
    (never forwarded upstream; docs/dialects.md#unify)."""

    model: str = Field(pattern=r"^.+@.+$", description="an endpoint, `model@provider` (GET /v0/endpoints)")
    drop_params: bool | None = None
    use_custom_keys: bool | None = Field(None, description="send the `x-provider-api-key` header's key upstream")
    tags: str | list[str] | None = Field(None, description="a comma-separated string or a list of strings")
    log_query_body: bool | None = None
    log_response_body: bool | None = None
    signature: str | None = None


UNIFY_PLATFORM_FIELDS = frozenset(set(UnifyChatRequest.model_fields) - set(ChatRequest.model_fields))
