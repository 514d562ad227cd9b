"""The processor interface and its registry.

A processor is an opt-in step around one completion (Inferada's `inferada.processors`). One instance is
created per request from its options, so whatever it learns (the placeholders it handed out, the
corrections it made) lives on that instance and nowhere else. It has up to three hooks:

- `pre`: look at, rewrite or refuse the request before the model is resolved and called;
- `post`: look at or rewrite the buffered response (`again` calls the model once more, for a retry);
- `stream`: the same on a stream of chunks; a processor that cannot work on a stream says `buffered = True`
  and the pipeline serves that request with a buffered call, then replays it as chunks.

Kinds are found like provider kinds: a table of built-ins plus entry points in the `inferplex.processors`
group, each a factory `create(options: dict, env: Env) -> Processor`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from inferplex.canonical import ChatRequest
from inferplex.catalog import Catalog
from inferplex.errors import InvalidRequest
from inferplex.gateway_request import GatewayRequest
from inferplex.plugins import PluginTable
from inferplex.responses import ChatCompletion, ChatCompletionChunk
from inferplex.targets import Target

# Calls the model again with another request (same routing, same admission): what a retry needs.
Again = Callable[[GatewayRequest[ChatRequest]], Awaitable[ChatCompletion]]


@dataclass(slots=True)
class Exchange:
    """What the processors of one request share: the language it is in, and who may use what."""

    language: str | None = None  # the request's language (inferada.language, an option, or detected)
    may_use: Callable[[str], bool] = field(default=lambda _: True)
    # Text a processor adds to the one system prompt (prompting/assembly.py): after the model's default prompt,
    # before the caller's system messages, in the order the processors ran.
    segments: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Env:
    """What processors may read from the gateway: the catalog, and observed latency per deployment."""

    catalog: Catalog | None = None
    latency_ms: Callable[[Target], float | None] = field(default=lambda _: None)


class Processor(Protocol):
    name: str
    order: int  # processors run in this order, however the request listed them
    buffered: bool  # True when `post` needs the whole response (no stream filter)
    metadata: dict[str, Any]  # counts, scores, decisions: reported in the response, never redacted values

    async def pre(self, ex: Exchange, request: GatewayRequest[ChatRequest]) -> GatewayRequest[ChatRequest]: ...

    async def post(self, ex: Exchange, response: ChatCompletion, again: Again) -> ChatCompletion: ...

    def stream(
        self, ex: Exchange, chunks: AsyncIterator[ChatCompletionChunk]
    ) -> AsyncIterator[ChatCompletionChunk]: ...


class Step:
    """A processor that does nothing in every hook: built-ins subclass it and override what they need."""

    name = "step"
    order = 50
    buffered = False

    def __init__(self) -> None:
        self.metadata: dict[str, Any] = {}

    async def pre(self, ex: Exchange, request: GatewayRequest[ChatRequest]) -> GatewayRequest[ChatRequest]:
        return request

    async def post(self, ex: Exchange, response: ChatCompletion, again: Again) -> ChatCompletion:
        return response

    def stream(self, ex: Exchange, chunks: AsyncIterator[ChatCompletionChunk]) -> AsyncIterator[ChatCompletionChunk]:
        return chunks


Factory = Callable[[Mapping[str, Any], Env], Processor]

_BUILTIN = {
    # Inferada's published names (docs/processors.md has the mapping to ours)
    "anonymise": "inferplex.processors.pii:create_anonymise",
    "pii_guard": "inferplex.processors.pii_guard:create",
    "require_local": "inferplex.processors.require_local:create",
    "prompt_shield": "inferplex.processors.injection:create_prompt_shield",
    # Inferplex's own
    "pii_redact": "inferplex.processors.pii:create",
    "injection_guard": "inferplex.processors.injection:create",
    "secret_scan": "inferplex.processors.secret_scan:create",
    "spellcheck": "inferplex.processors.spellcheck:create",
    "language": "inferplex.processors.language:create",
    "routing_policy": "inferplex.processors.routing_policy:create",
    "json_validate": "inferplex.processors.json_validate:create",
}


_TABLE = PluginTable("inferplex.processors", _BUILTIN)

# The token scope a request needs to name a processor (Inferada's published scopes). A name that does the same
# as an Inferada processor needs the same scope, or the alias would be a way around it; a processor not listed
# (ours without an Inferada twin, a plugin) needs none beyond the route's.
SCOPES = {
    "anonymise": "pii",
    "pii_redact": "pii",
    "pii_guard": "pii",
    "spellcheck": "language",
    "require_local": "completions",
    "prompt_shield": "completions",
    "injection_guard": "completions",
}


def known_processors() -> set[str]:
    return set(_TABLE.names())


def load_factory(name: str) -> Factory:
    factory: Factory = _TABLE.load(name)
    return factory


# ---- option helpers shared by the built-ins -------------------------------------------------------------


def check_options(name: str, options: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(options) - allowed - {"name"})
    if unknown:
        raise InvalidRequest(
            f"Unknown option(s) for processor `{name}`: {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))}).",
            param="processors",
            code="invalid_processor_options",
        )


def choice(name: str, options: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    value = options.get(key, allowed[0])
    if value not in allowed:
        raise InvalidRequest(
            f"Processor `{name}`: `{key}` must be one of {', '.join(allowed)}.",
            param="processors",
            code="invalid_processor_options",
        )
    return str(value)


def number(name: str, options: Mapping[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise InvalidRequest(
            f"Processor `{name}`: `{key}` must be a number between {lo} and {hi}.",
            param="processors",
            code="invalid_processor_options",
        )
    return float(value)
