"""The semantic cache with `cache.semantic.embedding_model` naming a configured embedding model (the validating
fake upstream's `embed-model`) instead of the bundled MiniLM: its vectors are the ones compared, and its calls
are the gateway's own, never a caller's request (no usage row, nothing charged).

The fake's vector for a text is (its length, 0, 0.5): two unrelated sentences of one length are identical to
it, which is how these tests tell that the configured model, not the bundled one, did the matching."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.accounts.conftest import Admin
from tests.cache.conftest import cache_config, unique, upstream_calls
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

QUESTION = "What is the capital of France?"
SAME_LENGTH = "Which way to the train station"  # 30 characters too; unrelated in meaning


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    config = cache_config(fake_openai, tmp_path_factory.mktemp("semantic-embedder"))
    config["cache"]["semantic"] = {"embedding_model": "embed-model", "threshold": 0.999}
    config["models"].append(
        {
            "name": "semantic-remote",
            "deployments": [{"provider": "fake", "model": "gpt-echo"}],
            "pricing": {"input": "0", "output": "3"},
            "cache": {"semantic": True},
        }
    )
    with GatewayServer(config) as gw:
        yield gw


def test_the_configured_embedding_model_does_the_matching_unbilled(
    server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI
) -> None:
    assert len(QUESTION) == len(SAME_LENGTH)
    created = admin.create_key(credits_micros=100_000)
    sdk = openai.OpenAI(base_url=server.base_url, api_key=created["key"], max_retries=0)
    system = unique("system")
    before = len(fake_openai.state.requests)

    def ask(question: str) -> openai.APIResponse[object]:
        response: openai.APIResponse[object] = sdk.chat.completions.with_raw_response.create(
            model="semantic-remote",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
        )
        return response

    first, second = ask(QUESTION), ask(SAME_LENGTH)
    assert first.headers["x-inferplex-cache"] == "miss"
    assert second.headers["x-inferplex-cache"] == "semantic-hit"
    assert float(second.headers["x-inferplex-cache-similarity"]) >= 0.999
    assert upstream_calls(fake_openai, system) == 1
    embedded = [r.body for r in fake_openai.state.requests[before:] if r.path == "/v1/embeddings"]
    assert embedded == [
        {"model": "text-embedding-fake", "input": [QUESTION]},
        {"model": "text-embedding-fake", "input": [SAME_LENGTH]},
    ]
    # the caller was charged for its chat requests only: no usage row or ledger entry for the embeddings
    rows = admin.usage(key_id=created["id"])
    assert [r["model"] for r in rows] == ["semantic-remote", "semantic-remote"]
    assert all(r.get("model") != "embed-model" for r in admin.usage())
