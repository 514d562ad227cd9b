"""The request as it travels: the validated body, the gateway's own options, and the JSON an upstream is sent.

A caller's JSON mixes two things: the request for the model (OpenAI's fields, and fields the gateway does not
know, which pass through to OpenAI-compatible upstreams) and options addressed to the gateway itself
(routing, processors, logging, tags, `drop_params`, Unify's platform arguments). The dialect takes the
gateway's keys out once (`parse_request`) into one typed `GatewayOptions`, so no later stage reads a string
key, and none of those keys can reach an upstream by any road.

Stages that rewrite the request (processors, the capability planner, the buffered-stream path) rewrite the
body only, with `replace`; the upstream JSON (`wire()`) is derived from it again when asked for. Until a stage
does, `wire()` is the caller's own decoded object: the fast path forwards it without a copy or a second
serialisation, as it did when the pipeline carried the raw JSON beside the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from inferplex.canonical import EmbeddingRequest, parse
from inferplex.errors import InvalidRequest
from inferplex.processors.spec import Requested, requested

B = TypeVar("B", bound=BaseModel)  # a family's canonical request
C = TypeVar("C", bound=BaseModel)

# How a dialect turns the JSON derived from a rewritten body into what an OpenAI-compatible upstream is sent
# (the Anthropic dialect strips its own keys); None: as it is.
Forward = Callable[[dict[str, Any]], dict[str, Any]]

# The keys addressed to the gateway: taken out of the caller's JSON by the dialect, never forwarded.
GATEWAY_KEYS = frozenset(
    {
        # routing (docs/routing.md): OpenRouter's provider object or OneInfer's provider name, and the rest
        "provider",
        "models",
        "endpoint_id",
        "region",
        "timeout",
        # capability planning, the usage log, and Unify's platform arguments (docs/dialects.md)
        "drop_params",
        "tags",
        "log_query_body",
        "log_response_body",
        "use_custom_keys",
        "signature",
        # request processors (docs/processors.md), ours and Inferada's spelling
        "processors",
        "inferada",
        # the response cache's per-request control, as LiteLLM's clients send it (docs/caching.md)
        "cache",
    }
)

NOT_REQUESTED = Requested(None)  # the request names no processors (the key's defaults may still run)
_FLAGS = ("log_query_body", "log_response_body", "drop_params", "use_custom_keys")


@dataclass(frozen=True, slots=True)
class GatewayOptions:
    """The gateway's own options of one request, validated. Omitted log flags are None: the operator decides."""

    provider: str | dict[str, Any] | None = None  # a provider name, or OpenRouter's preferences object
    models: tuple[str, ...] | None = None
    endpoint_id: str | None = None
    region: str | None = None
    timeout: float | None = None
    drop_params: bool = True
    tags: list[str] = field(default_factory=list)  # normalised: blanks dropped; never mutated
    log_query_body: bool | None = None
    log_response_body: bool | None = None
    processors: Requested = NOT_REQUESTED
    use_custom_keys: bool = False
    signature: str | None = None
    # `inferada.use_default_prompt` (the name is inferred): false leaves the model's default prompt out.
    use_default_prompt: bool = True
    # Set by a processor, never by the caller: route only to deployments running there (`require_local`).
    location: str | None = None
    # Set by a dialect, never by the caller: with every breaker open, answer 503 at once rather than probe
    # (InferExchange: "a model with no serving capacity answers 503"); None: the model's own setting.
    refuse_when_all_open: bool | None = None
    # The body's `cache` object (LiteLLM's spelling: no-cache, no-store, ttl, s-maxage, namespace, use-cache),
    # checked to be an object here and read by the cache (cache/control.py) only for a model it caches.
    cache: Mapping[str, Any] | None = None

    @property
    def provider_name(self) -> str | None:
        return self.provider if isinstance(self.provider, str) else None

    @property
    def routes(self) -> bool:
        """Whether any routing preference was given (the common request gives none)."""
        return (
            isinstance(self.provider, dict)
            or self.models is not None
            or self.endpoint_id is not None
            or self.region is not None
            or self.timeout is not None
            or self.location is not None
            or self.refuse_when_all_open is not None
        )


