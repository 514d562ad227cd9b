"""The Responses API's native road (a provider that speaks Responses itself) answered from the cache: the
upstream body, history included, is the key, so a repeated request is one upstream call and a different
history is another; the stored answer is dressed with the new response's own id."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.accounts.conftest import Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    tmp = tmp_path_factory.mktemp("native-cache")
    config = billing_config(fake_openai, tmp, responses={"tick_s": 0.2})
    native = {**config["providers"][0], "name": "native", "options": {"responses_api": True}}
    config["providers"].append(native)
    config["models"].append(
        {"name": "native-echo", "deployments": [{"provider": "native", "model": "gpt-x"}],
         "pricing": {"input": "1", "output": "3"}, "routing": {"retries": 0}}
    )  # fmt: skip
    config["cache"] = {"enabled": True, "backend": "memory"}
    with GatewayServer(config) as gw:
        yield gw


@pytest.fixture
def client(server: GatewayServer) -> Iterator[openai.OpenAI]:
    admin = Admin(server.url, server.master_key)
    key = admin.create_key(scopes=["chat"], credits_micros=10**9)["key"]
    admin.close()
    with openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0) as c:
        yield c


def _calls(fake: FakeOpenAI) -> int:
    return sum(1 for r in fake.state.requests if r.path.endswith("/responses"))


def test_a_repeated_native_response_is_one_upstream_call(client: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    before = _calls(fake_openai)
    first = client.responses.with_raw_response.create(model="native-echo", input="cache me natively")
    second = client.responses.with_raw_response.create(model="native-echo", input="cache me natively")
    assert first.headers["x-inferplex-cache"] == "miss" and second.headers["x-inferplex-cache"] == "hit"
    a, b = first.parse(), second.parse()
    assert a.output_text == b.output_text == "echo: cache me natively"
    assert a.id != b.id and b.model == "native-echo"
    assert _calls(fake_openai) == before + 1
    # the same input continuing a stored response is another request: its history goes upstream
    follow = client.responses.with_raw_response.create(
        model="native-echo", input="cache me natively", previous_response_id=a.id
    )
    assert follow.headers["x-inferplex-cache"] == "miss" and _calls(fake_openai) == before + 2


def test_a_native_stream_is_not_cached(client: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    before = _calls(fake_openai)
    for _ in range(2):
        with client.responses.create(model="native-echo", input="streamed natively", stream=True) as events:
            assert [e.type for e in events][-1] == "response.completed"
    assert _calls(fake_openai) == before + 2
