"""`BatchService` (`services.batches`): create, read, list, cancel and delete batches, and read their results.

The routes of both dialects (dialects/openai_batches.py, dialects/anthropic/batches.py) are thin over this:
they parse their wire shapes, call one method, and render the `Batch` (and, for Anthropic, the `LineResult`s)
in their own shape. Everything a batch does after it is created is the worker's (batches/worker.py): it runs
the lines through the pipeline as the batch's owner and settles each line's charge exactly once.

A batch is its owner's (the caller's account, else its key: media_store.store.owner_of): another owner's
batch, or a deleted one, is a 404. Ids are `batch_<hex>` (OpenAI) and `msgbatch_<hex>` (Anthropic).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from inferplex.context import Context

Dialect = Literal["openai", "anthropic"]

# OpenAI's batch statuses, which the rows keep as they are (Anthropic's `processing_status` is derived:
# validating/in_progress/finalizing -> in_progress, cancelling -> canceling, the rest -> ended).
Status = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
]
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


class BatchService:
    """The interface the routes use. Every method raises a `GatewayError` (rendered in the caller's dialect by
    its route): NotFound for an unknown, another owner's or a deleted batch; InvalidRequest for bad input."""

    async def create(
        self,
        ctx: Context,
        dialect: Dialect,
        endpoint: str,
        lines_source: str | Sequence[LineInput],
        completion_window: str = "24h",
        metadata: dict[str, str] | None = None,
    ) -> Batch:
        """A new batch of the caller's (`ctx.principal`): `lines_source` is an input file id (OpenAI: a file of
        the caller's in the media store, one JSON request per line: `custom_id`, `method` POST, `url` ==
        `endpoint`, `body`), or the lines themselves (Anthropic). The lines are validated at once: a file whose
        lines do not hold (bad JSON, duplicate custom_id, another url...) makes a batch with status `failed` and
        `errors` (as OpenAI does); lines handed over directly that do not hold raise InvalidRequest. An
        unknown `endpoint` or an input file that is not the caller's raises InvalidRequest / NotFound."""
        raise NotImplementedError

    async def get(self, ctx: Context, batch_id: str) -> Batch:
        """The caller's batch (NotFound otherwise)."""
        raise NotImplementedError

    async def page(
        self,
        ctx: Context,
        dialect: Dialect,
        *,
        after: str | None = None,
        before: str | None = None,
        limit: int = 20,
    ) -> tuple[list[Batch], bool]:
        """The caller's batches of `dialect`, newest first: `limit` of them after the batch `after` (older than
        it) or before the batch `before` (newer than it), and whether more follow in that direction. An
        unknown `after`/`before` raises InvalidRequest."""
        raise NotImplementedError

    async def cancel(self, ctx: Context, batch_id: str) -> Batch:
        """Cancel the caller's batch: `cancelling` while lines in flight finish, then `cancelled`, with files
        for what finished (the lines never run are `cancelled` results). An ended batch is returned as is."""
        raise NotImplementedError

    def results(self, ctx: Context, batch_id: str) -> AsyncIterator[LineResult]:
        """Every line's result in line order (Anthropic's results stream). Raise InvalidRequest while the batch
        has not ended. The ownership check happens on the first `__anext__`."""
        raise NotImplementedError

    async def delete(self, ctx: Context, batch_id: str) -> Batch:
        """Delete the caller's ended batch (its rows and files); InvalidRequest while it has not ended."""
        raise NotImplementedError
