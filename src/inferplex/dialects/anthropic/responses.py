"""What the Anthropic dialect answers, as TypedDicts: the response half of its wire schema
(`wire.py` is the request half).

Built by `translate.py` as plain dicts; these types describe them for `/openapi.json` and
for the tests that validate real answers against that description.
"""

from __future__ import annotations

from typing import Any, Literal

from typing_extensions import TypedDict


class AnthropicErrorDetail(TypedDict):
    type: str
    message: str


class AnthropicError(TypedDict):
    """Anthropic's error shape, used for every failure on `/v1/messages...` (and an `event: error` frame)."""

    type: Literal["error"]
    error: AnthropicErrorDetail


class AnthropicText(TypedDict):
    type: Literal["text"]
    text: str


class AnthropicThinking(TypedDict):
    type: Literal["thinking"]
    thinking: str
    signature: str


class AnthropicRedactedThinking(TypedDict):
    type: Literal["redacted_thinking"]
    data: str


class AnthropicToolUse(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class AnthropicUsage(TypedDict):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


class AnthropicMessage(TypedDict):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[AnthropicText | AnthropicThinking | AnthropicRedactedThinking | AnthropicToolUse]
    stop_reason: str | None
    stop_sequence: str | None
    usage: AnthropicUsage


class AnthropicTokenCount(TypedDict):
    input_tokens: int


# ---- the event grammar of a stream (`stream: true`): each SSE frame's `data`, named by its `event:` line ----


class MessageStartEvent(TypedDict):
    type: Literal["message_start"]
    message: AnthropicMessage


class ContentBlockStartEvent(TypedDict):
    type: Literal["content_block_start"]
    index: int
    content_block: AnthropicText | AnthropicThinking | AnthropicRedactedThinking | AnthropicToolUse


class ContentBlockDeltaEvent(TypedDict):
    type: Literal["content_block_delta"]
    index: int
    delta: dict[str, Any]  # text_delta, thinking_delta, signature_delta, input_json_delta


class ContentBlockStopEvent(TypedDict):
    type: Literal["content_block_stop"]
    index: int


class MessageDeltaBody(TypedDict):
    stop_reason: str | None
    stop_sequence: str | None


class MessageDeltaEvent(TypedDict):
    type: Literal["message_delta"]
    delta: MessageDeltaBody
    usage: AnthropicUsage


class MessageStopEvent(TypedDict):
    type: Literal["message_stop"]


class PingEvent(TypedDict):
    type: Literal["ping"]


StreamEvent = (
    MessageStartEvent
    | ContentBlockStartEvent
    | ContentBlockDeltaEvent
    | ContentBlockStopEvent
    | MessageDeltaEvent
    | MessageStopEvent
    | PingEvent
    | AnthropicError
)
