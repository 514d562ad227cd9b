"""`ResponsesService` (`services.responses`): `/v1/responses` on the chat pipeline, and its stored responses.

A response is a chat request in another dress. The request (responses_api/wire.py) and the history of its
`previous_response_id` (read from the caller's own stored row: another owner's id is a 404) become one chat
body (`translate.to_chat`), which takes `Pipeline.chat` or `chat_stream`, so metering, limits, processors,
routing and fallbacks are chat's exactly. The answer is dressed back as a `response` object
(`translate.response_object`) or as the Responses stream grammar (`events.ResponseEvents`). Where every
deployment of the model speaks Responses itself, the native pass-through answers instead (one call,
`native.maybe_native`, before translating), and its answer is stored the same way.

With `store` (the default) the row is written before the caller has the answer: the buffered body is
returned, or `response.completed` sent, only after it is committed, so a follow-up on any replica finds the
history at once. The row holds `history` = the previous history + this input + this output, so a chain of any
length is one read, and deleting a response in the middle of a chain breaks none of the later ones (the
price: a chain's rows repeat its earlier turns). `store: false` keeps nothing.

`background: true` inserts a queued row and answers it at once; responses_api/background.py runs it on
whichever replica claims it, as the caller (`Authenticator.principal_for`), appending its events to
`response_events` as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from inferplex.accounts.delivered import counted_prompt_tokens
from inferplex.accounts.pricing import estimate_output_tokens
from inferplex.auth import Authenticator
from inferplex.canonical import ChatRequest, parse
from inferplex.config import ResponsesConfig
from inferplex.context import Context
from inferplex.dialects.paging import list_page
from inferplex.errors import GatewayError, InternalError, InvalidRequest, NotFound
from inferplex.families.chat import CHAT
from inferplex.gateway_request import GatewayRequest
from inferplex.media_store.store import MediaStore, owner_of
from inferplex.pipeline import ChatStream, Pipeline
from inferplex.responses_api import files, translate
from inferplex.responses_api.events import ResponseEvents
from inferplex.responses_api.native import NativeStream, maybe_native
from inferplex.responses_api.store import ACTIVE, TERMINAL, ResponseRows, StoredResponse, dumps, new_response_id
from inferplex.responses_api.wire import ResponsesRequest
from inferplex.responses_api.wire import parse as parse_responses

log = logging.getLogger("inferplex.responses")

Event = dict[str, Any]
_ID = re.compile(r"resp_[A-Za-z0-9]{1,58}")
_FINAL = ("response.completed", "response.incomplete", "response.failed")
DAY_S = 86_400.0


def plausible(response_id: str) -> bool:
    """Whether `response_id` could be a stored response's id (anything else is a 404 without a read)."""
    return _ID.fullmatch(response_id) is not None


def not_found(response_id: str, param: str | None = None) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param=param, code="response_not_found")


def history_of(previous: list[dict[str, Any]], items: list[dict[str, Any]], response: dict[str, Any]) -> list[Any]:
    """What a follow-up sends before its own input: the previous history, this input, this output, in order."""
    return [*previous, *items, *(response.get("output") or ())]


def shown(row: StoredResponse) -> dict[str, Any]:
    """The stored response as it stands: a background one's status is the row's (queued, in progress,
    cancelled) until its run writes the finished response."""
    if row.response.get("status") == row.status:
        return row.response
    return {**row.response, "status": row.status}


def error_of(err: GatewayError) -> dict[str, Any]:
    """A failure as a response's `error` (OpenAI's ResponseError: code and message)."""
    return {"code": err.code or err.type, "message": err.message}


@dataclass(slots=True)
class Prepared:
    """A request ready to run: its id and time, its stored input items, the history it continues, and the
    caller's files its input and history name by `file_id`, read (responses_api/files.py)."""

    request: GatewayRequest[ResponsesRequest]
    response_id: str
    created_at: float
    items: list[dict[str, Any]]
    history: list[dict[str, Any]]
    inlined: dict[str, files.Inlined] = field(default_factory=dict)


