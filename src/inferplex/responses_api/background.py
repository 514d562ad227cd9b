"""The background worker: every replica's task that runs `background: true` responses (responses_api/store.py
for the rows and their lease).

A background response is a queued row. Every `responses.tick_s` (and at once when this replica queued one) a
replica claims due rows nobody holds, up to `responses.concurrency` runs at a time, and runs each as its
caller (`Authenticator.principal_for`: a key revoked since fails the run) through the same path as a streamed
request (`ResponsesService.prepare`, `Pipeline.chat_stream`, `ResponsesService.events`). Its events are
appended to `response_events` in small batches, each append fenced by the run's lease token and renewing the
lease; the last one writes the finished row (status, response, history, cost) in the same transaction.

- Cancelled (`POST .../cancel` marks the row): the next append finds it so, and the stream stops before its
  next upstream read: closing it settles what was produced, the open item is closed (its `.done` events
  appended, as OpenAI's cancelled stream ends), and the row keeps the response as it stood (the output
  streamed, the usage charged) and that cost. The run holds its lease until then, so a follower reads it all.
- Refused by the gateway itself for a rate or concurrency limit, or an outage (429, 503), before any upstream
  call: queued again after the wait the error names (else a backoff), up to five attempts. Any other
  refusal, and an upstream's error on every deployment, fails it, uncharged.
- Its replica stops (shutdown): the run fails at once, charged for what it produced, and says so.
- Its replica died: the lease lapses and another replica claims the row. Nothing was streamed yet (no
  event stored): it runs again from the start. Else it fails (`response.failed` appended): what the caller
  saw cannot be continued exactly, and nothing is charged (the dead run's reservation is an orphan the
  store's recovery releases, store/recovery.py).

Every `responses.sweep_s` the worker also deletes the stored responses past their retention.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from typing import Any

import orjson

from inferplex.context import Context
from inferplex.errors import GatewayError, InternalError
from inferplex.responses_api import translate
from inferplex.responses_api.events import ResponseEvents
from inferplex.responses_api.service import (
    Event,
    ResponsesService,
    aclose_quietly,
    error_of,
    history_of,
    settled_usage,
)
from inferplex.responses_api.store import TERMINAL, StoredResponse, dumps
from inferplex.responses_api.wire import parse
from inferplex.store.backend import unreachable
from inferplex.store.leasing import look_forever

log = logging.getLogger("inferplex.responses")

FINAL = ("response.completed", "response.incomplete", "response.failed")
FLUSH_EVENTS = 64  # at most this many events wait for one append
FLUSH_S = 0.05  # nor longer than this, while events keep coming
RETRIED = (429, 503)  # the gateway's limit or outage before any upstream call: queued again, not failed
MAX_ATTEMPTS = 5


class Background:
    def __init__(self, service: ResponsesService) -> None:
        self.service = service
        self.rows = service.rows
        self.config = service.config
        self._running: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._swept = 0.0

    def start(self) -> None:
        self.service.wake = self.wake
        self._task = asyncio.get_running_loop().create_task(self._forever(), name="responses-background")

    def wake(self) -> None:
        self._wake.set()

    async def aclose(self) -> None:
        """Stop claiming and stop the runs (their leases lapse: another replica, or this one restarted, takes
        them up as the rules above say)."""
        self._closing = True
        tasks = [t for t in (self._task, *self._running.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _forever(self) -> None:
        await look_forever(
            "background responses worker", self._look, self.config.tick_s, lambda: self._closing, self._wake
        )

    async def _look(self) -> None:
        """Start what is due, and now and then delete the stored responses past their retention."""
        await self.tick()
        if time.time() - self._swept >= self.config.sweep_s:
            self._swept = time.time()
            swept = await self.rows.sweep(self._swept)
            if swept:
                log.info("deleted %d stored responses past their retention", swept)

    async def tick(self) -> int:
        """Claim the due rows this replica has room for and start a run for each; how many were claimed."""
        room = self.config.concurrency - len(self._running)
        token = secrets.token_hex(16)
        claimed = await self.rows.claim(token, time.time(), self.config.lease_s, room)
        for row in claimed:
            task = asyncio.get_running_loop().create_task(self._leased(row, token), name=f"response-{row.id}")
            self._running[row.id] = task
        return len(claimed)

    async def _leased(self, row: StoredResponse, token: str) -> None:
        renewer = asyncio.create_task(self._renew(row.id, token))
        try:
            await self.run(row, token)
        except Exception as exc:
            if unreachable(exc) is None:
                log.exception("background response %s failed in the worker; its lease lapses", row.id)
        finally:
            renewer.cancel()
            self._running.pop(row.id, None)

    async def _renew(self, response_id: str, token: str) -> None:
        lease = self.config.lease_s
        while True:
            await asyncio.sleep(lease / 3)
            with contextlib.suppress(Exception):
                if not await self.rows.fenced(response_id, token, {"claimed_until": time.time() + lease}):
                    return

    async def run(self, row: StoredResponse, token: str) -> None:
        if row.status in TERMINAL:
            await self.rows.fenced(row.id, token, {"next_run_at": None, "claimed_until": None}, active=False)
            return
        if row.status == "in_progress":
            count = await self.rows.event_count(row.id)
            if count:
                await self._interrupted(row, token, count)
                return
        if not await self.rows.fenced(row.id, token, {"status": "in_progress"}):  # cancelled meanwhile: let go
            await self.rows.fenced(row.id, token, {"claimed_until": None}, active=False)
            return
        ctx = Context()
        stopping = asyncio.Event()  # set once the row is found cancelled: the stream then closes what is open
        kept: list[dict[str, Any]] = []  # the response as the stream ended it

        async def keep(_ctx: Context, _prepared: Any, response: dict[str, Any]) -> None:
            kept.append(response)

        try:
            ctx.principal = await self._principal(row)
            prepared = await self.service.begin(ctx, parse(dict(row.request)), response_id=row.id,
                                                created_at=row.created_at)  # fmt: skip
            events = await self.service.open_stream(ctx, prepared, store=keep, queued=True, stopping=stopping.is_set)
        except GatewayError as err:
            if err.status in RETRIED and not ctx.attempts and row.attempts < MAX_ATTEMPTS:  # the gateway's own
                await self._later(row, token, err)
            else:
                await self._failed_early(row, token, ctx, err)
            return
        try:
            left = await self._record(row, token, ctx, events, prepared.history, prepared.items, stopping)
        except asyncio.CancelledError:  # this replica stops: what was produced is settled, and said so
            await aclose_quietly(events)
            await asyncio.shield(self._stopped(row, token, ctx))
            raise
        finally:
            await aclose_quietly(events)  # closes the stream: settled, for what was produced
        if left is not None:  # cancelled: what it produced is charged, and recorded
            await self._cancelled(row, token, ctx, left, kept[-1] if kept else None)

    async def _cancelled(
        self, row: StoredResponse, token: str, ctx: Context, left: list[tuple[int, str]], response: Any
    ) -> None:
        """A cancelled run, its stream closed (settled): the events it had not appended (down to the `.done`
        events closing its open item) appended, and the response as the stream ended it stored, status
        `cancelled`, with the output it streamed and the usage it was charged for (as OpenAI keeps a cancelled
        response's output and usage)."""
        if response is None:  # ended before the stream said anything of it (a native stream)
            response = {**row.response, "usage": translate.response_usage(settled_usage(ctx))}
        final = {"response": dumps({**response, "status": "cancelled"}), "cost_micros": ctx.cost_micros}
        if not await self.rows.append_events(row.id, token, left, None, final, statuses=("cancelled",)):
            log.warning("background response %s lost its lease while running; charged %s micro-USD for what "
                        "it produced", row.id, ctx.cost_micros)  # fmt: skip

    async def _later(self, row: StoredResponse, token: str, err: GatewayError) -> None:
        """A rate limit or an outage before anything ran: queued again, tried after its wait (or a backoff)."""
        wait = err.retry_after if err.retry_after is not None else min(60.0, 2.0**row.attempts)
        values = {"status": "queued", "next_run_at": time.time() + wait, "claimed_by": None, "claimed_until": None}
        await self.rows.fenced(row.id, token, values)
        log.info("background response %s: %s; tried again in %.1fs", row.id, err.message, wait)

    async def _stopped(self, row: StoredResponse, token: str, ctx: Context) -> None:
        """This replica is shutting down mid-run: the response fails, charged (and recorded) for what was
        produced, rather than left for another replica to find interrupted."""
        with contextlib.suppress(Exception):
            count = await self.rows.event_count(row.id)
            message = (
                "The gateway stopped while running this response; charged "
                f"{ctx.cost_micros or 0} micro-USD for what was produced. Create it again."
            )
            response = {**row.response, "status": "failed", "error": {"code": "server_error", "message": message}}
            event = {"type": "response.failed", "sequence_number": count, "response": response}
            final = {"status": "failed", "response": dumps(response), "completed_at": time.time(),
                     "next_run_at": None, "cost_micros": ctx.cost_micros}  # fmt: skip
            await self.rows.append_events(row.id, token, [(count, orjson.dumps(event).decode())], None, final)

    async def _principal(self, row: StoredResponse) -> Any:
        auth = self.service.auth
        if auth is None:
            raise InternalError("No authenticator to run background responses as their callers.")
        return await auth.principal_for(row.key_id, row.scopes)

    async def _record(
        self,
        row: StoredResponse,
        token: str,
        ctx: Context,
        events: Any,
        history: list[dict[str, Any]],
        items: list[dict[str, Any]],
        stopping: asyncio.Event,
    ) -> list[tuple[int, str]] | None:
        """Append the run's events as they come; the last append finishes the row: None. Found cancelled (an
        append refused): `stopping` is set and the stream read on to its end (no further upstream read: the
        current chunk's events, then the ones closing what is open); the events not appended are returned."""
        pending: list[tuple[int, str]] = []
        flushed = time.monotonic()
        async for event in events:
            final = event.get("type") in FINAL
            if stopping.is_set():
                if not final:  # a cancelled response has no terminal event
                    pending.append((int(event["sequence_number"]), orjson.dumps(event).decode()))
                continue
            pending.append((int(event["sequence_number"]), orjson.dumps(event).decode()))
            if final:
                if await self._finish(row, token, ctx, pending, event["response"], history, items):
                    return None
                stopping.set()  # cancelled as it finished: its items are closed, its terminal event dropped
                pending.pop()
                continue
            started = event.get("type") == "response.in_progress"  # followers see it start at once
            if started or len(pending) >= FLUSH_EVENTS or time.monotonic() - flushed >= FLUSH_S:
                if not await self.rows.append_events(row.id, token, pending, time.time() + self.config.lease_s):
                    stopping.set()
                    continue
                pending, flushed = [], time.monotonic()
        if stopping.is_set():
            return pending
        if await self.rows.append_events(row.id, token, pending, None, {"next_run_at": None}):
            return None
        return pending

    async def _finish(
        self,
        row: StoredResponse,
        token: str,
        ctx: Context,
        pending: list[tuple[int, str]],
        response: dict[str, Any],
        history: list[dict[str, Any]],
        items: list[dict[str, Any]],
    ) -> bool:
        status = str(response.get("status") or "completed")
        final = {
            "status": status,
            "response": dumps(response),
            "history": dumps(history_of(history, items, response)) if status in ("completed", "incomplete") else None,
            "cost_micros": ctx.cost_micros,
            "completed_at": time.time(),
            "next_run_at": None,
        }
        return await self.rows.append_events(row.id, token, pending, None, final)

    async def _failed_early(self, row: StoredResponse, token: str, ctx: Context, err: GatewayError) -> None:
        """Refused or failed before any output (a revoked key, an upstream error on every target): the stream a
        follower reads is `response.created`, `.queued`, `.in_progress`, `.failed`. Nothing is charged."""
        skeleton = {**row.response, "status": "in_progress"}
        translator = ResponseEvents(skeleton)
        events: list[Event] = [*translator.start(queued=True), *translator.fail(error_of(err))]
        pending = [(int(e["sequence_number"]), orjson.dumps(e).decode()) for e in events]
        final = {"status": "failed", "response": dumps(translator.response), "completed_at": time.time(),
                 "next_run_at": None, "cost_micros": ctx.cost_micros}  # fmt: skip
        if not await self.rows.append_events(row.id, token, pending, None, final):  # cancelled meanwhile: let go
            await self.rows.fenced(row.id, token, {"claimed_until": None}, active=False)

    async def _interrupted(self, row: StoredResponse, token: str, count: int) -> None:
        """A run whose replica died after it had streamed: failed, with a last event saying so."""
        message = "The gateway stopped while running this response; it was not charged. Create it again."
        response = {**row.response, "status": "failed", "error": {"code": "server_error", "message": message}}
        event = {"type": "response.failed", "sequence_number": count, "response": response}
        final = {"status": "failed", "response": dumps(response), "completed_at": time.time(), "next_run_at": None}
        await self.rows.append_events(row.id, token, [(count, orjson.dumps(event).decode())], None, final)
        log.info("background response %s was interrupted by a replica's stop: failed", row.id)
