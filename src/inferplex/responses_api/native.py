"""The native pass-through: a Responses request sent as it is to upstreams that speak Responses themselves.

`/v1/responses` is translated to chat for most providers (responses_api/translate.py). When every deployment
the request could be routed to is on a provider that speaks Responses (the operator's opt-in,
`options.responses_api: true`, providers/openai_responses.py), translating would only lose things: hosted
tools (web search, file search, code interpreter, MCP...), reasoning items, OpenAI's own event stream. Then
the service (responses_api/service.py) calls `maybe_native` once, before translating, and gets back the
upstream's answer relayed exactly (buffered, or its events as they come), metered, limited and routed with
retries and fallbacks as chat is.

What the upstream is sent is the caller's body with three changes (`upstream_body`, a pure function): the
gateway's stored history goes in front of `input` (the gateway keeps conversations, so follow-ups work on
any provider and any replica), `previous_response_id` and `background` are removed (both are the
gateway's), and `store` is false (nothing is kept upstream; the gateway stores). What the caller gets is
the upstream's response with the gateway's own fields in it (`present`): the gateway's response id, the
public model name, and the caller's `store`, `background` and `previous_response_id`.

It stays on the translated road (returns None) when a stage only chat has would have to run: the request's
or the key's processors, a model with its own system prompt (prompting/assembly.py), a custom endpoint
(`name@custom`), or any deployment (fallbacks included) whose provider does not speak Responses.

The service's one call, after reading the history and before translating (`to_chat` refuses hosted tools):

    native = await maybe_native(self.pipeline, ctx, request, history, response_id=response_id)
    if isinstance(native, NativeStream):   # request.body.stream: the events, stored before the last one
        return native.relay(store)          # store: async (final response) -> None, or None for store:false
    if native is not None:                  # buffered: the response object, settled (ctx.cost_micros set)
        ...store it, return it              # its history: previous history + input items + native["output"]
    ...translate as before

`self.pipeline` (not `services.pipeline`): a batch runner's pipeline defers settlement. A background run
iterates `native.relay(None)` like the translated events.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

import orjson

from inferplex.accounts.pricing import estimate_output_tokens
from inferplex.catalog import Resolved
from inferplex.config import ModelConfig
from inferplex.context import Context
from inferplex.errors import GatewayError, InternalError
from inferplex.families.base import Family, Unit
from inferplex.families.chat import CHAT
from inferplex.gateway_request import GatewayRequest
from inferplex.pipeline import Admission, Pipeline, failure_message, first_item
from inferplex.providers.openai_responses import TERMINAL, ResponsesUpstream
from inferplex.responses import Usage
from inferplex.responses_api.carried import for_openai
from inferplex.responses_api.events import ERROR_CODES
from inferplex.responses_api.wire import ResponsesRequest
from inferplex.routing.options import route_options
from inferplex.targets import Target

log = logging.getLogger("inferplex")

Event = dict[str, Any]

# The caller's fields the gateway answers for itself: never sent upstream (store is sent as false).
GATEWAY_FIELDS = ("previous_response_id", "background")


# ---- the body, and the answer as the caller sees it (pure) -------------------------------------------------


def replayable(item: Mapping[str, Any]) -> bool:
    """Whether a stored history item can be sent back to an upstream that keeps nothing (`store: false`): a
    reasoning item only with its `encrypted_content` (without it the upstream would look its id up, and
    find nothing); every other item carries its whole content. Items the translation wrote for other
    providers (their signed thinking, Gemini's signatures) are first made OpenAI's (`carried.for_openai`)."""
    return item.get("type") != "reasoning" or bool(item.get("encrypted_content"))


# Stored items whose `id` the gateway made up and the upstream has no field for (a user, system or developer
# message: OpenAI refuses the unknown parameter) or need not know (a tool's output).
_OWN_IDS = ("function_call_output",)


def as_input(item: Mapping[str, Any]) -> dict[str, Any]:
    """A stored history item as the upstream takes it back in `input`: as stored, without the ids the
    gateway gave the caller's own input items (`translate.input_items`)."""
    out = dict(item)
    kind = out.get("type", "message")
    if kind in _OWN_IDS or (kind == "message" and out.get("role") != "assistant"):
        out.pop("id", None)
    return out


def replayed(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The history as the upstream takes it back (`for_openai`, `replayable`, `as_input`). A function call
    that followed a reasoning item left out loses its id too: the id pairs it with that reasoning, and
    OpenAI refuses a call "provided without its required reasoning item"; without one (it is optional) the
    call is taken as the caller's."""
    kept: list[dict[str, Any]] = []
    orphaned = False
    for stored in history:
        item = for_openai(dict(stored))
        if item is None or not replayable(item):
            orphaned = True
            continue
        item = as_input(item)
        if item.get("type") == "function_call":
            if orphaned:
                item.pop("id", None)
        else:
            orphaned = False
        kept.append(item)
    return kept


def upstream_body(wire: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the upstream is sent (its `model` is set per deployment): the caller's JSON (gateway options
    already out) with the history in front of `input`, `store: false`, and the gateway's own fields out."""
    body = {k: v for k, v in wire.items() if k not in GATEWAY_FIELDS}
    body["store"] = False
    kept = replayed(history)
    if kept:
        current = wire.get("input")
        if isinstance(current, str):  # OpenAI's shorthand: one user message
            current = [{"type": "message", "role": "user", "content": current}]
        body["input"] = [*kept, *(current or ())]
    return body


def present(response: dict[str, Any], request: ResponsesRequest, *, response_id: str, model: str) -> dict[str, Any]:
    """The upstream's response object as the caller sees it (changed in place and returned): the gateway's
    id and public model name, and what the caller asked for where the gateway changed it upstream."""
    response["id"] = response_id
    response["model"] = model
    response["store"] = request.store
    response["background"] = bool(request.background)
    response["previous_response_id"] = request.previous_response_id
    return response


def chat_usage(usage: object) -> Usage | None:
    """A Responses `usage` object in the chat shape the guard prices (accounts/pricing.tokens_of)."""
    if not isinstance(usage, dict):
        return None
    prompt, output = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
    details = usage.get("input_tokens_details") or {}
    cached, written = _int(details.get("cached_tokens")), _int(details.get("cache_write_tokens"))
    reasoning = _int((usage.get("output_tokens_details") or {}).get("reasoning_tokens"))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": _int(usage.get("total_tokens")) or prompt + output,
        "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def delta_chars(event: Mapping[str, Any]) -> int:
    """Characters of output an event delivers (text, refusal, arguments, reasoning): what a stream cut before
    its usage is billed on."""
    kind = event.get("type")
    delta = event.get("delta")
    if isinstance(kind, str) and kind.endswith(".delta") and isinstance(delta, str):
        return len(delta)
    return 0


# ---- the family: how the guard estimates a native request ---------------------------------------------------


def estimate_input(body: ResponsesRequest) -> int:
    """A deliberate over-estimate of the prompt (one token per 3 JSON characters of the whole body, history
    included), as chat's estimate is, so the reservation covers the call."""
    return math.ceil(len(body.model_dump_json(exclude_none=True)) / 3) + 8


def max_output(body: ResponsesRequest, model: ModelConfig, default: int) -> int:
    return body.max_output_tokens or model.max_output or default


# Priced and limited as chat (same model type, same token unit); not in families/registry: only this
# module routes it, with its own calls (`Pipeline.run` would read the usage in chat's shape).
NATIVE_RESPONSES: Family[ResponsesRequest, ResponsesUpstream, dict[str, Any]] = Family(
    name="responses",
    model_type="chat",
    interface=ResponsesUpstream,
    unit=Unit.TOKENS,
    estimate_input=estimate_input,
    max_output=max_output,
)


# ---- the decision, and the call -----------------------------------------------------------------------------


def _native(pipeline: Pipeline, targets: Sequence[Target]) -> bool:
    for target in targets:
        adapter = pipeline.adapters.get(target.provider.name)
        if not isinstance(adapter, ResponsesUpstream) or not adapter.speaks_responses(target):
            return False
    return True


def _every_deployment_native(pipeline: Pipeline, resolved: Resolved, request: GatewayRequest[Any]) -> bool:
    """Whether every deployment the router could pick speaks Responses: the model's, and its fallbacks'
    (the request's `models`, else the model's configured fallbacks; ones that do not resolve are skipped
    by the router too)."""
    if not _native(pipeline, resolved.targets):
        return False
    names = request.options.models if request.options.models is not None else resolved.model.routing.fallbacks
    for name in names:
        if name == resolved.model.name:
            continue
        try:
            other = pipeline.catalog.resolve(name, kind=resolved.model.type)
        except GatewayError:
            continue
        if not _native(pipeline, other.targets):
            return False
    return True


def _chat_only_stages(pipeline: Pipeline, ctx: Context, request: GatewayRequest[ResponsesRequest]) -> bool:
    """Whether a stage that only the chat road has must run: processors (the request's, or the key's
    defaults and enforced ones), or a custom endpoint. The processor factory reads only the options and
    the principal, so it is asked with this request as it stands."""
    processors = pipeline._processors
    if processors is not None and processors(ctx, cast(Any, request)) is not None:
        return True
    custom = pipeline.custom
    return custom is not None and custom.claims(request.body.model, request.options.provider_name)


async def maybe_native(
    pipeline: Pipeline,
    ctx: Context,
    request: GatewayRequest[ResponsesRequest],
    history: Sequence[Mapping[str, Any]],
    *,
    response_id: str,
) -> dict[str, Any] | NativeStream | None:
    """The request served by an upstream that speaks Responses, or None: translate it (nothing was done, no
    reservation held). `pipeline` is the service's (a batch runner's defers settlement); `history` the
    stored items `previous_response_id` continues (oldest first); `response_id` the gateway's id for this
    response. Buffered: the response object, settled (`ctx.cost_micros` is set). Streamed
    (`request.body.stream`): a `NativeStream` of the upstream's events, the first one already pulled; it
    settles when its terminal event passes (before it is yielded) or when it is closed. Errors are
    `GatewayError`s, raised before anything is sent to the caller (a failed call is charged nothing)."""
    if _chat_only_stages(pipeline, ctx, request):
        return None
    body = request.body
    resolved = pipeline.resolve(ctx, body.model, request.options.provider_name, CHAT)
    model = resolved.model
    if model.system_prompt is not None or model.template_render_mode != "off":
        return None  # the model's own prompt is assembled on the chat road
    if not _every_deployment_native(pipeline, resolved, request):
        return None
    ctx.route = route_options(cast(Any, request))
    sent = upstream_body(request.wire(), history)
    counted = request.replace(body.model_copy(update={"input": sent.get("input")}))
    # The response cache keys the upstream's body, history included; a native stream's events are not cached.
    cached = None if body.stream else await pipeline.look_up(ctx, NATIVE_RESPONSES, model, counted, stream=False)
    admission = await pipeline.guard.admit(ctx, NATIVE_RESPONSES, model, counted)
    # A stream cut before its usage is billed on the prompt as the gateway counts it (4 characters a token).
    prompt = [sent.get("instructions"), sent.get("input"), sent.get("tools")]
    ctx.prompt_tokens_counted = estimate_output_tokens(len(orjson.dumps(prompt)))

    def public(response: dict[str, Any]) -> dict[str, Any]:
        name = ctx.target.model.name if ctx.target is not None else model.name
        return present(response, body, response_id=response_id, model=name)

    def upstream(target: Target) -> ResponsesUpstream:
        return cast(ResponsesUpstream, pipeline.adapters[target.provider.name])

    if not body.stream:

        async def call(target: Target) -> dict[str, Any]:
            ctx.timings.mark_upstream_start()
            return await upstream(target).responses({**sent, "model": target.upstream_model}, target, ctx.info)

        if cached is not None and cached.answer is not None:
            answer = cached.answer
        else:
            answer = await pipeline.routed_and_kept(ctx, resolved, admission, call)
        ctx.usage = chat_usage(answer.get("usage"))
        ctx.response = response = public(answer)
        await admission.settle(ctx, ctx.usage, failed=False)
        return response

    async def opened(target: Target) -> tuple[Event, AsyncIterator[Event]]:
        ctx.timings.mark_upstream_start()
        events = upstream(target).responses_stream({**sent, "model": target.upstream_model}, target, ctx.info)
        return await first_item(events, target), events

    first, rest = await pipeline.routed(ctx, resolved, admission, opened, stream=True)
    return NativeStream(first, rest, ctx, admission, public)


class NativeStream:
    """The upstream's events, relayed as they come (sequence numbers and all), each event's `response`
    shown as the caller sees it (`present`). `response` is the latest response object seen: the final one
    once the terminal event (`response.completed`, `.incomplete`, `.failed`) has passed.

    Settled like chat's stream (pipeline.ChatStream): at the terminal event with its usage, before the event
    is handed on (so its cost is known when the caller gets it: the service stores it first); on `aclose`
    (the caller left) for what was delivered; or, when the upstream fails mid-way, at once, for what was
    delivered (nothing if no output came), with the cost in the error's message. `fail(error)` gives the
    `response.failed` event that ends such a stream, numbered after the last event relayed."""

    def __init__(
        self,
        first: Event,
        rest: AsyncIterator[Event],
        ctx: Context,
        admission: Admission,
        public: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> None:
        self.ctx = ctx
        self.response: dict[str, Any] | None = None
        self._first: Event | None = first
        self._rest = rest
        self._admission: Admission | None = admission
        self._public = public
        self._sequence = -1
        self._ended = False

    def __aiter__(self) -> NativeStream:
        return self

    async def __anext__(self) -> Event:
        if self._ended:
            raise StopAsyncIteration
        event = self._first
        self._first = None
        if event is None:
            try:
                event = await self._rest.__anext__()
            except StopAsyncIteration:
                self._ended = True
                raise
            except GatewayError as err:
                await self._failed(err)
                raise
            except Exception as exc:  # a defect, not the upstream's error: logged, settled as a failure
                log.exception("native responses stream failed", extra={"request_id": self.ctx.request_id})
                internal = InternalError(f"The stream failed (request id {self.ctx.request_id}).")
                await self._failed(internal)
                raise internal from exc
        return await self._observe(event)

    async def _observe(self, event: Event) -> Event:
        ctx = self.ctx
        sequence = event.get("sequence_number")
        if isinstance(sequence, int):
            self._sequence = sequence
        produced = delta_chars(event)
        if produced:
            ctx.output_chars += produced
            ctx.timings.mark_first_token()
        response = event.get("response")
        if isinstance(response, dict):
            self.response = self._public(response)
        if event.get("type") in TERMINAL:
            self._ended = True
            ctx.usage = chat_usage((self.response or {}).get("usage"))
            ctx.response = self.response
            await self._settle(failed=False)
        return event

    async def relay(self, store: Callable[[dict[str, Any]], Awaitable[None]] | None = None) -> AsyncIterator[Event]:
        """The events as the caller gets them, the stream closed at the end: `store(response)` is awaited
        with the final response before the terminal event is yielded (so a follow-up finds it at once),
        and an upstream that fails mid-way ends the stream with `fail(...)`'s `response.failed`, stored
        first the same way. What the service's stream and background runs iterate."""
        try:
            try:
                async for event in self:
                    if store is not None and self.response is not None and event.get("type") in TERMINAL:
                        await store(self.response)
                    yield event
                return
            except Exception as exc:
                err = (
                    exc
                    if isinstance(exc, GatewayError)
                    else InternalError(f"The stream failed ({self.ctx.request_id}).")
                )
                closing = self.fail({"code": err.code or err.type, "message": err.message})
            await self.aclose()
            if store is not None and self.response is not None:
                await store(self.response)
            for event in closing:
                yield event
        finally:
            await self.aclose()

    def fail(self, error: Mapping[str, Any]) -> list[Event]:
        """The `response.failed` event that ends a stream whose upstream failed mid-way (`error`: `code`
        and `message`; a code outside OpenAI's `ResponseErrorCode` is `server_error`, as the translated
        stream's), with the response as far as it got."""
        code = error.get("code")
        failure = {"code": code if code in ERROR_CODES else "server_error", "message": str(error.get("message"))}
        response = {**(self.response or {}), "status": "failed", "error": failure}
        self.response = response
        self._sequence += 1
        return [{"type": "response.failed", "sequence_number": self._sequence, "response": response}]

    async def _failed(self, err: GatewayError) -> None:
        ctx = self.ctx
        ctx.failure = err
        self._ended = True
        await self._settle(failed=not ctx.output_chars)
        if ctx.principal.account_id is not None:  # billed to an account: the error says what it cost
            err.message = failure_message(ctx)

    async def _settle(self, *, failed: bool) -> None:
        admission, self._admission = self._admission, None
        if admission is None:
            return
        self.ctx.timings.mark_upstream_end()
        await admission.settle(self.ctx, self.ctx.usage, failed=failed)

    async def aclose(self) -> None:
        try:
            aclose = getattr(self._rest, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            await self._settle(failed=False)
