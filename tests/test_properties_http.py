"""Property tests of request validation through the HTTP API: any JSON value in any field of any dialect's
request gets a clean answer, a 2xx or a 4xx in that dialect's own error shape, and never a 5xx.

The gateway runs in-process (httpx.ASGITransport, lifespan started once for the module) on a fake OpenAI
upstream on a real socket, so a request that passes validation really is proxied. Each dialect's request
starts from a valid body; hypothesis then puts an arbitrary JSON value into one of its fields (known ones
and unknown ones, top level and nested), or deletes it. Bounded by max_examples; no timing assertions.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from inferplex.app import create_app
from inferplex.config import parse_config
from inferplex.dialects import inferexchange_responses as ixr
from inferplex.dialects import oneinfer_responses as oir
from inferplex.dialects import openai_responses as oa
from inferplex.dialects.anthropic import responses as ar
from tests.accounts.conftest import _pg
from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

MASTER = "ipx-test-master-key"
EXAMPLES = int(os.environ.get("INFERPLEX_FUZZ_EXAMPLES", "60"))  # deeper: set it higher

# Any JSON value: scalars (huge and tiny numbers, odd strings), and small nested lists and objects.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)

_HI = [{"role": "user", "content": "hi"}]


@dataclass(frozen=True)
class Route:
    path: str
    body: dict[str, Any]
    ok: Any  # the success body's type
    error: Any  # the dialect's error body's type
    fields: tuple[str, ...]  # extra paths to fuzz beyond the body's own keys, "a.b" for nested


OPENAI_CHAT_FIELDS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "n",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "seed",
    "logprobs",
    "top_logprobs",
    "logit_bias",
    "frequency_penalty",
    "presence_penalty",
    "user",
    "metadata",
    "service_tier",
    "provider",
    "models",
    "endpoint_id",
    "region",
    "timeout",
    "tags",
    "log_query_body",
    "log_response_body",
    "processors",
    "inferada",
    "reasoning_effort",
    "top_k",
    "thinking",
    "messages.0.role",
    "messages.0.content",
    "messages.0.name",
    "messages.0.tool_calls",
    "messages.0.tool_call_id",
    "unknown_field",
)
ANTHROPIC_FIELDS = (
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "output_config",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "metadata",
    "messages.0.role",
    "messages.0.content",
    "container",
    "unknown_field",
)

ROUTES = {
    "openai-chat": Route(
        "/v1/chat/completions",
        {"model": "echo-model", "messages": _HI},
        oa.ChatCompletion,
        oa.OpenAIError,
        OPENAI_CHAT_FIELDS,
    ),
    "openai-embeddings": Route(
        "/v1/embeddings",
        {"model": "embed-model", "input": "hi"},
        oa.EmbeddingList,
        oa.OpenAIError,
        ("encoding_format", "dimensions", "user", "provider", "x"),
    ),
    "anthropic-messages": Route(
        "/v1/messages",
        {"model": "echo-model", "max_tokens": 16, "messages": _HI},
        ar.AnthropicMessage,
        ar.AnthropicError,
        ANTHROPIC_FIELDS,
    ),
    "anthropic-count": Route(
        "/v1/messages/count_tokens",
        {"model": "echo-model", "messages": _HI},
        ar.AnthropicTokenCount,
        ar.AnthropicError,
        ANTHROPIC_FIELDS,
    ),
    "oneinfer": Route(
        "/v1/ula/chat/completions",
        {"provider": "fake", "model": "echo-model", "messages": _HI},
        oir.OneInferCompletionEnvelope,
        oir.OneInferError,
        (*OPENAI_CHAT_FIELDS, "service_tier"),
    ),
    "unify": Route(
        "/v0/chat/completions",
        {"model": "echo-model@fake", "messages": _HI},
        oa.ChatCompletion,
        oa.OpenAIError,
        (*OPENAI_CHAT_FIELDS, "drop_params", "use_custom_keys", "signature"),
    ),
    "inferexchange": Route(
        "/api/v1/chat/completions",
        {"model": "echo-model", "messages": _HI},
        oa.ChatCompletion,
        ixr.InferExchangeError,
        OPENAI_CHAT_FIELDS,
    ),
}
_ADAPTERS = {id(tp): TypeAdapter(tp) for r in ROUTES.values() for tp in (r.ok, r.error)}


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop for the module: the app's lifespan (stores, sessions) lives across examples."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module", params=["master-sqlite", "keyed-postgresql"])
def client(
    request: pytest.FixtureRequest,
    loop: asyncio.AbstractEventLoop,
    fake_openai: FakeOpenAI,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[httpx.AsyncClient]:
    """The app in-process, called with the master key on SQLite, or with an ordinary key (credit, limits:
    every request reserved and settled) on PostgreSQL, which refuses what SQLite stores (NUL, big integers)."""
    raw = openai_config(fake_openai)
    raw["server"]["data_dir"] = str(tmp_path_factory.mktemp("props"))
    raw["inferexchange"] = {"chat_rpm": None}  # every example reaches the parser, not InferExchange's 60/min
    database = "inferplex_props_" + secrets.token_hex(6)
    postgres = request.param.endswith("postgresql")
    if postgres:
        _pg(f'CREATE DATABASE "{database}"')
        raw["storage"] = {"database_url": f"postgresql+asyncpg://postgres@127.0.0.1:5432/{database}"}
    app = create_app(parse_config(raw, "<test>"), MASTER)
    started: asyncio.Event = asyncio.Event()
    stop: asyncio.Event = asyncio.Event()

    async def lifespan() -> None:
        async with app.router.lifespan_context(app):
            started.set()
            await stop.wait()

    task = loop.create_task(lifespan())
    loop.run_until_complete(started.wait())
    transport = httpx.ASGITransport(app=app)
    client = httpx.AsyncClient(
        transport=transport, base_url="http://gateway", headers={"Authorization": f"Bearer {MASTER}"}, timeout=30
    )
    if request.param.startswith("keyed"):
        made = loop.run_until_complete(
            client.post("/admin/keys", json={"name": "props", "credits_micros": 10**12, "rpm": 10**6})
        )
        assert made.status_code == 201, made.text
        client.headers["Authorization"] = f"Bearer {made.json()['key']}"
    try:
        yield client
    finally:
        loop.run_until_complete(client.aclose())
        stop.set()
        loop.run_until_complete(task)
        if postgres:
            _pg(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def with_field(body: dict[str, Any], path: str, value: Any, delete: bool) -> dict[str, Any]:
    """A deep-enough copy of `body` with the field at dotted `path` set to `value` (or removed)."""
    out = {**body, "messages": [dict(m) for m in body.get("messages", ())]} if "messages" in body else dict(body)
    parts = path.split(".")
    target: Any = out
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if delete:
        target.pop(parts[-1], None)
    else:
        target[parts[-1]] = value
    return out


def asked_for_its_timeout(body: Any, response: httpx.Response) -> bool:
    """A request that set its own `timeout` (5e-324 s is a valid one) may be answered with its expiry: a
    504 in the dialect's error shape is then the right answer, not a server error."""
    timeout = body.get("timeout") if isinstance(body, dict) else None
    return response.status_code == 504 and isinstance(timeout, int | float) and not isinstance(timeout, bool)


