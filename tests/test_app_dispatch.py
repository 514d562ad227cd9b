"""`app.Gateway`'s fixed-path dispatch and middleware added to the app (issue 20, item 5).

The gateway serves its fixed-path API routes from a dict, skipping Starlette's middleware stack. Middleware
an operator adds to the app (CORS, OpenTelemetry, a request logger) must still see those routes: with any
added, every request goes through the stack.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inferplex.app import Gateway
from inferplex.context import Context
from inferplex.dialects.openai import render_error
from inferplex.edge import endpoint, json_response
from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


class Recorder:
    """Notes each HTTP path it sees and marks the response with a header."""

    seen: list[str] = []

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        Recorder.seen.append(scope["path"])

        async def marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-recorded", b"yes")]
            await send(message)

        await self.app(scope, receive, marked)


@pytest.fixture(scope="module")
def with_middleware(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    server = GatewayServer(openai_config(fake_openai))
    app = server.server.config.app
    app.add_middleware(Recorder)
    app.add_middleware(CORSMiddleware, allow_origins=["https://app.example"], allow_methods=["*"], allow_headers=["*"])
    with server:
        yield server


def test_added_middleware_runs_on_the_chat_route(with_middleware: GatewayServer) -> None:
    Recorder.seen.clear()
    client = openai.OpenAI(base_url=with_middleware.base_url, api_key=with_middleware.master_key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="echo-model", messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.headers["x-recorded"] == "yes"
    assert raw.parse().choices[0].message.content
    with client.chat.completions.with_streaming_response.create(
        model="echo-model", messages=[{"role": "user", "content": "hi"}], stream=True
    ) as streamed:
        assert streamed.headers["x-recorded"] == "yes"
        assert list(streamed.iter_lines())
    assert Recorder.seen == ["/v1/chat/completions", "/v1/chat/completions"]


def test_cors_middleware_answers_for_the_chat_route(with_middleware: GatewayServer) -> None:
    url = with_middleware.base_url + "/chat/completions"
    origin = {"origin": "https://app.example"}
    preflight = httpx.options(url, headers={**origin, "access-control-request-method": "POST"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://app.example"
    body = {"model": "echo-model", "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(url, headers={**origin, **with_middleware.auth}, json=body)
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == "https://app.example"
    refused = httpx.post(url, headers=origin, json=body)  # no key: the route's own 401 passes through CORS too
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == "https://app.example"


def test_without_middleware_the_routes_answer_as_before(gateway: GatewayServer) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=gateway.master_key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="echo-model", messages=[{"role": "user", "content": "hi"}]
    )
    assert "x-recorded" not in raw.headers
    assert raw.parse().choices[0].message.content


async def _ping(request: Request, ctx: Context) -> Response:
    return json_response({"pong": True})


async def test_middleware_given_to_the_constructor_runs_on_a_fixed_path_route() -> None:
    Recorder.seen.clear()
    route = Route("/ping", endpoint(render_error, _ping, None), methods=["POST"])
    app = Gateway(routes=[route], middleware=[Middleware(Recorder)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        answer = await client.post("/ping")
    assert answer.json() == {"pong": True}
    assert answer.headers["x-recorded"] == "yes"
    assert Recorder.seen == ["/ping"]


def test_without_middleware_the_chat_routes_keep_the_fixed_path_dispatch(fake_openai: FakeOpenAI) -> None:
    """The guard above must not cost the fast path (docs/benchmarks.md): with no middleware added, the chat
    routes are still served from the dict, and adding one empties it."""
    app = GatewayServer(openai_config(fake_openai)).server.config.app
    assert isinstance(app, Gateway)
    for path in ("/v1/chat/completions", "/v1/messages", "/v1/ula/chat/completions", "/v0/chat/completions"):
        assert (path, "POST") in app._exact
    app.add_middleware(Recorder)
    assert not app._exact
