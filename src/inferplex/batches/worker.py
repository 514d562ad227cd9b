"""The batch worker: the background task, in every `inferplex serve` and in `inferplex worker`, that runs the
lines of every batch, durably and each exactly once (batches/rows.py for the leases and fences).

Every `tick_s`, and at once when one of its lines ends, a worker:
1. settles what a dead worker left: succeeded lines whose result is written but whose charge is not settled
   (idempotent per request id: `AccountGuard.settle_deferred`, so a worker that died after settling and
   before marking the line costs nothing twice);
2. winds up batches: pending lines of a cancelling batch are `cancelled`, of one past its window `expired`;
   a batch with no line pending or running is finalized: its output and error files written once (OpenAI's
   line format, batches/lines.py) into the media store, owned by the batch's owner, and its final status set;
3. claims as many lines as it has room for (`concurrency`), and runs each, at most `rate_per_s` starting a
   second: as the batch's owner (`Authenticator.principal_for` with the key and scopes the batch was created
   with: a key revoked since fails its lines), through the pipeline with the deferring guard
   (batches/deferring.py), so a line is limited, reserved, routed and priced as its route would be.

A line's run ends one way: its result, cost and held reservation written together (fenced by its lease),
then its charge settled, then the line marked settled. A line a rate limit refused (429, or a store that
could not check limits) goes back to pending until the time it was told, `max_attempts` times at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from inferplex.accounts.guard import AccountGuard, Deferred
from inferplex.accounts.pricing import tokens_of
from inferplex.auth import Authenticator
from inferplex.batches.deferring import Held, LineGuard
from inferplex.batches.lines import files_of
from inferplex.batches.model import LineResult
from inferplex.batches.rows import BatchRow, BatchRows, Claimed, Ended, Unsettled
from inferplex.batches.runners import RUNNERS, Env
from inferplex.batching import Batcher
from inferplex.config import BatchesConfig
from inferplex.context import Context
from inferplex.errors import GatewayError, InternalError
from inferplex.media_store.store import MediaStore
from inferplex.pipeline import Pipeline
from inferplex.responses import Usage
from inferplex.store.backend import unreachable
from inferplex.store.leasing import look_forever

log = logging.getLogger("inferplex.batches")

_PAGE = 1000  # lines read per query when a batch's files are written


@dataclass(frozen=True, slots=True)
class Settling:
    """A succeeded line's charge to settle, once its end is written."""

    line: Claimed
    deferred: Deferred
    cost: int
    usage: dict[str, Any]


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _settled(settling: Settling, _: None, error: BaseException | None) -> None:
    if error is not None and not isinstance(error, asyncio.CancelledError):
        line = settling.line
        log.warning("batch %s line %d: not settled yet (%s); settled later", line.batch_id, line.line_no, error)


def retryable(err: GatewayError) -> bool:
    """A refusal that says "not now" rather than "not this": the line is tried again later."""
    return err.status == 429 or (err.status == 503 and err.code in ("limits_unavailable", "store_unavailable"))


def usage_row(batch: BatchRow, result: dict[str, Any], ctx: Context | None) -> dict[str, Any]:
    """The usage row's fields for a settled line (accounts/guard.AccountGuard.settle_deferred): from the call's
    context when this worker ran it, else from the result it wrote (a dead worker's line)."""
    usage = ctx.usage if ctx is not None and ctx.usage else result.get("usage")
    tokens = tokens_of(cast(Usage, usage)) if isinstance(usage, dict) else tokens_of(None)
    target = ctx.target if ctx is not None else None
    model = ctx.model.name if ctx is not None and ctx.model is not None else result.get("model")
    return {
        "model": model, "provider": target.provider.name if target else None,
        "deployment": (target.deployment.id or target.upstream_model) if target else None, "status": 200,
        "prompt_tokens": tokens.prompt, "completion_tokens": tokens.completion, "cached_tokens": tokens.cached,
        "tags": [f"batch:{batch.batch.id}"],
        "cache": ctx.cache.status if ctx is not None and ctx.cache is not None else None,  # migration 0020
    }  # fmt: skip


