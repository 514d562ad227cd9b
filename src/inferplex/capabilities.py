"""What a provider and a model can do, and the one place that decides what happens when they cannot.

Each native adapter declares a `ProviderCapabilities` (one `Support` level per feature); each model declares
its own flags in the config (`capabilities: tools, vision, json_schema, streaming`); a target may also name
request fields it rejects outright (an OpenAI-compatible vendor profile's `unsupported`). `plan()` reads
them, never a model name, and returns a `Plan`: the parameters to drop, and which emulations to run (n > 1 by
parallel calls, json_schema by a forced tool, streaming from a buffered call). A feature the target cannot
serve is never lost silently: with `drop_params: true` (the default) it is dropped and named in the
`x-inferplex-dropped-params` header; with `drop_params: false` the request is a 400 naming the parameter.

`python -m inferplex.providers.matrix --markdown` prints the provider x feature matrix in docs/providers.md,
generated from the same declarations the adapters use, so the document cannot drift from the code.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from inferplex.canonical import ChatRequest, ContentPart, Message, ResponseFormat
from inferplex.config import Capabilities as ModelCapabilities
from inferplex.errors import InvalidRequest
from inferplex.gateway_request import GatewayRequest


class Support(enum.Enum):
    NATIVE = "native"  # the provider does it itself
    EMULATED = "emulated"  # the gateway does it faithfully with what the provider has
    DROPPED = "dropped"  # not possible: dropped and named (or a 400 with drop_params: false)
    REFUSED = "refused"  # not possible and not droppable without changing the conversation: always a 400


N, E, D, R = Support.NATIVE, Support.EMULATED, Support.DROPPED, Support.REFUSED


@dataclass(frozen=True, slots=True)
class ProviderCapabilities:
    """One adapter's declaration. Field order is the column order of the generated matrix."""

    streaming: Support = N
    tools: Support = N
    tool_choice_required: Support = N
    parallel_tool_calls: Support = N
    vision: Support = N
    audio_input: Support = R
    json_schema: Support = N
    json_object: Support = N
    n: Support = N
    logprobs: Support = N
    seed: Support = N
    frequency_penalty: Support = N
    presence_penalty: Support = N
    logit_bias: Support = N
    stop: Support = N
    prompt_caching: Support = N
    reasoning: Support = N
    reasoning_effort: Support = N
    openai_options: Support = N
    # Anthropic's own request details (from the Anthropic dialect, or sent as extra fields): extended
    # thinking, top_k sampling, and cache_control on content parts and tools.
    thinking: Support = N
    top_k: Support = N
    cache_control: Support = N
    notes: tuple[str, ...] = field(default=(), compare=False)


# Scalar request fields whose only remedy is to be dropped; feature name -> the fields it covers.
_SCALARS: dict[str, tuple[str, ...]] = {
    "logprobs": ("logprobs", "top_logprobs"),
    "seed": ("seed",),
    "frequency_penalty": ("frequency_penalty",),
    "presence_penalty": ("presence_penalty",),
    "logit_bias": ("logit_bias",),
    "stop": ("stop",),
    "reasoning_effort": ("reasoning_effort",),
    "thinking": ("thinking",),
    "top_k": ("top_k",),
    # OpenAI-only request options with no counterpart elsewhere (audio output, predicted outputs, ...)
    "openai_options": ("modalities", "audio", "prediction", "web_search_options", "store", "verbosity"),
}

# Values that ask for nothing, so need no support: `store: false`, text-only `modalities`, thinking disabled.
_HARMLESS: tuple[Any, ...] = (None, False, ["text"], {"type": "disabled"})

# What a json_object request becomes when it has to be emulated with a forced tool.
ANY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": True}


@dataclass(frozen=True, slots=True)
class Plan:
    """What to send and how to run it. `request` is the caller's request body with dropped fields cleared."""

    request: ChatRequest
    dropped: tuple[str, ...] = ()
    fan_out: int = 1
    json_tool: JsonTool | None = None
    buffered_stream: bool = False
    cleared: tuple[str, ...] = ()  # request fields removed or rewritten

    def apply(self, request: GatewayRequest[ChatRequest]) -> GatewayRequest[ChatRequest]:
        """`request` with this plan's body: itself when nothing was cleared, so its wire stays the caller's."""
        return request if self.request is request.body else request.replace(self.request)


@dataclass(frozen=True, slots=True)
class JsonTool:
    """A json_schema emulated by a tool the model is forced to call; its arguments are the answer."""

    name: str
    schema: dict[str, Any]
    description: str | None = None


class _Decider:
    def __init__(self, allow_drop: bool, provider_name: str, model_name: str) -> None:
        self.allow_drop = allow_drop
        self.where = f"provider {provider_name} (model {model_name})"
        self.dropped: list[str] = []
        self.updates: dict[str, Any] = {}

    def cannot(self, param: str, support: Support, what: str, clear: tuple[str, ...] = ()) -> None:
        """Drop `param` (and clear `clear` fields), or refuse with a 400 naming it."""
        if support is Support.REFUSED or not self.allow_drop:
            hint = "" if support is Support.REFUSED else " (send drop_params: true to drop it instead)"
            raise InvalidRequest(f"'{param}' is not supported: {self.where} cannot {what}{hint}.", param=param)
        self.dropped.append(param)
        for name in clear or (param,):
            self.updates[name] = None


