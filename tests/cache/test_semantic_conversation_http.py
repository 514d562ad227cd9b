"""`cache.semantic.compare: conversation` through HTTP with the openai SDK and the bundled model: the whole
conversation's text is compared, so a conversation reworded in every turn is a semantic hit, and one whose last
question differs is not. Each test's entries are under a namespace of its own (the compared text holds every
message, so a unique system prompt would not set a test apart)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from inferplex.processors.embedding import bundled
from tests.cache.conftest import cache_config, unique
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

pytestmark = pytest.mark.skipif(bundled() is None, reason="the bundled all-MiniLM-L6-v2 is not installed")

GREETING = "Great! How can I help?"


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    config = cache_config(fake_openai, tmp_path_factory.mktemp("semantic-conversation"))
    config["cache"]["semantic"] = {"compare": "conversation"}
    config["models"].append(
        {
            "name": "semantic-chat",
            "deployments": [{"provider": "fake", "model": "gpt-echo"}],
            "pricing": {"input": "0", "output": "3"},
            "cache": {"semantic": True, "threshold": 0.93},
        }
    )
    with GatewayServer(config) as gw:
        yield gw


def converse(server: GatewayServer, namespace: str, first: str, last: str) -> Any:
    sdk = openai.OpenAI(base_url=server.base_url, api_key=server.master_key, max_retries=0)
    return sdk.chat.completions.with_raw_response.create(
        model="semantic-chat",
        messages=[
            {"role": "user", "content": first},
            {"role": "assistant", "content": GREETING},
            {"role": "user", "content": last},
        ],
        extra_headers={"x-inferplex-cache": f"namespace={namespace}"},
    )


def chat_calls(fake: FakeOpenAI) -> int:
    return sum(1 for r in fake.state.requests if r.path == "/v1/chat/completions")


def test_a_reworded_conversation_is_a_semantic_hit(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    namespace, before = unique("ns").replace(" ", "-"), chat_calls(fake_openai)
    first = converse(server, namespace, "Hi, I am planning a trip to Europe.", "What is the capital of France?")
    # every turn reworded (0.97 with the bundled model): in last_user mode the first turn alone would differ
    second = converse(server, namespace, "Hello, I'm planning a trip to Europe.", "Tell me the capital city of France")
    assert (first.headers["x-inferplex-cache"], second.headers["x-inferplex-cache"]) == ("miss", "semantic-hit")
    assert float(second.headers["x-inferplex-cache-similarity"]) >= 0.93
    assert second.parse().choices[0].message.content == "echo: What is the capital of France?"
    assert chat_calls(fake_openai) - before == 1


def test_another_last_question_is_a_miss(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    namespace, before = unique("ns").replace(" ", "-"), chat_calls(fake_openai)
    converse(server, namespace, "Hi, I am planning a trip to Europe.", "What is the capital of France?")
    # one entity apart (0.86) and an unrelated question (0.52): both below the threshold
    germany = converse(server, namespace, "Hi, I am planning a trip to Europe.", "What is the capital of Germany?")
    bread = converse(server, namespace, "Hi, I am planning a trip to Europe.", "How do I bake sourdough bread?")
    assert germany.headers["x-inferplex-cache"] == bread.headers["x-inferplex-cache"] == "miss"
    assert chat_calls(fake_openai) - before == 3
