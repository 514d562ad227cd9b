"""Inbound dialects are plugins: entry points in the `inferplex.dialects` group, built-ins included.

A dialect is one inbound API (OpenAI, Anthropic Messages, OneInfer, Unify, InferExchange): its routes, how
it renders each endpoint family's answer (a result, and a stream for a family that streams), how it renders
a route's failure, and how it shapes an error the gateway answers before any route runs
(Starlette's 404 and 405, the HTTP server's 400, 414 and 431). For the last, each dialect declares the
URL path prefixes it owns, and the longest one a path starts with picks the shape, so that a client reads
those answers with the same parser as every other error; a path no dialect owns gets OpenAI's shape.

Registering the built-ins as a third party would (as `providers/registry.py` does for provider kinds)
keeps `app.py` free of a list of dialect modules and of URL prefixes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute

from inferplex.context import Context
from inferplex.edge import ErrorRenderer
from inferplex.errors import GatewayError
from inferplex.gateway_request import GatewayRequest
from inferplex.pipeline import ChatStream
from inferplex.plugins import PluginTable


@dataclass(frozen=True, slots=True)
class Rendering:
    """How a dialect answers one endpoint family: its buffered `result` (the family's canonical answer, with
    the request it answers and the context), and `stream` for a family that streams. The road from a route's
    parse to these is the same for every dialect (`dialects/answer.py`)."""

    result: Callable[[Any, GatewayRequest[Any], Context], Response]
    stream: Callable[[ChatStream, GatewayRequest[Any], Context], Response] | None = None


@dataclass(frozen=True, slots=True)
class Dialect:
    """One inbound API.

    `renders` maps the name of each endpoint family the dialect serves (`families/`) to its `Rendering`;
    `render_error` answers a failure inside one of its routes (with the request's headers); `error_body`
    is the JSON body of an error made before any route ran, at `err.status`, for paths under `prefixes`.
    """

    name: str
    routes: Sequence[BaseRoute]
    render_error: ErrorRenderer
    error_body: Callable[[GatewayError], dict[str, Any]]
    prefixes: tuple[str, ...] = ()
    renders: Mapping[str, Rendering] = field(default_factory=dict)


_BUILTIN = {
    "openai": "inferplex.dialects.openai:DIALECT",
    "anthropic": "inferplex.dialects.anthropic.routes:DIALECT",
    "oneinfer": "inferplex.dialects.oneinfer:DIALECT",
    "unify": "inferplex.dialects.unify:DIALECT",
    "inferexchange": "inferplex.dialects.inferexchange:DIALECT",
    "inferada": "inferplex.dialects.inferada:DIALECT",
}
# The shape of an error on a path no dialect claims.
DEFAULT = "openai"

_TABLE = PluginTable("inferplex.dialects", _BUILTIN)


@cache
def dialects() -> tuple[Dialect, ...]:
    """Every registered dialect, built-ins first in their order (route order is match order)."""
    found = tuple(_TABLE.load(name) for name in _TABLE.names())
    for name, dialect in zip(_TABLE.names(), found, strict=True):
        if not isinstance(dialect, Dialect):
            raise TypeError(f"dialect plugin {name!r} ({_TABLE.names()[name]}) is not an inferplex Dialect")
    return found


@cache
def _by_prefix() -> tuple[tuple[str, Dialect], ...]:
    pairs = [(prefix, d) for d in dialects() for prefix in d.prefixes]
    return tuple(sorted(pairs, key=lambda pair: len(pair[0]), reverse=True))


def for_path(path: str) -> Dialect:
    """The dialect that owns `path`: the one with the longest prefix it starts with, else OpenAI's."""
    for prefix, dialect in _by_prefix():
        if path.startswith(prefix):
            return dialect
    found: Dialect = _TABLE.load(DEFAULT)
    return found


def error_payload(path: str, err: GatewayError) -> dict[str, Any]:
    """`err` as the JSON body the dialect of `path` gives its errors, at `err.status`."""
    return for_path(path).error_body(err)


def plain_error(message: str, status: int, code: str) -> GatewayError:
    """An error about the request itself, at `status`, of OpenAI's type `invalid_request_error`."""
    err = GatewayError(message, status=status, code=code)
    err.type = "invalid_request_error"
    return err
