"""The dialect registry (issue 20): dialects are registered like provider kinds, each one declaring its routes,
its error rendering and the path prefixes whose pre-route errors (404, 405, 400/414/431) take its shape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.context import Context
from inferplex.dialects import registry
from inferplex.edge import endpoint, json_response
from inferplex.errors import GatewayError
from inferplex.plugins import PluginTable
from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


def test_every_route_belongs_to_the_dialect_that_serves_it() -> None:
    names = [d.name for d in registry.dialects()]
    assert names == ["openai", "anthropic", "oneinfer", "unify", "inferexchange", "inferada"]
    for dialect in registry.dialects():
        for route in dialect.routes:
            assert isinstance(route, Route)
            assert registry.for_path(route.path).name == dialect.name, route.path


def test_a_path_no_dialect_owns_gets_openais_shape() -> None:
    assert registry.for_path("/nowhere").name == "openai"
    assert registry.for_path("/v1/messagesXYZ").name == "anthropic"  # a prefix, as the routes' own 404 had it
    assert registry.for_path("/v1/ula/x").name == "oneinfer"


# ---- a dialect from a plugin ------------------------------------------------------------------------------


def _render(err: GatewayError, ctx: Context) -> Response:
    return json_response(_body(err), ctx.headers(), err.status)


def _body(err: GatewayError) -> dict[str, Any]:
    return {"problem": {"status": err.status, "detail": err.message}}


async def _ping(request: Request, ctx: Context) -> Response:
    return json_response({"pong": ctx.principal is not None})


PLUGIN = registry.Dialect(
    "echo",
    [Route("/echo/v1/ping", endpoint(_render, _ping, "chat", "echo"), methods=["POST"])],
    _render,
    _body,
    ("/echo/",),
)


@pytest.fixture
def plugin_gateway(fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Iterator[GatewayServer]:
    table = PluginTable("inferplex.dialects", {**registry._BUILTIN, "echo": f"{__name__}:PLUGIN"})
    monkeypatch.setattr(registry, "_TABLE", table)
    registry.dialects.cache_clear()
    registry._by_prefix.cache_clear()
    try:
        with GatewayServer(openai_config(fake_openai)) as server:
            yield server
    finally:
        monkeypatch.undo()
        registry.dialects.cache_clear()
        registry._by_prefix.cache_clear()


def test_a_plugin_dialect_serves_its_routes_and_shapes_its_paths_errors(plugin_gateway: GatewayServer) -> None:
    url = plugin_gateway.url
    assert httpx.post(url + "/echo/v1/ping", headers=plugin_gateway.auth).json() == {"pong": True}
    refused = httpx.post(url + "/echo/v1/ping")  # the route's own failure, rendered by the dialect
    assert refused.status_code == 401 and refused.json()["problem"]["status"] == 401
    unknown = httpx.get(url + "/echo/v1/nope")  # Starlette's 404, before any route
    assert unknown.status_code == 404
    assert unknown.json() == {"problem": {"status": 404, "detail": "Unknown route GET /echo/v1/nope."}}
    wrong_method = httpx.get(url + "/echo/v1/ping")
    assert wrong_method.status_code == 405 and wrong_method.json()["problem"]["status"] == 405
    too_big = httpx.post(url + "/echo/v1/ping", headers={"x-big": "a" * 20000})  # the HTTP server's 431
    assert too_big.status_code == 431 and too_big.json()["problem"]["status"] == 431
    # The built-in dialects keep their shapes beside it.
    assert "error" in httpx.get(url + "/v1/nope").json()
    assert httpx.get(url + "/v1/ula/nope").json()["api_details"]["api_status"] == "error"
