"""OpenAI's Responses API answers as the gateway sends them (openai/openai-openapi: Response,
ResponseStreamEvent, ResponseItemList, TokenCountsResource, and the delete answer), for `/openapi.json`.

Output and input items are plain objects here: their exact shapes are OpenAI's own (the tests hold every
answer to OpenAI's published schemas, tests/responses_api/schema.py); what this module pins is the envelope
the gateway promises: the ids are its own (`resp_...`), and a response is stored, streamed and listed in it.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict


class ResponseError(TypedDict):
    code: str
    message: str


class IncompleteDetails(TypedDict):
    reason: Literal["max_output_tokens", "content_filter"]


class InputTokensDetails(TypedDict):
    cached_tokens: int


class OutputTokensDetails(TypedDict):
    reasoning_tokens: int


class ResponseUsage(TypedDict):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class Response(TypedDict):
    """A `response` object: the gateway's id, the request's options echoed, the output items, the usage."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]
    background: bool
    completed_at: int | None
    error: ResponseError | None
    incomplete_details: IncompleteDetails | None
    instructions: str | None
    max_output_tokens: int | None
    model: str
    output: list[dict[str, Any]]
    parallel_tool_calls: bool
    previous_response_id: str | None
    store: NotRequired[bool]
    temperature: float | None
    text: dict[str, Any]
    tool_choice: str | dict[str, Any]
    tools: list[dict[str, Any]]
    top_p: float | None
    truncation: NotRequired[str]
    usage: ResponseUsage | None
    metadata: dict[str, str]


class ResponseStreamEvent(TypedDict):
    """One event of a Responses stream (`event: <type>`): numbered from 0; the lifecycle events carry the
    response, the item and delta events their item and indexes."""

    type: str
    sequence_number: int
    response: NotRequired[Response]
    item: NotRequired[dict[str, Any]]
    item_id: NotRequired[str]
    output_index: NotRequired[int]
    content_index: NotRequired[int]
    summary_index: NotRequired[int]
    part: NotRequired[dict[str, Any]]
    delta: NotRequired[str]
    text: NotRequired[str]
    arguments: NotRequired[str]
    code: NotRequired[str | None]
    message: NotRequired[str]
    param: NotRequired[str | None]


class ResponseItemList(TypedDict):
    """A page of a response's input items (`GET /v1/responses/{id}/input_items`)."""

    object: Literal["list"]
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool


class ResponseDeleted(TypedDict):
    id: str
    object: Literal["response"]
    deleted: bool


class InputTokens(TypedDict):
    object: Literal["response.input_tokens"]
    input_tokens: int
