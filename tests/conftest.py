"""Shared fixtures: a fake OpenAI-compatible upstream and the gateway in front of it, both on real sockets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

UPSTREAM_KEY = "sk-fake-upstream"


@pytest.fixture(scope="session")
def fake_openai() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI(UPSTREAM_KEY).start()
    yield fake
    fake.stop()


def openai_config(fake: FakeOpenAI, **server: Any) -> dict[str, Any]:
    """A config with one OpenAI-compatible provider (`fake`) and models whose names pick the fake's behaviour."""
    names = [
        "echo-model",
        "tool-model",
        "die-midstream",
        "slow-stream",
        "hang",
        "error-500",
        "error-429",
        "error-400",
        "error-401",
        "error-503",
    ]
    models: list[dict[str, Any]] = [
        {
            "name": n,
            "deployments": [{"provider": "fake", "model": n if n != "echo-model" else "gpt-echo"}],
            "context_window": 8192,
            "capabilities": {"vision": True},
            "pricing": {"input": "0.15", "output": "0.60"},
        }
        for n in names
    ]
    models.append(
        {
            "name": "text-only",
            "deployments": [{"provider": "fake", "model": "gpt-echo"}],
            "capabilities": {"vision": False, "tools": False},
            "pricing": {"input": "0.15", "output": "0.60"},
        }
    )
    models.append(
        {
            "name": "embed-model",
            "type": "embedding",
            "deployments": [{"provider": "fake", "model": "text-embedding-fake"}],
            "pricing": {"input": "0.02"},
        }
    )
    return {
        "server": {"max_body_bytes": 64 * 1024, **server},
        "providers": [
            {
                "name": "fake",
                "kind": "openai",
                "base_url": fake.base_url,
                "api_key": "env:FAKE_UPSTREAM_KEY",
                "timeouts": {"connect": 2, "read": 2},
            },
        ],
        "models": models,
    }


@pytest.fixture(scope="session", autouse=True)
def _upstream_key_env() -> Iterator[None]:
    mp = pytest.MonkeyPatch()
    mp.setenv("FAKE_UPSTREAM_KEY", UPSTREAM_KEY)
    yield
    mp.undo()


@pytest.fixture(scope="session")
def gateway(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    with GatewayServer(openai_config(fake_openai)) as server:
        yield server
