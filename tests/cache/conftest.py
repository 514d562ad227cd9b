"""Gateways with the response cache on, in front of the validating OpenAI fake, with keyed callers.

Each gateway keeps its keys and credits in its own SQLite store; the cache is in process memory unless a
test asks for another backend. The fake upstream is shared by the whole session, so every test sends a
prompt of its own (`unique()`) and counts the upstream calls that carried it (`upstream_calls`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.accounts.conftest import Admin, billing_config
from tests.cache.support_ops import Operator
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

# Models beyond the shared ones (`priced`: 0 per input token, 3 micro-USD per output token; `embed-model`)
CACHE_MODELS: list[dict[str, Any]] = [
    {"name": "uncached", "deployments": [{"provider": "fake", "model": "gpt-echo"}], "cache": {"enabled": False}},
    {"name": "faq", "deployments": [{"provider": "fake", "model": "gpt-echo"}], "cache": {"shared": True}},
    {
        "name": "priced-fraction",
        "deployments": [{"provider": "fake", "model": "gpt-echo"}],
        "max_output": 100,
        "pricing": {"input": "0", "output": "3"},
        "cache": {"billing": {"charge": "fraction", "fraction": 0.5}},
    },
    {
        "name": "priced-full",
        "deployments": [{"provider": "fake", "model": "gpt-echo"}],
        "max_output": 100,
        "pricing": {"input": "0", "output": "3"},
        "cache": {"billing": {"charge": "full"}},
    },
    {
        # priced per deployment only (5 micro-USD per output token): a hit is priced as its deployment was
        "name": "deployment-priced",
        "deployments": [{"provider": "fake", "model": "gpt-echo", "pricing": {"input": "0", "output": "5"}}],
        "max_output": 100,
        "cache": {"billing": {"charge": "full"}},
    },
    {"name": "slow-cached", "deployments": [{"provider": "fake", "model": "slow-stream"}]},
    {"name": "short-lived", "deployments": [{"provider": "fake", "model": "gpt-echo"}], "cache": {"ttl_s": 1}},
]


def cache_config(
    fake: FakeOpenAI, tmp: Path, models: list[dict[str, Any]] | None = None, **cache: Any
) -> dict[str, Any]:
    """The accounts' billing config (SQLite store) with the cache on (memory backend unless given), and a test
    module's own `models` beside the shared ones."""
    config = billing_config(fake, tmp)
    config["models"] += [*CACHE_MODELS, *(models or [])]
    config["cache"] = {"enabled": True, "backend": "memory", **cache}
    return config


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    """The module's gateway: the cache with its defaults (default_on, account scope, free hits)."""
    with GatewayServer(cache_config(fake_openai, tmp_path_factory.mktemp("cache"))) as gw:
        yield gw


@pytest.fixture
def admin(server: GatewayServer) -> Iterator[Admin]:
    """The admin API of the module's `server` (a module may define its own `server`)."""
    a = Admin(server.url, server.master_key)
    yield a
    a.close()


@pytest.fixture
def operator(cached_gateway: GatewayServer) -> Iterator[Operator]:
    """The operator's view (admin API, metrics) of the module's `cached_gateway`."""
    op = Operator(cached_gateway)
    yield op
    op.close()


def unique(words: str = "tell me") -> str:
    """A prompt no other test sends, so upstream calls can be counted on the shared fake."""
    return f"{words} {uuid.uuid4().hex[:12]}"


def upstream_calls(fake: FakeOpenAI, text: str) -> int:
    """How many requests the fake upstream received that carried `text`."""
    return sum(1 for r in fake.state.requests if text in str(r.body.get("messages") or r.body.get("input")))


def client(server: GatewayServer, key: str | None = None, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.base_url, api_key=key or server.master_key, max_retries=0, default_headers=headers or None
    )


def chat(server: GatewayServer, text: str, key: str | None = None, **extra: Any) -> httpx.Response:
    """One chat completion through raw HTTP: `extra` may hold `headers` and body fields."""
    headers = {"Authorization": f"Bearer {key or server.master_key}", **extra.pop("headers", {})}
    body = {"model": "priced", "messages": [{"role": "user", "content": text}], **extra}
    return httpx.post(server.base_url + "/chat/completions", json=body, headers=headers, timeout=30)


def sse_frames(
    server: GatewayServer, text: str, key: str | None = None, **extra: Any
) -> tuple[httpx.Response, list[str]]:
    """A streamed chat completion's raw `data:` payloads, in order."""
    headers = {"Authorization": f"Bearer {key or server.master_key}", **extra.pop("headers", {})}
    body = {"model": "priced", "stream": True, "messages": [{"role": "user", "content": text}], **extra}
    with httpx.stream("POST", server.base_url + "/chat/completions", json=body, headers=headers, timeout=30) as r:
        raw = r.read().decode()
    return r, [line[6:] for line in raw.split("\n") if line.startswith("data: ")]