class ResponsesService:
    def __init__(
        self,
        pipeline: Pipeline,
        rows: ResponseRows,
        auth: Authenticator | None,
        config: ResponsesConfig,
        media: MediaStore | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.rows = rows
        self.auth = auth
        self.config = config
        self.media = media  # the caller's uploaded files (`/v1/files`), read where an input names them
        self.wake: Callable[[], None] = lambda: None  # set by the background worker: a new row to run
        self.closers: list[Callable[[], Awaitable[None]]] = []  # the worker's stop (wiring.start)

    def with_pipeline(self, pipeline: Pipeline) -> ResponsesService:
        """The same service on another pipeline (a batch runner's, whose guard defers settlement)."""
        other = ResponsesService(pipeline, self.rows, self.auth, self.config, self.media)
        other.wake = self.wake
        return other

    async def aclose(self) -> None:
        for close in self.closers:
            await close()

    # ---- preparing ------------------------------------------------------------------------------------

    async def history(self, ctx: Context, body: ResponsesRequest) -> list[dict[str, Any]]:
        """The items `previous_response_id` continues: the caller's own finished response's history."""
        previous = body.previous_response_id
        if previous is None:
            return []
        row = await self.rows.get(previous, owner_of(ctx.principal)) if plausible(previous) else None
        if row is None:
            raise NotFound(
                f"Previous response with id '{previous}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        if row.history is None:
            raise InvalidRequest(
                f"Previous response with id '{previous}' is {row.status}: only a finished response can be continued.",
                param="previous_response_id",
                code="previous_response_not_finished",
            )
        return row.history

    async def begin(
        self,
        ctx: Context,
        request: GatewayRequest[ResponsesRequest],
        *,
        response_id: str | None = None,
        created_at: float | None = None,
    ) -> Prepared:
        """The run's id and time, its stored input items and the history it continues (a 404 for another
        owner's or an unknown `previous_response_id`), and the caller's files they name by `file_id`, read
        (a 400 naming the place of one that cannot be), before anything is reserved or stored. Every road
        starts here (the route, a background run, a batch line; native or translated), so what none of them
        serves is refused here, once: `conversation`."""
        if request.body.conversation is not None:
            raise InvalidRequest(
                "'conversation' is not supported by this gateway: continue a conversation with previous_response_id.",
                param="conversation",
                code="unsupported_parameter",
            )
        history = await self.history(ctx, request.body)
        items = translate.input_items(request.body)
        places = files.wanted(
            [
                *((item, f"input[{i}]") for i, item in enumerate(items)),
                *((item, "previous_response_id") for item in history),
            ]
        )
        read = await files.resolve(self.media, owner_of(ctx.principal), places, self.config.max_inline_file_bytes)
        return Prepared(request, response_id or new_response_id(), created_at or time.time(), items, history, read)

    @staticmethod
    def upstream(
        prepared: Prepared, request: GatewayRequest[ResponsesRequest]
    ) -> tuple[GatewayRequest[ResponsesRequest], list[dict[str, Any]]]:
        """`request` (the prepared one, or it restreamed) and the history as they go upstream: the files they
        name by `file_id` inline (responses_api/files.py). What is stored keeps the ids as the caller sent them."""
        if not prepared.inlined:
            return request, prepared.history
        body = request.body
        if isinstance(body.input, list):
            body = body.model_copy(update={"input": files.inline(body.input, prepared.inlined, "input")})
        return request.replace(body), files.inline(prepared.history, prepared.inlined, "previous_response_id")

    def translated(self, prepared: Prepared, *, stream: bool) -> GatewayRequest[ChatRequest]:
        """The chat request the response becomes on the translated road (a 400 naming what it cannot carry)."""
        request, history = self.upstream(prepared, prepared.request)
        body = request.body
        window = self._context_window(body.model, request) if body.truncation == "auto" else None
        chat_body = translate.to_chat(body, history, stream=stream, context_window=window)
        return GatewayRequest(parse(ChatRequest, chat_body), request.options)

    def _context_window(self, model: str, request: GatewayRequest[ResponsesRequest]) -> int | None:
        try:
            resolved = self.pipeline.catalog.resolve(model, request.options.provider_name, kind=CHAT.model_type)
        except GatewayError:
            return None  # the pipeline answers the unknown model itself
        return resolved.model.context_window

    # ---- running ----------------------------------------------------------------------------------------

    async def respond(self, ctx: Context, request: GatewayRequest[ResponsesRequest]) -> dict[str, Any]:
        """A buffered response (stored first when `store`): what `POST /v1/responses` answers without
        `stream`. The one call of the native pass-through (responses_api/native.py) comes first: it answers
        when every deployment speaks Responses, else the request is translated to chat."""
        if request.body.stream:
            request = request.replace(request.body.model_copy(update={"stream": False}))
        prepared = await self.begin(ctx, request)
        sent, history = self.upstream(prepared, request)
        native = await maybe_native(self.pipeline, ctx, sent, history, response_id=prepared.response_id)
        if isinstance(native, dict):
            response = native
        elif native is None:
            completion = await self.pipeline.chat(self.translated(prepared, stream=False), ctx)
            response = translate.response_object(
                request.body,
                response_id=prepared.response_id,
                created_at=int(prepared.created_at),
                completion=cast(dict[str, Any], completion),
            )
        else:  # a stream for a buffered request: never, but closed (and settled) if it were
            await native.aclose()
            raise InternalError(f"The native pass-through streamed a buffered request ({ctx.request_id}).")
        if request.body.store:
            await self._insert(ctx, prepared, response)
        return response

    async def batch_line(self, ctx: Context, data: dict[str, Any]) -> dict[str, Any]:
        """One batch line's `/v1/responses` body, buffered: what a batch runner calls (`ctx.principal` the
        batch's owner, the service `with_pipeline` of the runner's pipeline). Streams and background runs
        have no place in a batch: a 400."""
        request = parse_responses(data)
        if request.body.stream or request.body.background:
            param = "stream" if request.body.stream else "background"
            raise InvalidRequest(f"'{param}' is not allowed in a batch line.", param=param)
        return await self.respond(ctx, request)

    async def stream(self, ctx: Context, request: GatewayRequest[ResponsesRequest]) -> AsyncIterator[Event]:
        """A streamed response: the upstream stream started (a failure before its first event is still an
        HTTP error), then the events, the row stored (with `store`) before the terminal one."""
        prepared = await self.begin(ctx, request)
        return await self.open_stream(ctx, prepared, store=self._insert if request.body.store else None)

    async def open_stream(
        self,
        ctx: Context,
        prepared: Prepared,
        *,
        store: Callable[[Context, Prepared, dict[str, Any]], Awaitable[None]] | None,
        queued: bool = False,
        stopping: Callable[[], bool] | None = None,
    ) -> AsyncIterator[Event]:
        """The events of a run, its upstream started: natively relayed, or translated from a chat stream.
        `store(ctx, prepared, response)` is awaited with the final response before the terminal event.
        `stopping()` true (a background run cancelled): the events end after the current chunk's, closing
        what is open (see `events`); a native stream ends where it is."""
        request = prepared.request
        if not request.body.stream:
            request = request.replace(request.body.model_copy(update={"stream": True}))
        sent, history = self.upstream(prepared, request)
        native = await maybe_native(self.pipeline, ctx, sent, history, response_id=prepared.response_id)

        async def finish(response: dict[str, Any]) -> None:
            if store is not None:
                await store(ctx, prepared, response)

        if isinstance(native, NativeStream):
            return native.relay(finish) if stopping is None else _until(native.relay(finish), stopping)
        if native is not None:
            raise InternalError(f"The native pass-through answered a stream buffered ({ctx.request_id}).")
        stream = await self.pipeline.chat_stream(self.translated(prepared, stream=True), ctx)
        return self.events(ctx, prepared, stream, finish, queued=queued, stopping=stopping)

    def skeleton(self, prepared: Prepared, status: str) -> dict[str, Any]:
        """The response object before any output (queued, in progress)."""
        return translate.skeleton(
            prepared.request.body,
            response_id=prepared.response_id,
            created_at=int(prepared.created_at),
            status=status,
        )

    async def events(
        self,
        ctx: Context,
        prepared: Prepared,
        stream: ChatStream,
        store: Callable[[dict[str, Any]], Awaitable[None]],
        *,
        queued: bool = False,
        stopping: Callable[[], bool] | None = None,
    ) -> AsyncIterator[Event]:
        """The Responses events of a started chat stream. The stream is closed (so settled, and its cost known)
        before the closing events, and `store` writes the final response before they are yielded. Once
        `stopping()` (checked before each read of the upstream) the stream is closed there and the open item
        closed (`ResponseEvents.cancel`): the response keeps what was produced, with the usage it was charged."""
        events = ResponseEvents(self.skeleton(prepared, "in_progress"))
        stopped = stopping or (lambda: False)
        try:
            for event in events.start(queued=queued):
                yield event
            closing: list[Event] | None = None
            try:
                if not stopped():
                    async for chunk in stream:
                        for event in events.feed(cast(dict[str, Any], chunk)):
                            yield event
                        if stopped():
                            break
                    else:
                        closing = events.finish()
            except Exception as exc:
                err = exc if isinstance(exc, GatewayError) else InternalError(f"The stream failed ({ctx.request_id}).")
                closing = events.fail(error_of(err))
            await stream.aclose()
            if closing is None:  # stopped: the usage is what the closed stream was settled for
                closing = events.cancel(settled_usage(ctx))
            await store(events.response)
            for event in closing:
                yield event
        finally:
            await stream.aclose()

    async def _insert(self, ctx: Context, prepared: Prepared, response: dict[str, Any]) -> None:
        status = str(response.get("status") or "completed")
        finished = status in ("completed", "incomplete")
        values = self._row(ctx, prepared, response, status, background=False)
        values |= {
            "history": dumps(history_of(prepared.history, prepared.items, response)) if finished else None,
            "cost_micros": ctx.cost_micros,
            "completed_at": time.time(),
        }
        await asyncio.shield(self.rows.insert(values))

    def _row(
        self, ctx: Context, prepared: Prepared, response: dict[str, Any], status: str, *, background: bool
    ) -> dict[str, Any]:
        p, body = ctx.principal, prepared.request.body
        raw = body.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return {
            "id": prepared.response_id, "owner": owner_of(p), "account_id": p.account_id, "key_id": p.key_id,
            "scopes": dumps(sorted(p.scopes)), "model": body.model, "status": status, "background": background,
            "previous_response_id": body.previous_response_id, "request": dumps(raw),
            "input_items": dumps(prepared.items), "response": dumps(response), "history": None,
            "request_id": ctx.request_id, "cost_micros": None, "created_at": prepared.created_at,
            "completed_at": None, "expires_at": prepared.created_at + self.retention_s(ctx), "next_run_at": None,
            "attempts": 0, "claimed_by": None, "claimed_until": None,
        }  # fmt: skip

    def retention_s(self, ctx: Context) -> float:
        """How long a response is kept: `responses_retention_days` where the key's metadata sets it (accounts
        have no settings of their own to hold it yet), else the configured default."""
        own = ctx.principal.metadata.get("responses_retention_days") if ctx.principal.metadata else None
        days = own if isinstance(own, (int, float)) and not isinstance(own, bool) and own > 0 else None
        return float(days or self.config.retention_days) * DAY_S

    # ---- background -------------------------------------------------------------------------------------

    async def start_background(
        self, ctx: Context, request: GatewayRequest[ResponsesRequest], raw: dict[str, Any]
    ) -> dict[str, Any]:
        """Insert a queued background row (checked first as a run would be) and answer it at once."""
        prepared = await self.begin(ctx, request)
        model, provider, custom = request.body.model, request.options.provider_name, self.pipeline.custom
        if custom is None or not custom.claims(model, provider):
            self.pipeline.resolve(ctx, model, provider, CHAT)  # an unknown or forbidden model: 404/403 now
        response = self.skeleton(prepared, "queued")
        values = self._row(ctx, prepared, response, "queued", background=True)
        values |= {"request": dumps(raw), "next_run_at": prepared.created_at}
        await self.rows.insert(values)
        self.wake()
        return response

    # ---- reading --------------------------------------------------------------------------------------

    async def owned(self, ctx: Context, response_id: str) -> StoredResponse:
        row = await self.rows.get(response_id, owner_of(ctx.principal)) if plausible(response_id) else None
        if row is None:
            raise not_found(response_id)
        return row

    async def retrieve(self, ctx: Context, response_id: str) -> dict[str, Any]:
        return shown(await self.owned(ctx, response_id))

    async def delete(self, ctx: Context, response_id: str) -> dict[str, Any]:
        row = await self.rows.delete(response_id, owner_of(ctx.principal)) if plausible(response_id) else None
        if row is None:
            raise not_found(response_id)
        return {"id": response_id, "object": "response", "deleted": True}

    async def cancel(self, ctx: Context, response_id: str) -> dict[str, Any]:
        """Cancel a background response: queued or running, it ends `cancelled` (a running one is charged
        for what it produced); a finished one is answered as it is. Any other response is a 400."""
        owner = owner_of(ctx.principal)
        row = await self.rows.get(response_id, owner) if plausible(response_id) else None
        if row is None:
            raise not_found(response_id)
        if not row.background:
            raise InvalidRequest(
                "Only responses created with background set to true can be cancelled.", param="response_id",
                code="not_background",
            )  # fmt: skip
        if row.status in ACTIVE:
            row = await self.rows.cancel(response_id, owner) or row
        if row.status == "cancelled" and row.response.get("status") != "cancelled":
            response = shown(row)
            await self.rows.update(response_id, {"response": dumps(response)}, statuses=("cancelled",))
            return response
        return shown(row)

    async def input_items(
        self, ctx: Context, response_id: str, after: str | None, limit: int, order: str
    ) -> dict[str, Any]:
        """OpenAI's ResponseItemList page of the response's input items."""
        items = (await self.owned(ctx, response_id)).input_items
        if order == "desc":
            items = items[::-1]
        if after is not None:
            ids = [i.get("id") for i in items]
            if after not in ids:
                raise InvalidRequest(f"No input item with id '{after}' to list after.", param="after")
            items = items[ids.index(after) + 1 :]
        return cast(dict[str, Any], list_page(items[:limit], len(items) > limit))

    async def input_tokens(self, ctx: Context, request: GatewayRequest[ResponsesRequest]) -> dict[str, Any]:
        """`POST /v1/responses/input_tokens`: the prompt this request would send, counted as the gateway
        estimates prompts (accounts/delivered.py), history included. Nothing is called, nothing billed."""
        chat = self.translated(await self.begin(ctx, request), stream=False)
        return {"object": "response.input_tokens", "input_tokens": counted_prompt_tokens(chat.body)}

    async def follow(self, ctx: Context, response_id: str, after: int) -> AsyncIterator[Event]:
        """A background response's events after `after` (a sequence number), then the new ones as they are
        stored, until it has finished. The row is checked now, so an unknown id is an HTTP 404."""
        row = await self.owned(ctx, response_id)
        if not row.background:
            raise InvalidRequest(
                "Only responses created with background set to true can be streamed after they were created.",
                param="stream", code="not_background",
            )  # fmt: skip
        return self._follow(response_id, after)

    async def _follow(self, response_id: str, after: int) -> AsyncIterator[Event]:
        while True:
            found = await self.rows.events_after(response_id, after)
            for seq, data in found:
                after = seq
                event = orjson.loads(data)
                yield event
                if event.get("type") in _FINAL:
                    return
            if found:
                continue
            row = await self.rows.get(response_id)
            # a cancelled run still holds its row while it appends its closing events: followed until let go
            if row is None or (row.status in TERMINAL and (row.claimed_until or 0) < time.time()):
                for _seq, data in await self.rows.events_after(response_id, after):
                    yield orjson.loads(data)
                return
            await asyncio.sleep(self.config.follow_poll_s)


def settled_usage(ctx: Context) -> dict[str, Any]:
    """The usage a settled stream was charged for (accounts/guard.py prices the same): the provider's, or for a
    stream cut before it came, the prompt as counted and the output estimated from what was delivered."""
    if ctx.usage:
        return dict(ctx.usage)
    prompt = ctx.prompt_tokens_counted if ctx.prompt_tokens_counted is not None else ctx.prompt_tokens_estimate
    output = estimate_output_tokens(ctx.output_chars)
    return {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output}


async def _until(events: AsyncIterator[Event], stopping: Callable[[], bool]) -> AsyncIterator[Event]:
    """`events` until `stopping()` (checked after each), then closed (a native stream: settled there)."""
    try:
        async for event in events:
            yield event
            if stopping():
                return
    finally:
        await aclose_quietly(events)


async def aclose_quietly(events: AsyncIterator[Event]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
