"""What the OpenAI dialect answers, as TypedDicts: the response half of its wire schema.

The routes build plain dicts (a dict costs nothing to pass along, and most of a chat completion is the
provider's own answer), so these types are a description, not a constructor: `inferplex.openapi` turns them
into the JSON schemas of `/openapi.json`, and the tests validate real responses against them. Keys the
gateway always sends are required; keys a provider may add (`service_tier`, `annotations`, ...) are allowed,
as OpenAI's clients ignore what they do not know. The Unify and InferExchange routes answer with these too.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict


class OpenAIErrorDetail(TypedDict):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIError(TypedDict):
    """Every failure on an OpenAI-shaped route: all four keys, always (README, "Errors")."""

    error: OpenAIErrorDetail


class Timings(TypedDict):
    total_ms: float
    upstream_ms: float
    gateway_ms: float
    ttft_ms: NotRequired[float]
    tokens_per_second: NotRequired[float]
    queued_ms: NotRequired[float]
    processors_ms: NotRequired[float]


class Cost(TypedDict):
    currency: Literal["USD"]
    micros: int


class ResponseFunctionCall(TypedDict):
    name: str
    arguments: str


class ResponseToolCall(TypedDict):
    id: str
    type: str
    function: ResponseFunctionCall


class AssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: str | None
    refusal: NotRequired[str | None]
    tool_calls: NotRequired[list[ResponseToolCall]]
    reasoning_content: NotRequired[str]


class CompletionChoice(TypedDict):
    index: int
    message: AssistantMessage
    finish_reason: str | None
    logprobs: NotRequired[Any]


class CompletionUsage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: NotRequired[CompletionUsage]
    system_fingerprint: NotRequired[str | None]
    timings: Timings
    cost: NotRequired[Cost]


class ChunkDelta(TypedDict, total=False):
    role: str
    content: str | None
    refusal: str | None
    reasoning_content: str
    tool_calls: list[dict[str, Any]]


class ChunkChoice(TypedDict):
    index: int
    delta: ChunkDelta
    finish_reason: str | None
    logprobs: NotRequired[Any]


class ChatCompletionChunk(TypedDict):
    """One `data:` frame of a stream (`stream: true`); the last before `[DONE]` carries timings and cost."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: NotRequired[CompletionUsage | None]
    timings: NotRequired[Timings]
    cost: NotRequired[Cost]


class Embedding(TypedDict):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str  # a string when encoding_format is base64


class EmbeddingUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(TypedDict):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: NotRequired[EmbeddingUsage]
    timings: Timings
    cost: NotRequired[Cost]


class ModelPricing(TypedDict):
    currency: Literal["USD"]
    unit: Literal["per_million_tokens"]
    input: str
    output: str
    cached_input: str | None
    free: bool


class ModelCapabilities(TypedDict):
    tools: bool
    vision: bool
    json_schema: bool
    streaming: bool


class ModelCard(TypedDict):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    display_name: str
    description: str
    type: Literal["chat", "embedding"]
    context_window: int | None
    max_output_tokens: int | None
    capabilities: ModelCapabilities
    pricing: ModelPricing
    providers: list[str]
    locations: list[Literal["on_premises", "cloud"]]


class ModelList(TypedDict):
    object: Literal["list"]
    data: list[ModelCard]


class EndpointLimits(TypedDict):
    rpm: int | None
    tpm: int | None
    max_concurrent: int | None


class EndpointRow(TypedDict):
    id: str
    object: Literal["endpoint"]
    model: str
    provider: str
    upstream_model: str
    location: Literal["on_premises", "cloud"]
    type: Literal["chat", "embedding"]
    context_window: int | None
    max_output_tokens: int | None
    pricing: ModelPricing
    limits: EndpointLimits


class EndpointList(TypedDict):
    object: Literal["list"]
    data: list[EndpointRow]


class Health(TypedDict):
    status: Literal["ok"]
