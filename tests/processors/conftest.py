"""A gateway whose models pick the fake upstream's verbatim behaviours, and keys with processor settings.

Keys are served by `SettingsAuth`, an Authenticator swapped in after start-up: each test key maps to a
Principal with `default_processors` / `enforced_processors`, as a stored API key's has.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from inferplex.auth import MASTER, Principal, credential
from inferplex.errors import Unauthenticated
from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

KEYS = {
    "key-enforced": Principal(key_id="k1", enforced_processors=({"name": "pii_redact", "mode": "mask"},)),
    "key-defaults": Principal(key_id="k2", default_processors=("secret_scan",)),
    "key-limited": Principal(key_id="k3", allowed_models=("tiny-mid", "tiny-big", "auto")),
}


class SettingsAuth:
    def __init__(self, master: str) -> None:
        self.master = master

    async def authenticate(self, request: Request) -> Principal:
        token = credential(request.headers)
        if token == self.master:
            return MASTER
        if token in KEYS:
            return KEYS[token]
        raise Unauthenticated("Incorrect API key provided.")


def _model(name: str, upstream: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "deployments": [{"provider": "fake", "model": upstream}], **extra}


def processors_config(fake: FakeOpenAI) -> dict[str, Any]:
    config = openai_config(fake)
    config["models"] += [
        _model(
            "tiny-cheap",
            "echo-tiny-cheap",
            context_window=64,
            pricing={"input": "0.10", "output": "0.20"},
            capabilities={"tools": False},
        ),
        _model("tiny-mid", "echo-tiny-mid", context_window=8192, pricing={"input": "0.50", "output": "1.00"}),
        _model("tiny-big", "echo-tiny-big", context_window=128000, pricing={"input": "2.00", "output": "8.00"}),
        _model("json-fix", "json-fix-1", context_window=8192, pricing={"input": "5", "output": "5"}),
    ]
    return config


@pytest.fixture(scope="package")
def pgateway(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    with GatewayServer(processors_config(fake_openai)) as server:
        app = server.server.config.app
        app.state.services.auth = SettingsAuth(server.master_key)
        yield server


@pytest.fixture
def http(pgateway: GatewayServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=pgateway.base_url, headers=pgateway.auth, timeout=30) as client:
        yield client
