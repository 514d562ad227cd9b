"""`BatchService` (`services.batches`): create, read, list, cancel and delete batches, and read their results.

The routes of both dialects (dialects/openai_batches.py, dialects/anthropic/batches.py) are thin over this:
they parse their wire shapes, call one method, and render the `Batch` (and, for Anthropic, the `LineResult`s)
in their own shape. Everything a batch does after it is created is the worker's (batches/worker.py): it runs
the lines through the pipeline as the batch's owner and settles each line's charge exactly once.

A batch is its owner's (the caller's account, else its key: media_store.store.owner_of): another owner's
batch, or a deleted one, is a 404. Ids are `batch_<hex>` (OpenAI) and `msgbatch_<hex>` (Anthropic).
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from inferplex.batches.lines import check_lines, parse_file, supported
from inferplex.batches.model import (
    ENDED,
    ENDPOINTS,
    Batch,
    Counts,
    Dialect,
    LineInput,
    LineResult,
    Outcome,
    Status,
)
from inferplex.config import BatchesConfig
from inferplex.context import Context
from inferplex.errors import InvalidRequest, NotFound
from inferplex.media_store.store import MediaStore, owner_of

if TYPE_CHECKING:
    from inferplex.batches.rows import BatchRow, BatchRows

__all__ = [
    "ENDED", "ENDPOINTS", "Batch", "BatchService", "Counts", "Dialect", "LineInput", "LineResult", "Outcome", "Status",
]  # fmt: skip

WINDOWS = {"24h": 1.0}  # completion windows, as a share of `batches.window_s` (OpenAI offers "24h" only)
_ID = re.compile(r"(msg)?batch_[0-9a-f]{32}")
_RESULTS_PAGE = 500


def plausible(batch_id: str) -> bool:
    """Whether `batch_id` could be a batch's id (anything else is a 404 without a look)."""
    return _ID.fullmatch(batch_id) is not None


def not_found(batch_id: str) -> NotFound:
    return NotFound(f"No batch found with id '{batch_id}'.", param="batch_id", code="batch_not_found")