NO_OPTIONS = GatewayOptions()


class GatewayRequest(Generic[B]):
    """One request on its way through the gateway: `body` (the canonical request; the caller's unknown fields
    are its pydantic extras), `options`, and `wire()`, the OpenAI-shaped JSON an OpenAI-compatible upstream
    is sent. Treat it as immutable: a stage that changes the request returns `replace(new_body)`."""

    __slots__ = ("_forward", "_wire", "body", "options")
    body: B
    options: GatewayOptions

    def __init__(
        self,
        body: B,
        options: GatewayOptions = NO_OPTIONS,
        wire: dict[str, Any] | None = None,
        forward: Forward | None = None,
    ) -> None:
        self.body = body
        self.options = options
        self._wire = wire
        self._forward = forward

    def wire(self) -> dict[str, Any]:
        """The caller's JSON without the gateway's keys while the body is untouched (the same object, not a
        copy: callers must not mutate it), else derived from the body once and kept."""
        wire = self._wire
        if wire is None:
            wire = self._wire = derive_wire(self.body, self._forward)
        return wire

    def replace(self, body: C) -> GatewayRequest[C]:
        """The same request with another body: its wire is derived from that body when asked for."""
        return GatewayRequest(body, self.options, None, self._forward)

    def with_options(self, options: GatewayOptions) -> GatewayRequest[B]:
        """The same request with other gateway options (a processor's routing constraint): the options never
        reach an upstream, so the wire, and the fast path's object, stay as they are."""
        return GatewayRequest(self.body, options, self._wire, self._forward)

    def __repr__(self) -> str:
        return f"GatewayRequest({self.body!r}, {self.options!r})"


def derive_wire(body: BaseModel, forward: Forward | None = None) -> dict[str, Any]:
    """The body as OpenAI-shaped JSON: only what the caller (or a stage) set, and a top-level field a stage
    cleared (set to None) omitted rather than sent as null; nested values (a schema's `"default": null`) as
    they are."""
    data = body.model_dump(mode="json", by_alias=True, exclude_unset=True)
    out = {k: v for k, v in data.items() if v is not None and k not in GATEWAY_KEYS}
    return forward(out) if forward is not None else out


# ---- the parser ------------------------------------------------------------------------------------------


def split(data: dict[str, Any]) -> dict[str, Any]:
    """Take the gateway's keys out of a decoded JSON object (in place: it is the gateway's own copy) and
    return them; the common request has none, which costs one set test."""
    if data.keys().isdisjoint(GATEWAY_KEYS):
        return {}
    return {k: data.pop(k) for k in list(data) if k in GATEWAY_KEYS}


def tags(value: Any) -> list[str]:
    """`tags`: a comma-separated string (as Unify documents it) or a list of strings; blanks are dropped."""
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise InvalidRequest(
            "Invalid value for 'tags': expected a comma-separated string or a list of strings.", param="tags"
        )
    return [t.strip() for t in value if t.strip()]


@dataclass(frozen=True, slots=True)
class Flags:
    """The options checked before the body (a wrong type is a 400 before anything else is looked at)."""

    tags: list[str] = field(default_factory=list)
    log_query_body: bool | None = None
    log_response_body: bool | None = None
    drop_params: bool | None = None
    use_custom_keys: bool | None = None
    signature: str | None = None


def flags(found: Mapping[str, Any]) -> Flags:
    """`tags`, the log flags, `drop_params`, `use_custom_keys` and `signature`, each of the right type, or a
    400 naming it: a value of the wrong type was once skipped silently (`"log_query_body": "no"` stored the
    body)."""
    if not found:
        return _NO_FLAGS
    values: dict[str, Any] = {"tags": tags(found.get("tags"))}
    for name in _FLAGS:
        flag = found.get(name)
        if flag is not None and flag.__class__ is not bool:
            raise InvalidRequest(f"Invalid value for '{name}': expected a boolean.", param=name)
        values[name] = flag
    signature = found.get("signature")
    if signature is not None and not isinstance(signature, str):
        raise InvalidRequest("Invalid value for 'signature': expected a string.", param="signature")
    return Flags(signature=signature, **values)


