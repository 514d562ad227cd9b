"""The canonical responses: what adapters return and the pipeline, processors and dialects read, as TypedDicts.

Requests are pydantic models (`canonical.py`) because they need validation with field names in the errors;
responses are built by our own code or parsed from an OpenAI-compatible upstream, and serialised once with
orjson, so they stay plain dicts (docs/architecture.md, "Choices"). These types describe those dicts to mypy
and cost nothing at run time: a TypedDict is a dict.

Every key is optional (`total=False`): an OpenAI-compatible upstream's answer is passed along as it came,
and it may leave out what it does not support, so readers use `.get`. Keys an upstream adds that are not
listed here (`service_tier`, `annotations`, ...) still pass through; a type only names what the gateway
itself builds or reads. What the gateway promises its callers on the wire (which keys are always there) is
the dialects' business: `dialects/openai_responses.py` describes that for `/openapi.json`.

The gateway's own additions are here too: `timings` and `cost` (added by the dialect when it renders),
`reasoning_content` (reasoning models, as DeepSeek and vLLM name it), Anthropic's `thinking_blocks` and a
stream's `reasoning_signature` (so a signed thinking block survives a round trip), `cache_creation_input_tokens`
(cache writes, priced apart), and the processors' `processors` / `inferada` blocks.
"""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict


class FunctionCall(TypedDict, total=False):
    name: str
    arguments: str  # JSON text; in a stream, a piece of it per chunk


class ToolCall(TypedDict, total=False):
    index: int  # in a stream's delta only: which call a piece belongs to
    id: str
    type: str
    function: FunctionCall
    extra_content: dict[str, Any]  # Gemini's thought signature, as Google's OpenAI layer sends it


class Message(TypedDict, total=False):
    """An assistant message: `content` is None only when the answer is tool calls alone."""

    role: str
    content: str | None
    refusal: str | None
    tool_calls: list[ToolCall]
    reasoning_content: str
    thinking_blocks: list[dict[str, Any]]  # Anthropic's thinking blocks, signatures included


class Choice(TypedDict, total=False):
    index: int
    message: Message
    logprobs: Any
    finish_reason: str | None
    stop_reason: str  # the stop sequence that ended the answer (as vLLM reports it; Anthropic's too)


class Delta(TypedDict, total=False):
    role: str
    content: str | None
    refusal: str | None
    reasoning_content: str
    reasoning_signature: str  # the signature that closes a thinking block (Anthropic, Bedrock)
    tool_calls: list[ToolCall]


class ChunkChoice(TypedDict, total=False):
    index: int
    delta: Delta
    logprobs: Any
    finish_reason: str | None
    stop_reason: str


class PromptTokensDetails(TypedDict, total=False):
    cached_tokens: int  # cache reads, part of prompt_tokens
    cache_write_tokens: int  # cache writes, where an upstream reports them here
    audio_tokens: int


class CompletionTokensDetails(TypedDict, total=False):
    reasoning_tokens: int
    audio_tokens: int
    accepted_prediction_tokens: int
    rejected_prediction_tokens: int


class Usage(TypedDict, total=False):
    """A chat completion's usage, or an embeddings list's (which has prompt and total tokens only)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None
    completion_tokens_details: CompletionTokensDetails | None
    cache_creation_input_tokens: int  # cache writes (Anthropic, Bedrock), part of prompt_tokens, priced apart
    cache_read_input_tokens: int  # cache reads, as an Anthropic-style upstream names them


class Timings(TypedDict, total=False):
    """The gateway's `timings` (timings.py): milliseconds, and the decode speed."""

    total_ms: float
    upstream_ms: float
    gateway_ms: float
    ttft_ms: float
    tokens_per_second: float
    queued_ms: float
    processors_ms: float
    cache: str  # the response cache's outcome (docs/caching.md)
    cache_ms: float


class Cost(TypedDict):
    """What a request cost its account, in integer micro-units (accounts/guard.py, `add_cost`)."""

    currency: str
    micros: int


class ChatCompletion(TypedDict, total=False):
    id: str
    object: str  # "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage | None
    system_fingerprint: str | None
    service_tier: str  # the tier that served: the upstream's, or the gateway's flex tier (routing/attempt.py)
    timings: Timings
    cost: Cost
    processors: dict[str, Any]  # what each processor did (processors/chain.py)
    inferada: dict[str, Any]  # the same, for a request in Inferada's spelling


class ChatCompletionChunk(TypedDict, total=False):
    """One chunk of a stream. The last one has no choices and carries the usage."""

    id: str
    object: str  # "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None
    system_fingerprint: str | None
    service_tier: str  # the tier that served: the upstream's, or the gateway's flex tier (routing/attempt.py)
    timings: Timings
    cost: Cost
    processors: dict[str, Any]
    inferada: dict[str, Any]


class Embedding(TypedDict, total=False):
    object: str  # "embedding"
    index: int
    embedding: list[float] | str  # a base64 string when the request's encoding_format is base64


class EmbeddingList(TypedDict, total=False):
    object: str  # "list"
    data: list[Embedding]
    model: str
    usage: Usage | None
    timings: Timings
    cost: Cost
