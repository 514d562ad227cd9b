"""The request's routing fields, validated once into a `RouteOptions` the router reads from the context.

Field names follow the seeds: OpenRouter's `provider` object (`order`, `only`, `ignore`, `sort`,
`allow_fallbacks`) and `models` fallback list, OneInfer's `provider` string, `endpoint_id` and
`service_tier`, Unify's `region`. Bad values are a 400 naming the field, before anything is reserved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferplex.canonical import ChatRequest
from inferplex.errors import InvalidRequest
from inferplex.gateway_request import GatewayRequest

# The gateway's tiers, and OpenAI's spellings of them. "auto" is what OpenAI's SDKs may send by default.
TIERS = {"auto": "default", "default": "default", "flex": "flex"}
SORTS = ("price", "latency", "throughput")


@dataclass(frozen=True, slots=True)
class ProviderPrefs:
    order: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    sort: str | None = None
    allow_fallbacks: bool = True


@dataclass(frozen=True, slots=True)
class RouteOptions:
    stream: bool = False
    prefs: ProviderPrefs = field(default_factory=ProviderPrefs)
    models: tuple[str, ...] | None = None
    endpoint_id: str | None = None
    service_tier: str = "default"
    region: str | None = None
    timeout: float | None = None
    location: str | None = None  # only deployments running there (`require_local`: on_premises)
    refuse_when_all_open: bool | None = None  # the dialect's override of `routing.cooldown.when_all_open`


def _names(value: Any, param: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InvalidRequest(f"Invalid value for '{param}': expected a list of provider names.", param=param)
    return tuple(value)


def provider_prefs(value: dict[str, Any]) -> ProviderPrefs:
    """OpenRouter's provider preferences; unknown keys are ignored as OpenRouter's own extras."""
    order = _names(value["order"], "provider.order") if value.get("order") is not None else ()
    only = _names(value["only"], "provider.only") if value.get("only") is not None else None
    ignore = _names(value["ignore"], "provider.ignore") if value.get("ignore") is not None else ()
    sort = value.get("sort")
    if sort is not None and sort not in SORTS:
        raise InvalidRequest(
            f"Invalid value for 'provider.sort': {sort!r}; expected one of {', '.join(SORTS)}.", param="provider.sort"
        )
    allow = value.get("allow_fallbacks", True)
    if allow is None:
        allow = True
    if not isinstance(allow, bool):
        raise InvalidRequest(
            "Invalid value for 'provider.allow_fallbacks': expected a boolean.", param="provider.allow_fallbacks"
        )
    return ProviderPrefs(order, only, ignore, sort, allow)


def service_tier(value: str | None) -> str:
    if value is None:
        return "default"
    tier = TIERS.get(value)
    if tier is None:
        raise InvalidRequest(
            f"Invalid value for 'service_tier': {value!r}; this gateway offers 'default' and 'flex'.",
            param="service_tier",
            code="invalid_service_tier",
        )
    return tier


_PLAIN = {False: RouteOptions(), True: RouteOptions(stream=True)}


def route_options(request: GatewayRequest[ChatRequest]) -> RouteOptions:
    """The routing preferences of a request: its options (`GatewayOptions`) and the body's `service_tier`."""
    body, opts = request.body, request.options
    if not opts.routes and body.service_tier is None:
        return _PLAIN[bool(body.stream)]  # the common request names no routing preference
    prefs = provider_prefs(opts.provider) if isinstance(opts.provider, dict) else ProviderPrefs()
    if opts.models is not None and not all(opts.models):
        raise InvalidRequest("Invalid value for 'models': model names must not be empty.", param="models")
    return RouteOptions(
        stream=bool(body.stream),
        prefs=prefs,
        models=opts.models,
        endpoint_id=opts.endpoint_id,
        service_tier=service_tier(body.service_tier),
        region=opts.region,
        timeout=opts.timeout,
        location=opts.location,
        refuse_when_all_open=opts.refuse_when_all_open,
    )
