"""What the OneInfer dialect answers, as TypedDicts: its envelope, success and error (see `oneinfer.py`).

Described for `/openapi.json` and for the tests that validate real answers; the routes build plain dicts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict


class OneInferApiDetails(TypedDict):
    api_status: Literal["success", "error"]
    api_message: str


@with_config(ConfigDict(extra="forbid"))
class OneInferEmpty(TypedDict):
    """`{}`: the half of the envelope that does not apply (`data` of an error, `error` of a success)."""


class OneInferErrorDetail(TypedDict):
    status: int
    code: str | None
    type: str
    message: str
    param: str | None


class OneInferError(TypedDict):
    api_details: OneInferApiDetails
    data: OneInferEmpty
    error: OneInferErrorDetail


class OneInferUsage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class OneInferCompletion(TypedDict):
    id: str
    created: int
    text: str
    finish_reason: str
    provider: str | None
    model: str | None
    usage: OneInferUsage
    latency_ms: int
    is_context_length_full: bool


class OneInferCompletionEnvelope(TypedDict):
    api_details: OneInferApiDetails
    data: OneInferCompletion
    error: OneInferEmpty


class OneInferStreamChunk(TypedDict):
    """One `data:` frame of a stream: `chunk_<n>` with text, then `chunk_final` with the finish reason."""

    id: str
    text: str
    finish_reason: str | None


@with_config(ConfigDict(extra="forbid"))
class OneInferAccessToken(TypedDict):
    """`POST /v1/ula/oauth-authentication`: OneInfer's one published key, outside the envelope; the token is
    the gateway's own signed `ipxt.` token (accounts/tokens.py)."""

    access_token: str


class OneInferModelPricing(TypedDict):
    """USD per million tokens, as decimal strings (the OpenAI dialect's model card writes them so too)."""

    currency: Literal["USD"]
    unit: Literal["per_million_tokens"]
    input: str
    output: str
    cached_input: str | None
    free: bool


class OneInferModel(TypedDict):
    """One catalogue model the caller may use: `model` and any of `providers` are what the chat route's
    `model` and `provider` fields take."""

    model: str
    display_name: str
    description: str
    providers: list[str]
    kind: Literal["chat", "embedding", "image", "speech", "transcription", "video"]  # config ModelConfig.type
    context_length: int | None
    max_output_tokens: int | None
    pricing: OneInferModelPricing


class OneInferModelsEnvelope(TypedDict):
    """`GET /v1/ula/models` (inferred: OneInfer links a "GET Models" page that was never found)."""

    api_details: OneInferApiDetails
    data: list[OneInferModel]
    error: OneInferEmpty
