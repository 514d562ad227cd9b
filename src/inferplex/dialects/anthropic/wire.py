"""The Anthropic Messages API request, as its wire schema: what `/v1/messages` accepts and rejects.

Kept apart from the translation logic (as Envoy AI Gateway keeps wire types per dialect). Validation here
gives the same 400s Anthropic gives (missing `max_tokens`, an unknown role or block type) naming the field;
fields this schema does not list are allowed and ignored, as a newer client may send them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from inferplex.canonical import MAX_COUNT


class _Open(BaseModel):
    # Strict, as Anthropic's API is: `true` is not a number there (nor 1 a boolean), so not here either.
    model_config = ConfigDict(extra="allow", strict=True)


class Base64Source(_Open):
    type: Literal["base64"]
    media_type: str
    data: str


class URLSource(_Open):
    type: Literal["url"]
    url: str


class TextSource(_Open):
    type: Literal["text"]
    media_type: str = "text/plain"
    data: str


ImageSource = Annotated[Base64Source | URLSource, Field(discriminator="type")]
DocumentSource = Annotated[Base64Source | URLSource | TextSource, Field(discriminator="type")]


class TextBlock(_Open):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None


class ImageBlock(_Open):
    type: Literal["image"]
    source: ImageSource
    cache_control: dict[str, Any] | None = None


class DocumentBlock(_Open):
    type: Literal["document"]
    source: DocumentSource
    title: str | None = None
    cache_control: dict[str, Any] | None = None


class ToolUseBlock(_Open):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None


ToolResultPart = Annotated[TextBlock | ImageBlock | DocumentBlock, Field(discriminator="type")]


class ToolResultBlock(_Open):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[ToolResultPart] | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = None


class ThinkingBlock(_Open):
    type: Literal["thinking"]
    thinking: str
    signature: str


class RedactedThinkingBlock(_Open):
    type: Literal["redacted_thinking"]
    data: str


Block = Annotated[
    TextBlock | ImageBlock | DocumentBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]


class MessageParam(_Open):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class ToolParam(_Open):
    """A client tool (`input_schema`), or a server tool (`type` such as `web_search_20250305`)."""

    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None
    cache_control: dict[str, Any] | None = None
    strict: bool | None = None

    @property
    def is_server_tool(self) -> bool:
        return self.type not in (None, "custom")

    @model_validator(mode="after")
    def _schema_present(self) -> ToolParam:
        if not self.is_server_tool and self.input_schema is None:
            raise ValueError("input_schema: Field required")
        return self


class ToolChoice(_Open):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Metadata(_Open):
    user_id: str | None = None


class CountTokensRequest(_Open):
    model: str = Field(min_length=1)
    messages: list[MessageParam]
    system: str | list[TextBlock] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoice | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1, le=MAX_COUNT)
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0, le=MAX_COUNT)
    metadata: Metadata | None = None
