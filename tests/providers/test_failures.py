"""Each provider's one error map (`ErrorMap`, providers/failures.py), as tables, and where it is applied.

Rows: a provider's status, typed error or transport exception -> the `GatewayError` class and status the
caller sees. Then, through a real adapter against the Anthropic fake: a typed error read by the translator
is mapped by the adapter's map and chained to the provider's own failure (`raise ... from`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from inferplex.canonical import ChatRequest
from inferplex.config import DeploymentConfig, ModelConfig, ProviderConfig
from inferplex.errors import GatewayError, InvalidRequest, RateLimited, UpstreamError, UpstreamTimeout
from inferplex.gateway_request import GatewayRequest, parse_request
from inferplex.providers import anthropic, bedrock, gemini
from inferplex.providers.base import CallInfo
from inferplex.providers.failures import OPENAI, ErrorMap, ProviderFailure, UpstreamOverloaded
from inferplex.providers.http import new_session
from inferplex.targets import Target
from tests.fakes.anthropic_upstream import FakeAnthropic

MAPS = {"openai": OPENAI, "anthropic": anthropic.ERRORS, "gemini": gemini.ERRORS, "bedrock": bedrock.ERRORS}


def test_every_remote_adapter_declares_one_error_map() -> None:
    for name, errors in MAPS.items():
        assert isinstance(errors, ErrorMap), name
        assert errors.bind("mine").provider == "mine"


@pytest.mark.parametrize(
    ("provider", "kind", "cls", "status"),
    [
        ("anthropic", "overloaded_error", UpstreamOverloaded, 503),
        ("anthropic", "rate_limit_error", RateLimited, 429),
        ("anthropic", "invalid_request_error", InvalidRequest, 400),
        ("anthropic", "api_error", UpstreamError, 502),
        ("anthropic", "error_from_the_future", UpstreamError, 502),
        ("bedrock", "ThrottlingException", RateLimited, 429),
        ("bedrock", "ServiceUnavailableException", UpstreamOverloaded, 503),
        ("bedrock", "ValidationException", InvalidRequest, 400),
        ("bedrock", "ModelStreamErrorException", UpstreamError, 502),
        ("bedrock", "ModelTimeoutException", UpstreamError, 502),  # as before issue 20: a 502, not a 504
        ("bedrock", "NewException", UpstreamError, 502),
        ("gemini", "UNAVAILABLE", UpstreamOverloaded, 503),
        ("gemini", "RESOURCE_EXHAUSTED", RateLimited, 429),
        ("gemini", "INVALID_ARGUMENT", InvalidRequest, 400),
        ("gemini", "SOMETHING_NEW", UpstreamError, 502),
    ],
)
def test_typed_errors(provider: str, kind: str, cls: type[GatewayError], status: int) -> None:
    err = MAPS[provider].failure(ProviderFailure(kind, "provider says no"))
    assert type(err) is cls and err.status == status and err.message == "provider says no"


@pytest.mark.parametrize(
    ("provider", "status", "cls", "mapped"),
    [
        ("anthropic", 529, UpstreamOverloaded, 503),
        ("gemini", 503, UpstreamOverloaded, 503),
        ("bedrock", 503, UpstreamOverloaded, 503),
        ("openai", 503, UpstreamError, 502),  # an OpenAI-compatible 503 says nothing more than its status
        ("openai", 529, UpstreamError, 502),
        ("openai", 400, InvalidRequest, 400),
        ("openai", 504, UpstreamTimeout, 504),
    ],
)
def test_statuses(provider: str, status: int, cls: type[GatewayError], mapped: int) -> None:
    err = MAPS[provider].bind("p").status(status, b'{"error": {"message": "busy"}}', {"retry-after": "3"})
    assert type(err) is cls and err.status == mapped and err.message == "busy"


def test_retry_after_is_kept_on_a_429_and_on_an_overloaded_answer() -> None:
    assert OPENAI.status(429, b"{}", {"retry-after": "7"}).retry_after == 7
    assert anthropic.ERRORS.status(529, b"{}", {"retry-after": "2"}).retry_after == 2


@pytest.mark.parametrize(
    ("exc", "cls", "message"),
    [
        (aiohttp.ServerTimeoutError("slow"), UpstreamTimeout, "provider p timed out"),  # also a ClientError
        (TimeoutError(), UpstreamTimeout, "provider p timed out"),
        (aiohttp.ServerDisconnectedError(), UpstreamError, "provider p closed the connection"),
        (aiohttp.ClientPayloadError("cut"), UpstreamError, "provider p closed the connection: cut"),
        (ConnectionResetError("reset"), UpstreamError, "provider p failed: ConnectionResetError: reset"),
    ],
)
def test_transport_failures_most_specific_rule_wins(exc: BaseException, cls: type[GatewayError], message: str) -> None:
    err = OPENAI.bind("p").transport(exc)
    assert type(err) is cls and err.message.startswith(message)


# ---- applied by the adapter, the cause chained ----------------------------------------------------------------


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic("sk-ant-failures").start()
    yield server
    server.stop()


@pytest.fixture
async def adapter(fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[anthropic.Anthropic]:
    monkeypatch.setenv("FAILURES_ANTHROPIC_KEY", "sk-ant-failures")
    config = ProviderConfig(name="claude", kind="anthropic", base_url=fake.url, api_key="env:FAILURES_ANTHROPIC_KEY")
    session = new_session()
    yield anthropic.create(config, SimpleNamespace(http=session))
    await session.close()


def _target(adapter: anthropic.Anthropic, upstream: str) -> Target:
    deployment = DeploymentConfig(provider="claude", model=upstream)
    model = ModelConfig.model_validate({"name": "c", "deployments": [deployment.model_dump()]})
    return Target(model, deployment, adapter.config)


def _request(stream: bool) -> GatewayRequest[ChatRequest]:
    raw: dict[str, Any] = {"model": "c", "messages": [{"role": "user", "content": "hi there"}], "stream": stream}
    return parse_request(ChatRequest, raw)


async def test_a_midstream_error_event_is_mapped_and_chained(adapter: anthropic.Anthropic) -> None:
    request = _request(stream=True)
    chunks = adapter.chat_stream(request, _target(adapter, "claude-midstream-1"), CallInfo())
    with pytest.raises(UpstreamOverloaded) as info:
        async for _ in chunks:
            pass
    assert isinstance(info.value.__cause__, ProviderFailure)
    assert info.value.__cause__.kind == "overloaded_error"


async def test_an_overloaded_status_is_mapped_by_the_adapters_map(adapter: anthropic.Anthropic) -> None:
    request = _request(stream=False)
    with pytest.raises(UpstreamOverloaded) as info:
        await adapter.chat(request, _target(adapter, "claude-error-529"), CallInfo())
    assert info.value.upstream_status == 529 and info.value.status == 503