_NO_FLAGS = Flags()


class RoutingFields(BaseModel):
    """The routing options' types, checked by pydantic as the canonical request checks its own fields, so a
    bad value is the same 400 (`Invalid value for 'timeout': Input should be greater than 0.`)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    provider: str | dict[str, Any] | None = None
    models: list[str] | None = None
    endpoint_id: str | None = None
    region: str | None = None
    timeout: float | None = Field(None, gt=0)


class EmbeddingRoutingFields(RoutingFields):
    """On embeddings `provider` names a provider; there are no preferences to order targets by."""

    provider: str | None = None


ROUTING_KEYS = ("provider", "models", "endpoint_id", "region", "timeout")


def routing_model(body: type[BaseModel]) -> type[RoutingFields]:
    return EmbeddingRoutingFields if issubclass(body, EmbeddingRequest) else RoutingFields


def options(found: Mapping[str, Any], checked: Flags, routing: RoutingFields | None = None) -> GatewayOptions:
    """The typed options from the keys `split` took out, the `flags` already checked and the routing
    fields already validated (`parse(routing_model(...), found)`); the processor list is checked here."""
    if not found:
        return NO_OPTIONS
    r = routing or RoutingFields()
    proc = requested(found) if ("processors" in found or "inferada" in found) else NOT_REQUESTED
    return GatewayOptions(
        provider=r.provider,
        models=tuple(r.models) if r.models is not None else None,
        endpoint_id=r.endpoint_id,
        region=r.region,
        timeout=r.timeout,
        drop_params=True if checked.drop_params is None else checked.drop_params,
        tags=checked.tags,
        log_query_body=checked.log_query_body,
        log_response_body=checked.log_response_body,
        processors=proc,
        use_custom_keys=bool(checked.use_custom_keys),
        signature=checked.signature,
        use_default_prompt=use_default_prompt(found),
        cache=cache_object(found),
    )


def cache_object(found: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The body's `cache` control object, or a 400 when it is something else."""
    value = found.get("cache")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidRequest("Invalid value for 'cache': expected an object.", param="cache")
    return value


def use_default_prompt(found: Mapping[str, Any]) -> bool:
    """`inferada.use_default_prompt`: Inferada publishes a per-request opt-out of the model's default system
    prompt but not its name; this one is inferred (docs/dialects.md). A value that is not a boolean is a 400."""
    extension = found.get("inferada")
    value = extension.get("use_default_prompt") if isinstance(extension, Mapping) else None
    if value is None:
        return True
    if value.__class__ is not bool:
        param = "inferada.use_default_prompt"
        raise InvalidRequest(f"Invalid value for '{param}': expected a boolean.", param=param)
    return bool(value)


def routing(model: type[BaseModel], found: Mapping[str, Any]) -> RoutingFields | None:
    """The routing fields of `found` validated, or a 400 naming the first bad one; None when there are none."""
    if not any(k in found for k in ROUTING_KEYS):
        return None
    checked: RoutingFields = parse(routing_model(model), {k: found[k] for k in ROUTING_KEYS if k in found})
    return checked


def parse_request(model: type[B], data: Any, forward: Forward | None = None) -> GatewayRequest[B]:
    """A decoded JSON body as a `GatewayRequest`, or the 400 naming the first bad field: the gateway's keys
    taken out and checked (flags first, then the body, then routing and processors), the rest validated as
    `model`, and kept as the wire while nothing rewrites the body."""
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    found = split(data)
    if not found:  # the common request: nothing for the gateway, nothing more to check
        return GatewayRequest(parse(model, data), NO_OPTIONS, data, forward)
    checked = flags(found)
    body: B = parse(model, data)
    return GatewayRequest(body, options(found, checked, routing(model, found)), data, forward)
