"""What a batch is, as the routes and the worker see it: `Batch`, its line `Counts`, a line handed over
(`LineInput`) and a line's result (`LineResult`). Plain frozen records, no I/O (re-exported by
batches/service.py, which the routes import)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Dialect = Literal["openai", "anthropic"]

# OpenAI's batch statuses, which the rows keep as they are (Anthropic's `processing_status` is derived:
# validating/in_progress/finalizing -> in_progress, cancelling -> canceling, the rest -> ended).
Status = Literal["validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"]
ENDED: tuple[Status, ...] = ("failed", "completed", "expired", "cancelled")

# What one line came to: OpenAI's output file takes `succeeded`, its error file the rest; Anthropic's
# results name them `succeeded`, `errored`, `canceled`, `expired` (its own spellings, mapped by the route).
Outcome = Literal["succeeded", "errored", "cancelled", "expired"]

ENDPOINTS = ("/v1/chat/completions", "/v1/embeddings", "/v1/responses")


@dataclass(frozen=True, slots=True)
class Counts:
    """How many lines there are, and how many have ended each way; `processing` is the rest."""

    total: int = 0
    completed: int = 0  # succeeded
    failed: int = 0  # errored
    cancelled: int = 0
    expired: int = 0

    @property
    def processing(self) -> int:
        return self.total - self.completed - self.failed - self.cancelled - self.expired


@dataclass(frozen=True, slots=True)
class LineInput:
    """One request of a batch as the route hands it over (Anthropic's `requests[]`, already translated to the
    endpoint's canonical body: for `/v1/chat/completions` the JSON `parse_request(ChatRequest, ...)` takes)."""

    custom_id: str
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LineResult:
    """One line's result. `status_code` and `body` are what the endpoint answered (the OpenAI-shaped answer,
    or OpenAI's error object `{"error": {...}}` for a failure); `error` is set instead for a line that was
    never run (`{"code": "batch_cancelled" | "batch_expired", "message": ...}`), with `status_code` 0.
    `request_id` is the gateway's request id of the call that produced it."""

    line_no: int
    custom_id: str
    outcome: Outcome
    status_code: int
    body: dict[str, Any] | None
    error: dict[str, Any] | None = None
    request_id: str | None = None
    cost_micros: int = 0


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch as its routes show it. Timestamps are Unix seconds (ints, as OpenAI's); None until reached."""

    id: str
    dialect: Dialect
    owner: str
    endpoint: str
    input_file_id: str | None
    completion_window: str
    status: Status
    counts: Counts
    created_at: int
    expires_at: int
    metadata: dict[str, str] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    # OpenAI's `errors.data`: why validation failed ({"code", "message", "param", "line"}), else None.
    errors: list[dict[str, Any]] | None = None
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    ended_at: int | None = None  # when it reached any of ENDED (Anthropic's `ended_at`)
    cost_micros: int = 0  # what its settled lines were charged so far
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.status in ENDED
