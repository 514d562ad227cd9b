"""Timeouts reach an adapter explicitly, and an adapter called outside the router still bounds its call.

The router hands each attempt's timeouts to the adapter on the `CallInfo`; a caller that is not the router
(a new endpoint, a script, a test) hands none, and the adapter then bounds the call itself with its
deployment's timeouts (`http.bounded`), so no upstream call can wait forever, whoever makes it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from inferplex.canonical import ChatRequest, EmbeddingRequest
from inferplex.config import DeploymentConfig, ModelConfig, ProviderConfig
from inferplex.errors import UpstreamTimeout
from inferplex.gateway_request import GatewayRequest, parse_request
from inferplex.providers.base import CallInfo
from inferplex.providers.http import new_session
from inferplex.providers.registry import load_factory
from inferplex.targets import Target
from tests.providers.test_bounds import Silent

KINDS = ("openai", "azure", "anthropic", "gemini", "bedrock")
WITHIN = 5.0  # the bound (0.3 s) plus a slow machine's margin


@pytest.fixture(scope="module")
def silent() -> Iterator[Silent]:
    server = Silent()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVIDERS_TEST_KEY", "ABSKQmVkcm9ja0FQSUtleS1mYWtl")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    s = new_session()
    yield s
    await s.close()


def _target(kind: str, port: int, model_type: str = "chat") -> tuple[ProviderConfig, Target]:
    base = f"http://127.0.0.1:{port}"
    provider = ProviderConfig.model_validate(
        {
            "name": f"p-{kind}",
            "kind": kind,
            "base_url": {"openai": base + "/v1", "gemini": base + "/v1beta"}.get(kind, base),
            "api_key": "env:PROVIDERS_TEST_KEY",
            "timeouts": {"connect": 20, "read": 0.3},
            "options": {"region": "us-east-1"} if kind == "bedrock" else {},
        }
    )
    deployment = DeploymentConfig(provider=provider.name, model="m")
    model = ModelConfig.model_validate({"name": "m", "type": model_type, "deployments": [deployment.model_dump()]})
    return provider, Target(model, deployment, provider)


def _chat(stream: bool = False) -> GatewayRequest[ChatRequest]:
    raw: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return parse_request(ChatRequest, raw)


async def _timed(call: Any) -> float:
    started = time.monotonic()
    with pytest.raises(UpstreamTimeout):
        await asyncio.wait_for(call, WITHIN)
    return time.monotonic() - started


@pytest.mark.parametrize("kind", KINDS)
async def test_buffered_chat_outside_the_router_is_bounded(
    kind: str, silent: Silent, session: aiohttp.ClientSession
) -> None:
    config, target = _target(kind, silent.port)
    adapter = load_factory(kind)(config, SimpleNamespace(http=session))
    request = _chat()
    assert await _timed(adapter.chat(request, target, CallInfo())) < WITHIN


@pytest.mark.parametrize("kind", KINDS)
async def test_stream_opening_outside_the_router_is_bounded(
    kind: str, silent: Silent, session: aiohttp.ClientSession
) -> None:
    config, target = _target(kind, silent.port)
    adapter = load_factory(kind)(config, SimpleNamespace(http=session))
    request = _chat(stream=True)
    chunks = adapter.chat_stream(request, target, CallInfo())
    try:
        assert await _timed(chunks.__anext__()) < WITHIN
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()


@pytest.mark.parametrize("kind", ["openai", "azure"])
async def test_embeddings_outside_the_router_are_bounded(
    kind: str, silent: Silent, session: aiohttp.ClientSession
) -> None:
    config, target = _target(kind, silent.port, "embedding")
    adapter = load_factory(kind)(config, SimpleNamespace(http=session))
    request = parse_request(EmbeddingRequest, {"model": "m", "input": "hi"})
    assert await _timed(adapter.embed(request, target, CallInfo())) < WITHIN