def uses_cache_control(request: ChatRequest) -> bool:
    """Whether `cache_control` is set on the request, a message (a tool result), a content part or a tool
    (Anthropic's prompt caching)."""
    if (request.model_extra or {}).get("cache_control") is not None:
        return True
    for m in request.messages:
        if (m.model_extra or {}).get("cache_control"):
            return True
        if isinstance(m.content, list) and any((p.model_extra or {}).get("cache_control") for p in m.content):
            return True
    return any((t.model_extra or {}).get("cache_control") for t in request.tools or ())


def _has_part(messages: list[Message], part_type: str) -> bool:
    return any(isinstance(m.content, list) and any(p.type == part_type for p in m.content) for m in messages)


def _without_parts(messages: list[Message], part_type: str) -> list[Message]:
    out = []
    for m in messages:
        if isinstance(m.content, list) and any(p.type == part_type for p in m.content):
            kept: list[ContentPart] = [p for p in m.content if p.type != part_type]
            if not kept:
                kept = [ContentPart(type="text", text="")]
            m = m.model_copy(update={"content": kept})
        out.append(m)
    return out


def plan(
    gateway_request: GatewayRequest[ChatRequest],
    provider: ProviderCapabilities,
    model: ModelCapabilities,
    *,
    provider_name: str,
    model_name: str,
    stream: bool = False,
    unsupported: Collection[str] = (),
) -> Plan:
    """Decide, from the declarations alone, how this request is served on this target.

    `unsupported` names request fields the target rejects whatever their value (a vendor profile's): each
    one present is dropped and named, or refused with `drop_params: false` unless its value asks for
    nothing (`store: false`), which is dropped either way. `drop_params` is the request's option."""
    request = gateway_request.body
    d = _Decider(gateway_request.options.drop_params, provider_name, model_name)
    set_fields = request.model_fields_set
    if unsupported:
        _drop_unsupported(request, unsupported, d)
    for feature, names in _SCALARS.items():
        support = getattr(provider, feature)
        if support is not Support.NATIVE:
            for name in names:
                if name in set_fields and getattr(request, name, None) not in _HARMLESS:
                    d.cannot(name, support, f"honour {name}")
    if provider.cache_control is not Support.NATIVE and uses_cache_control(request):
        d.cannot("cache_control", provider.cache_control, "cache prompt prefixes", ())
    fan_out = 1
    if request.n is not None and request.n > 1:
        if provider.n is Support.EMULATED:
            fan_out = request.n
            d.updates["n"] = None
        elif provider.n is not Support.NATIVE:
            d.cannot("n", provider.n, "return more than one choice")
    if request.tools:
        support = provider.tools if model.tools else Support.DROPPED
        if support is not Support.NATIVE:
            d.cannot("tools", support, "call tools", ("tools", "tool_choice", "parallel_tool_calls"))
    if request.tools and request.tool_choice == "required" and provider.tool_choice_required is not Support.NATIVE:
        d.cannot("tool_choice", provider.tool_choice_required, "force a tool call")
    if request.parallel_tool_calls is False and request.tools and provider.parallel_tool_calls is not Support.NATIVE:
        d.cannot("parallel_tool_calls", provider.parallel_tool_calls, "limit tool calls to one")
    messages = request.messages
    if _has_part(messages, "image_url"):
        support = provider.vision if model.vision else Support.DROPPED
        if support is not Support.NATIVE:
            d.cannot("image_url", support, "read images", ("messages",))
            d.updates["messages"] = messages = _without_parts(messages, "image_url")
    if _has_part(messages, "input_audio"):
        if provider.audio_input is not Support.NATIVE:
            d.cannot("input_audio", provider.audio_input, "hear audio", ("messages",))
            d.updates["messages"] = messages = _without_parts(messages, "input_audio")
    json_tool = _json_plan(request.response_format, provider, model, d)
    buffered_stream = False
    if stream and not (model.streaming and provider.streaming is Support.NATIVE):
        buffered_stream = True
    req = request.model_copy(update=d.updates) if d.updates else request
    return Plan(req, tuple(d.dropped), fan_out, json_tool, buffered_stream, tuple(d.updates))


def _drop_unsupported(request: ChatRequest, names: Collection[str], d: _Decider) -> None:
    extra = request.model_extra or {}
    for name in names:
        value = getattr(request, name) if name in type(request).model_fields else extra.get(name)
        if value in _HARMLESS:
            d.dropped.append(name)
            d.updates[name] = None
        else:
            d.cannot(name, Support.DROPPED, f"honour {name}")


def _json_plan(
    fmt: ResponseFormat | None, provider: ProviderCapabilities, model: ModelCapabilities, d: _Decider
) -> JsonTool | None:
    if fmt is None or fmt.type == "text":
        return None
    if not model.json_schema:
        d.cannot("response_format", Support.DROPPED, "guarantee JSON output")
        return None
    if fmt.type == "json_object":
        support = provider.json_object
        if support is Support.EMULATED:
            d.updates["response_format"] = None
            return JsonTool("json_answer", dict(ANY_OBJECT_SCHEMA), "Answer with one JSON object.")
    else:
        support = provider.json_schema
        if support is Support.EMULATED and fmt.json_schema is not None:
            d.updates["response_format"] = None
            spec = fmt.json_schema
            return JsonTool(spec.name, spec.schema_ or dict(ANY_OBJECT_SCHEMA), spec.description)
    if support is not Support.NATIVE:
        d.cannot("response_format", support, f"produce {fmt.type} output")
    return None
