"""OpenAI's Responses API request (`POST /v1/responses`, the `CreateResponse` schema) as one pydantic model.

The model checks what every path needs the same way, the types of the top-level fields and the rules
OpenAI enforces before running anything (`background` needs `store`, `stream_options` needs `stream`,
`previous_response_id` and `conversation` exclude each other), and nothing more: input items and tools stay
plain dicts. Two roads leave from here. The native pass-through (responses_api/native.py) forwards the
request as the caller wrote it to an upstream that speaks Responses, hosted tools and all, so parsing must
not refuse what only a translated path cannot do; the translation (responses_api/translate.py) checks items
and tools one by one as it converts them, and its 400s name the item (`input[3].content[0].type`).

Unknown top-level fields are kept (`extra="allow"`), as on chat, and the gateway's own options (routing,
processors, tags, ...) are taken out by `gateway_request.parse_request` before the model sees the body:
`parse(data)` below does exactly that.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from inferplex.canonical import MAX_COUNT, _field_error
from inferplex.gateway_request import GatewayRequest, parse_request

# Tools the model runs on OpenAI's side (search, code, computers, image generation, MCP servers, shells):
# an upstream reached through the chat translation cannot run them, so the translated path refuses them by
# name (400 on `tools[i].type`); the native pass-through forwards them. `function` is the one tool type the
# translation carries; anything else unknown is refused the same way.
HOSTED_TOOL_TYPES = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "computer",
        "computer_use",
        "computer_use_preview",
        "computer-use-preview",
        "image_generation",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "tool_search",
        "namespace",
        "programmatic_tool_calling",
        "custom",
    }
)


# OpenAI's own bounds (CreateResponse: `max_output_tokens` minimum 16; `Metadata`: at most 16 pairs, keys up
# to 64 characters, values up to 512), enforced here so a request OpenAI refuses is refused the same way on
# every path, whichever upstream would have run it.
MIN_OUTPUT_TOKENS = 16
METADATA_PAIRS = 16
METADATA_KEY_CHARS = 64
METADATA_VALUE_CHARS = 512


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class TextFormat(_Open):
    """`text.format`: plain text, JSON mode, or Structured Outputs (the schema inline, not under
    `json_schema` as chat nests it)."""

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(None, min_length=1, max_length=64)
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    description: str | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema_named(self) -> TextFormat:
        if self.type == "json_schema" and (self.name is None or self.schema_ is None):
            raise _field_error("text.format", "text.format of type 'json_schema' needs 'name' and 'schema'")
        return self


class TextConfig(_Open):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(_Open):
    """`reasoning`: `effort` is kept as a string here (OpenAI adds levels; the translation maps the known
    ones and refuses the rest), `summary` asks for reasoning summaries in the output."""

    effort: str | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None  # deprecated spelling of summary


class StreamOptions(_Open):
    include_obfuscation: bool | None = None


class ResponsesRequest(_Open):
    """`POST /v1/responses`'s body. `store` is True unless the caller sends false (null means the default)."""

    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: int | None = Field(None, le=MAX_COUNT)
    max_tool_calls: int | None = Field(None, ge=0, le=MAX_COUNT)
    truncation: Literal["auto", "disabled"] | None = None
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool | None = None
    service_tier: str | None = None
    include: list[str] | None = None
    store: bool = True
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    background: bool | None = None
    previous_response_id: str | None = Field(None, min_length=1)
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = Field(None, max_length=64)
    user: str | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    top_logprobs: int | None = Field(None, ge=0, le=20)

    @field_validator("input", mode="before")
    @classmethod
    def _input_shape(cls, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        if not isinstance(value, list):
            raise _field_error("input", "input must be a string or a list of input items")
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise _field_error(f"input[{i}]", "an input item must be an object")
        return value

    @field_validator("max_output_tokens")
    @classmethod
    def _output_floor(cls, value: int | None) -> int | None:
        if value is not None and value < MIN_OUTPUT_TOKENS:
            raise _field_error(
                "max_output_tokens",
                "Invalid 'max_output_tokens': integer below minimum value. "
                f"Expected a value >= {MIN_OUTPUT_TOKENS}, but got {value} instead.",
            )
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_bounds(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return value
        if len(value) > METADATA_PAIRS:
            raise _field_error(
                "metadata",
                f"Invalid 'metadata': too many properties. Expected an object with at most {METADATA_PAIRS} "
                f"properties, but got an object with {len(value)} properties instead.",
            )
        for key, text in value.items():
            if len(key) > METADATA_KEY_CHARS:
                raise _field_error(
                    "metadata",
                    f"Invalid 'metadata': key {key[:METADATA_KEY_CHARS]!r}... is too long. Expected a key with "
                    f"maximum length {METADATA_KEY_CHARS}, but got a key with length {len(key)} instead.",
                )
            if len(text) > METADATA_VALUE_CHARS:
                raise _field_error(
                    f"metadata.{key}",
                    f"Invalid 'metadata.{key}': string too long. Expected a string with maximum length "
                    f"{METADATA_VALUE_CHARS}, but got a string with length {len(text)} instead.",
                )
        return value

    @field_validator("store", mode="before")
    @classmethod
    def _store_default(cls, value: Any) -> Any:
        return True if value is None else value

    @model_validator(mode="after")
    def _consistency(self) -> ResponsesRequest:
        if self.stream_options is not None and not self.stream:
            raise _field_error("stream_options", "stream_options is only allowed when stream is true")
        if self.background and not self.store:
            raise _field_error("background", "background mode requires store to be true")
        if self.previous_response_id is not None and self.conversation is not None:
            raise _field_error("previous_response_id", "previous_response_id cannot be used together with conversation")
        if isinstance(self.tool_choice, str) and self.tool_choice not in ("none", "auto", "required"):
            raise _field_error("tool_choice", "tool_choice must be 'none', 'auto', 'required' or an object")
        if isinstance(self.input, list) and not self.input:
            raise _field_error("input", "input must not be an empty list")
        return self

    @property
    def streams(self) -> bool:
        return bool(self.stream)

    @property
    def summary(self) -> str | None:
        """The reasoning summary asked for (`summary`, or its deprecated spelling), None when none is."""
        if self.reasoning is None:
            return None
        return self.reasoning.summary or self.reasoning.generate_summary


def parse(data: Any) -> GatewayRequest[ResponsesRequest]:
    """A decoded `/v1/responses` body as a `GatewayRequest`: the gateway's options taken out and checked as on
    chat, the rest validated, or the 400 naming the first bad field."""
    return parse_request(ResponsesRequest, data)
