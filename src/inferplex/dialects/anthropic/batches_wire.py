"""Anthropic's Message Batches shapes (the `anthropic` SDK's types/messages/: MessageBatch, its request counts,
the individual results, DeletedMessageBatch), as the routes of `batches.py` take and answer them.

The create body is a pydantic model, each `params` the `/v1/messages` request model itself, so a bad one is
refused with its path (`requests[1].params.max_tokens`) and `/openapi.json` shows the whole request; the
answers are TypedDicts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from inferplex.dialects.anthropic.responses import AnthropicError, AnthropicMessage
from inferplex.dialects.anthropic.wire import MessagesRequest

MAX_REQUESTS = 100_000  # Anthropic's bound on one batch


class BatchRequestItem(BaseModel):
    """One request of a batch: `params` is a Messages API request (without `stream`)."""

    model_config = ConfigDict(extra="forbid")
    custom_id: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    params: MessagesRequest


class CreateMessageBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requests: list[BatchRequestItem] = Field(min_length=1, max_length=MAX_REQUESTS)


class MessageBatchRequestCounts(TypedDict):
    processing: int
    succeeded: int
    errored: int
    canceled: int
    expired: int


class MessageBatch(TypedDict):
    """A Message Batch. Times are RFC 3339 strings (UTC); `results_url` is set once processing has ended."""

    id: str
    type: Literal["message_batch"]
    processing_status: Literal["in_progress", "canceling", "ended"]
    request_counts: MessageBatchRequestCounts
    created_at: str
    expires_at: str
    ended_at: str | None
    cancel_initiated_at: str | None
    archived_at: str | None
    results_url: str | None


class MessageBatchList(TypedDict):
    data: list[MessageBatch]
    has_more: bool
    first_id: str | None
    last_id: str | None


class DeletedMessageBatch(TypedDict):
    id: str
    type: Literal["message_batch_deleted"]


class MessageBatchSucceededResult(TypedDict):
    type: Literal["succeeded"]
    message: AnthropicMessage


class MessageBatchErroredResult(TypedDict):
    type: Literal["errored"]
    error: AnthropicError  # {type: error, error: {type, message}}


class MessageBatchCanceledResult(TypedDict):
    type: Literal["canceled"]


class MessageBatchExpiredResult(TypedDict):
    type: Literal["expired"]


class MessageBatchIndividualResponse(TypedDict):
    """One line of the results (`GET .../{id}/results`, JSON Lines)."""

    custom_id: str
    result: (
        MessageBatchSucceededResult | MessageBatchErroredResult | MessageBatchCanceledResult | MessageBatchExpiredResult
    )