def check_clean(route: Route, response: httpx.Response, body: Any = None) -> None:
    """2xx with the success shape (or a stream), or a 4xx with the dialect's error shape; never a 5xx but
    the 504 a request's own `timeout` asked for."""
    if not asked_for_its_timeout(body, response):
        assert response.status_code < 500, f"{response.status_code}: {response.text[:500]}"
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        assert response.status_code == 200
        return
    assert response.headers.get("content-type", "").startswith("application/json"), response.text[:200]
    shape = route.ok if response.status_code < 300 else route.error
    _ADAPTERS[id(shape)].validate_python(response.json())


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_any_value_in_any_field_is_answered_cleanly(
    name: str, client: httpx.AsyncClient, loop: asyncio.AbstractEventLoop
) -> None:
    """Health checks: too_slow and data_too_large are off because each example is a whole proxied request
    through the gateway, and the examples are module-scoped on purpose (one app and upstream for all)."""
    route = ROUTES[name]
    fields = sorted({*route.body, *route.fields})

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(field=st.sampled_from(fields), value=json_values, delete=st.booleans())
    def run(field: str, value: Any, delete: bool) -> None:
        body = with_field(route.body, field, value, delete)
        response = loop.run_until_complete(client.post(route.path, json=body))
        check_clean(route, response, body)

    run()


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_any_json_document_as_the_body_is_answered_cleanly(
    name: str, client: httpx.AsyncClient, loop: asyncio.AbstractEventLoop
) -> None:
    """Not an object at all, or an object of arbitrary keys: refused in the dialect's shape."""
    route = ROUTES[name]

    @settings(
        max_examples=EXAMPLES // 2,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(body=json_values)
    def run(body: Any) -> None:
        response = loop.run_until_complete(client.post(route.path, json=body))
        check_clean(route, response, body)

    run()


def test_unknown_anthropic_field_names_never_break_the_response_headers(gateway: GatewayServer) -> None:
    """An unknown top-level Anthropic field is named in `x-inferplex-dropped-params` when the target cannot
    honour it; a name that is not a valid header value (non-Latin-1, CR LF) was a 500 in plain text, or a
    dropped connection (the HTTP server refuses to send it), instead of the answer. Through real sockets."""
    for name in ("caf\u00e9\u4e2d", "x\r\nset-cookie: injected=1"):
        body = {**ROUTES["anthropic-messages"].body, name: 1}
        response = httpx.post(gateway.url + "/v1/messages", json=body, headers=gateway.auth, timeout=30)
        assert response.status_code == 200, response.text
        ar_message = TypeAdapter(ar.AnthropicMessage).validate_python(response.json())
        assert ar_message["type"] == "message"
        assert "set-cookie" not in response.headers
        assert response.headers["x-inferplex-dropped-params"].isascii()