class BatchWorker:
    def __init__(
        self,
        rows: BatchRows,
        pipeline: Pipeline,
        guard: AccountGuard | None,
        auth: Authenticator,
        media: MediaStore | None,
        config: BatchesConfig,
        responses: Any = None,
    ) -> None:
        self.rows = rows
        self.guard = guard
        self.auth = auth
        self.media = media
        self.config = config
        self.lines = LineGuard(pipeline.guard)
        self.env = Env(pipeline.with_guard(self.lines), responses)
        self.token = secrets.token_hex(16)  # this worker's leases
        self.running: set[asyncio.Task[None]] = set()
        self._batches: dict[str, BatchRow] = {}
        self._wake = asyncio.Event()
        self._next_start = 0.0
        self._chores_at = -1e9
        self._ends: Batcher[Ended, bool] = Batcher(rows.end_many)  # lines ending together share a commit
        self._settles: Batcher[Settling, None] = Batcher(self._settle_many)
        self._task: asyncio.Task[None] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._forever(), name="batch-worker")
        self._renewer = loop.create_task(self._renew(), name="batch-worker-leases")

    def wake(self) -> None:
        """Look for work now (a batch was created or cancelled, or a line ended)."""
        self._wake.set()

    async def aclose(self) -> None:
        """Stop claiming, cancel the lines in flight (a call cancelled before it was priced releases its
        reservation) and give them back, so another worker runs them again at once; what ended is written
        and settled first."""
        self._closing = True
        tasks = [t for t in (self._task, self._renewer, *self.running) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for batcher in (self._ends, self._settles):
            with contextlib.suppress(Exception):
                await batcher.aclose()
        with contextlib.suppress(Exception):  # else their leases lapse
            await self.rows.give_back(self.token)

    async def _forever(self) -> None:
        await look_forever("batch worker", self._look, self.config.tick_s, lambda: self._closing, self._wake)

    async def _look(self) -> None:
        await self.tick(chores=time.monotonic() - self._chores_at >= self.config.tick_s)

    async def _renew(self) -> None:
        lease = self.config.lease_s
        while True:
            await asyncio.sleep(lease / 3)
            if self.running:
                with contextlib.suppress(Exception):
                    await self.rows.renew(self.token, time.time() + lease)

    async def tick(self, *, chores: bool = True) -> int:
        """One look: leftovers settled and batches wound up (`chores`: at most once per `tick_s`, not each time
        a line ends), lines claimed and started; how many were claimed."""
        now = time.time()
        if chores:
            self._chores_at = time.monotonic()
            self._batches.clear()  # the batch rows its lines read (owner, key, scopes), fresh once per chores
            for left, batch in await self.rows.unsettled(now, 200):
                await self._settle_left(left, batch)
            for batch_id in await self.rows.wind_up(now, self.config.max_attempts):
                try:
                    await self.finalize(batch_id)
                except Exception as exc:  # its lease lapses and it is finalized again; the others go on
                    if unreachable(exc) is not None:
                        raise
                    log.exception("batch %s: its files could not be written; tried again later", batch_id)
        room = self.config.concurrency - len(self.running)
        if room <= 0 or self._closing:
            return 0
        claimed = await self.rows.claim(self.token, now, self.config.lease_s, room)
        for line in claimed:
            task = asyncio.get_running_loop().create_task(self._run(line), name=f"batch-line-{line.request_id}")
            self.running.add(task)
            task.add_done_callback(self._done)
        return len(claimed)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        self._wake.set()

    async def _pace(self) -> None:
        """At most `rate_per_s` line starts a second from this worker."""
        rate = self.config.rate_per_s
        if rate is None:
            return
        now = time.monotonic()
        at = max(now, self._next_start)
        self._next_start = at + 1.0 / rate
        if at > now:
            await asyncio.sleep(at - now)

    async def _batch(self, batch_id: str) -> BatchRow | None:
        found = self._batches.get(batch_id)
        if found is None:
            found = await self.rows.get(batch_id)
            if found is not None:
                self._batches[batch_id] = found
        return found

    # ---- one line --------------------------------------------------------------------------------------

    async def _run(self, line: Claimed) -> None:
        try:
            await self._pace()
            batch = await self._batch(line.batch_id)
            if batch is None:  # deleted meanwhile
                return
            ctx = Context(request_id=line.request_id)
            try:
                ctx.principal = await self.auth.principal_for(batch.key_id, batch.scopes)
                answer = await RUNNERS[batch.batch.endpoint](self.env, ctx, line.body)
            except GatewayError as err:
                await self._failed(line, ctx, err)
                return
            except Exception as exc:
                if unreachable(exc) is not None:
                    raise
                log.exception("batch %s line %d failed", line.batch_id, line.line_no)
                await self._failed(line, ctx, InternalError(f"The request failed (request id {ctx.request_id})."))
                return
            held = self.lines.take(ctx.request_id) or Held(None, ctx.cost_micros or 0)
            await self._succeeded(line, batch, ctx, answer, held)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a store error: the lease lapses, and the line is run again
            log.warning("batch %s line %d: not recorded (%s); it runs again", line.batch_id, line.line_no, exc)

    async def _failed(self, line: Claimed, ctx: Context, err: GatewayError) -> None:
        held = self.lines.take(ctx.request_id)
        if held is not None and held.deferred is not None:  # failed after pricing (a processor, say)
            await self._release(held.deferred)
        if retryable(err) and line.attempt < self.config.max_attempts:
            await self.rows.retry_later(line, self.token, time.time() + (err.retry_after or self.config.tick_s))
            return
        await self._end(Ended(line, self.token, "errored", err.status, _json(err.to_openai()), 0, 0, True))

    async def _end(self, ended: Ended) -> bool:
        return await self._ends.enqueue(ended, keep=True)

    async def _succeeded(
        self, line: Claimed, batch: BatchRow, ctx: Context, answer: dict[str, Any], held: Held
    ) -> None:
        deferred = held.deferred
        reserved = deferred.reserved if deferred is not None else 0
        ended = Ended(line, self.token, "succeeded", 200, _json(answer), held.cost, reserved, deferred is None)
        if not await self._end(ended):  # another worker holds the line now (this one's lease lapsed): its run counts
            if deferred is not None:
                await self._release(deferred)
            return
        if deferred is not None and self.guard is not None:
            settling = Settling(line, deferred, held.cost, usage_row(batch, answer, ctx))
            self._settles.post(settling, partial(_settled, settling))  # the line's slot is free once it ended

    async def _settle_many(self, items: list[Settling]) -> list[None]:
        """Settle lines that ended together in one ledger transaction, then mark them settled in one more. A
        failure leaves them unsettled: the chores settle them once their lease has lapsed."""
        assert self.guard is not None
        await self.guard.settle_deferred_many([(s.deferred, s.cost, s.usage) for s in items])
        return await self.rows.mark_settled([(s.line.batch_id, s.line.line_no) for s in items])

    async def _release(self, deferred: Deferred) -> None:
        if self.guard is None:
            return
        try:
            await self.guard.settle_deferred(deferred, None, {"model": None, "provider": None, "deployment": None,
                                                              "status": 499})  # fmt: skip
        except Exception as exc:  # the orphan sweep releases it (store/recovery.py)
            log.warning("batch line %s: its reservation is not released yet (%s)", deferred.request_id, exc)

    async def _settle_left(self, line: Unsettled, batch: BatchRow) -> None:
        """Settle a line a dead worker recorded but did not settle (at most once: the ledger skips a request
        id already settled)."""
        if self.guard is not None and line.reserved_micros:
            deferred = Deferred(batch.account_id, batch.key_id, line.reserved_micros, line.request_id)
            await self.guard.settle_deferred(deferred, line.cost_micros, usage_row(batch, line.result, None))
        await self.rows.mark_settled([(line.batch_id, line.line_no)])

    # ---- finishing a batch -----------------------------------------------------------------------------

    async def finalize(self, batch_id: str) -> None:
        """Write the batch's files and set its final status, once (under the batch's lease)."""
        now = time.time()
        row = await self.rows.claim_batch(batch_id, self.token, now, self.config.lease_s)
        if row is None:
            return
        batch = row.batch
        status = "cancelled" if batch.status == "cancelling" else "expired" if batch.expired_at else "completed"
        files: dict[str, str | None] = {"output_file_id": None, "error_file_id": None}
        if batch.dialect == "openai" and self.media is not None:
            results: list[LineResult] = []
            while page := await self.rows.results(batch_id, results[-1].line_no if results else -1, _PAGE):
                results += page
            out, err = files_of(batch_id, results)
            for name, data, suffix in (("output_file_id", out, "output"), ("error_file_id", err, "error")):
                if data:
                    stored = await self.media.save_bytes(
                        batch.owner, data, filename=f"{batch_id}_{suffix}.jsonl", content_type="application/jsonl",
                        purpose="batch_output",
                    )  # fmt: skip
                    files[name] = stored.id
        values: dict[str, Any] = {"status": status, f"{status}_at": time.time(), **files}
        if not await self.rows.finished(batch_id, self.token, values):
            for file_id in files.values():  # another worker took it over: its files count
                if file_id is not None and self.media is not None:
                    with contextlib.suppress(Exception):
                        await self.media.delete(file_id)
            return
        log.info("batch %s %s", batch_id, status)