class BatchService:
    """The interface the routes use (`services.batches`). Every method raises a `GatewayError` (rendered in the
    caller's dialect by its route): NotFound for an unknown, another owner's or a deleted batch; InvalidRequest
    for bad input. The work itself is the worker's (batches/worker.py); `wake` tells this replica's worker that
    there is some."""

    def __init__(
        self,
        rows: BatchRows,
        media: MediaStore | None,
        config: BatchesConfig,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self.rows = rows
        self.media = media
        self.config = config
        self.wake = wake
        self.closers: list[Callable[[], Awaitable[None]]] = []  # the worker's stop (wiring.start)

    async def aclose(self) -> None:
        for close in self.closers:
            await close()

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
        if not supported(endpoint):
            raise InvalidRequest(
                f"Unsupported endpoint '{endpoint}': a batch runs one of {', '.join(ENDPOINTS)}.", param="endpoint"
            )
        if completion_window not in WINDOWS:
            raise InvalidRequest("'completion_window' must be 24h.", param="completion_window")
        input_file_id: str | None = None
        errors: list[dict[str, Any]] = []
        if isinstance(lines_source, str):
            input_file_id = lines_source
            lines, errors = parse_file(await self._input(ctx, lines_source), endpoint, self.config.max_lines)
        else:
            lines = list(lines_source)
            if not lines:
                raise InvalidRequest("A batch needs at least one request.", param="requests")
            if len(lines) > self.config.max_lines:
                raise InvalidRequest(f"A batch holds at most {self.config.max_lines} requests.", param="requests")
            bad = check_lines(lines, endpoint)
            if bad:
                at, message = bad[0]
                raise InvalidRequest(f"requests[{at}]: {message}", param=f"requests.{at}")
        p, now = ctx.principal, time.time()
        window = self.config.window_s * WINDOWS[completion_window]
        status: Status = "failed" if errors else "in_progress"
        values: dict[str, Any] = {
            "id": new_batch_id(dialect), "dialect": dialect, "owner": owner_of(p), "account_id": p.account_id,
            "key_id": p.key_id, "scopes": " ".join(sorted(p.scopes)), "endpoint": endpoint,
            "input_file_id": input_file_id, "completion_window": completion_window, "status": status,
            "errors": _json(errors) if errors else None, "metadata": _json(metadata) if metadata else None,
            "total": 0 if errors else len(lines), "completed": 0, "failed": 0, "cancelled": 0, "expired": 0,
            "cost_micros": 0, "created_at": now, "expires_at": now + window,
            "failed_at": now if errors else None, "in_progress_at": None if errors else now,
        }  # fmt: skip
        encoded = [] if errors else [(line.custom_id, _json(line.body)) for line in lines]
        await self.rows.insert(values, encoded)
        if not errors:
            self.wake()
        return (await self._owned(ctx, values["id"])).batch

    async def _input(self, ctx: Context, file_id: str) -> bytes:
        file = None if self.media is None else await self.media.get(file_id, owner_of(ctx.principal))
        if file is None or self.media is None:
            raise NotFound(f"No file found with id '{file_id}'.", param="input_file_id", code="file_not_found")
        return b"".join([chunk async for chunk in self.media.read(file)])

    async def _owned(self, ctx: Context, batch_id: str) -> BatchRow:
        row = await self.rows.get(batch_id, owner_of(ctx.principal)) if plausible(batch_id) else None
        if row is None:
            raise not_found(batch_id)
        return row

    async def get(self, ctx: Context, batch_id: str) -> Batch:
        """The caller's batch (NotFound otherwise)."""
        return (await self._owned(ctx, batch_id)).batch

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
        mark = after or before
        found = None
        if mark is None or plausible(mark):
            found = await self.rows.page(owner_of(ctx.principal), dialect, after, before, limit)
        if found is None:
            param = "after" if after is not None else "before"
            raise InvalidRequest(f"No batch with id '{mark}' to list {param}.", param=param, code="invalid_cursor")
        rows, more = found
        return [row.batch for row in rows], more

    async def cancel(self, ctx: Context, batch_id: str) -> Batch:
        """Cancel the caller's batch: `cancelling` while lines in flight finish, then `cancelled`, with files
        for what finished (the lines never run are `cancelled` results). An ended batch is returned as is."""
        row = await self._owned(ctx, batch_id)
        if row.batch.status in ("validating", "in_progress"):
            now = time.time()
            moved = {"status": "cancelling", "cancelling_at": now}
            if await self.rows.set_status(batch_id, moved, statuses=("validating", "in_progress")):
                self.wake()
        return (await self._owned(ctx, batch_id)).batch

    async def results(self, ctx: Context, batch_id: str) -> AsyncIterator[LineResult]:
        """Every line's result in line order (Anthropic's results stream). Raise InvalidRequest while the batch
        has not ended. The ownership check happens on the first `__anext__`."""
        row = await self._owned(ctx, batch_id)
        if not row.batch.ended:
            raise InvalidRequest(
                f"Batch '{batch_id}' has not ended yet: its results are ready once it has.", param="batch_id",
                code="batch_not_ended",
            )  # fmt: skip
        after = -1
        while page := await self.rows.results(batch_id, after, _RESULTS_PAGE):
            for result in page:
                yield result
            after = page[-1].line_no

    async def delete(self, ctx: Context, batch_id: str) -> Batch:
        """Delete the caller's ended batch (its rows and files); InvalidRequest while it has not ended."""
        row = await self._owned(ctx, batch_id)
        batch = row.batch
        if not batch.ended:
            raise InvalidRequest(
                f"Batch '{batch_id}' has not ended yet: cancel it, and delete it once it has ended.",
                param="batch_id", code="batch_not_ended",
            )  # fmt: skip
        await self.rows.mark_deleted(batch_id, time.time())
        if self.media is not None:
            for file_id in (batch.output_file_id, batch.error_file_id):
                if file_id is not None:
                    with contextlib.suppress(Exception):
                        await self.media.delete(file_id)
        return batch


def new_batch_id(dialect: str) -> str:
    return ("msgbatch_" if dialect == "anthropic" else "batch_") + secrets.token_hex(16)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
