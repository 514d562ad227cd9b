"""One gateway for the seed dialects (OneInfer, Unify, InferExchange) in front of fake upstreams.

The providers and models are the ones the seed documents' own examples name (`openai`/`gpt-4o-mini`,
`anthropic`/`claude-sonnet-4-6`, `llama-3.1-8b`), so each test replays an example unchanged but for the URL
and the key. `openai` and `groq` are OpenAI-compatible providers on the validating OpenAI fake, `anthropic`
is the native Anthropic adapter on the Anthropic fake, and `byok` is an OpenAI fake that accepts only the
caller's own key (Unify's `use_custom_keys`), never the gateway's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

# test_unify_api.py reads the usage store on each engine.
from tests.accounts.conftest import Admin, migrated_db  # noqa: F401
from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

# test_anthropic_dialect.py runs `/v1/messages` in front of every native fake: the providers' gateway.
from tests.providers.conftest import (  # noqa: F401
    _native_keys,
    fake_anthropic,
    fake_azure,
    fake_bedrock,
    fake_gemini,
    native_gateway,
)

ANTHROPIC_KEY = "sk-ant-seed-fake"
CALLER_KEY = "sk-caller-own-provider-key"


@pytest.fixture(scope="session")
def seed_anthropic() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic(ANTHROPIC_KEY).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def byok_openai() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI(CALLER_KEY).start()
    yield fake
    fake.stop()


def _model(name: str, *deployments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "deployments": list(deployments), **extra}


def seed_config(openai_fake: FakeOpenAI, anthropic: FakeAnthropic, byok: FakeOpenAI, data_dir: str) -> dict[str, Any]:
    openai_like = {"kind": "openai", "api_key": "env:FAKE_UPSTREAM_KEY", "timeouts": {"connect": 2, "read": 5}}
    no_retry = {"retries": 0}
    free = {"free": True}
    return {
        "server": {"max_body_bytes": 64 * 1024, "data_dir": data_dir},
        "providers": [
            {"name": "openai", "base_url": openai_fake.base_url, **openai_like},
            {"name": "groq", "base_url": openai_fake.base_url, **openai_like},
            {"name": "byok", "base_url": byok.base_url, **openai_like},
            {"name": "anthropic", "kind": "anthropic", "base_url": anthropic.url, "api_key": "env:SEED_ANTHROPIC_KEY"},
        ],
        "models": [
            _model(
                "gpt-4o-mini",
                {"provider": "openai", "model": "gpt-4o-mini", "id": "ep-mini-openai"},
                {"provider": "groq", "model": "gpt-4o-mini", "region": "us-east1"},
                context_window=128000,
                pricing={"input": "0.15", "output": "0.60"},
            ),
            _model(
                "claude-sonnet-4-6",
                {"provider": "anthropic", "model": "claude-sonnet-4-6"},
                context_window=200000,
                pricing={"input": "3", "output": "15"},
            ),
            _model(
                "llama-3.1-8b",
                {"provider": "groq", "model": "llama-3.1-8b-instant"},
                context_window=131072,
                pricing={"input": "0.05", "output": "0.08"},
            ),
            _model("byok-model", {"provider": "byok", "model": "gpt-4o-mini"}, routing=no_retry, pricing=free),
            _model("tiny-context", {"provider": "openai", "model": "ctx-tiny"}, context_window=5, pricing=free),
            _model("error-500", {"provider": "openai", "model": "error-500"}, routing=no_retry, pricing=free),
            _model("die-midstream", {"provider": "openai", "model": "die-midstream"}, routing=no_retry, pricing=free),
            _model(
                "embed-model", {"provider": "openai", "model": "text-embedding-fake"}, type="embedding", pricing=free
            ),
        ],
    }


@pytest.fixture(scope="session", autouse=True)
def _seed_keys() -> Iterator[None]:
    mp = pytest.MonkeyPatch()
    mp.setenv("SEED_ANTHROPIC_KEY", ANTHROPIC_KEY)
    yield
    mp.undo()


@pytest.fixture(scope="session")
def seed_gateway(
    fake_openai: FakeOpenAI,
    seed_anthropic: FakeAnthropic,
    byok_openai: FakeOpenAI,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayServer]:
    """Keys, credits and usage in an SQLite file of its own (the default store, in `server.data_dir`)."""
    data_dir = str(tmp_path_factory.mktemp("seed-gateway"))
    with GatewayServer(seed_config(fake_openai, seed_anthropic, byok_openai, data_dir)) as server:
        yield server


@pytest.fixture
def admin(server: GatewayServer) -> Iterator[Admin]:
    """The admin API of the module's own `server` (each module that asks for it defines its gateway)."""
    a = Admin(server.url, server.master_key)
    yield a
    a.close()
