"""The semantic cache through HTTP with the official openai SDK and the bundled all-MiniLM-L6-v2: a paraphrase
of a stored question is answered from the cache (`semantic-hit`, with its similarity), an unrelated question
is not, nor another account's paraphrase, nor one below the request's own threshold.

Each test opens a partition of its own with a unique system prompt (the system prompt is part of what must
match exactly), so the user's questions can be plain sentences whose similarities are known
(tests/cache/test_semantic_model.py prints them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest

from inferplex.processors.embedding import bundled
from tests.accounts.conftest import Admin
from tests.cache.conftest import cache_config, unique, upstream_calls
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

pytestmark = pytest.mark.skipif(bundled() is None, reason="the bundled all-MiniLM-L6-v2 is not installed")

QUESTION = "What is the capital of France?"
PARAPHRASE = "Tell me the capital city of France"  # 0.92 with the bundled model
UNRELATED = "How do I bake sourdough bread?"  # 0.13

SEMANTIC_MODELS: list[dict[str, Any]] = [
    {
        "name": "semantic-faq",
        "deployments": [{"provider": "fake", "model": "gpt-echo"}],
        "pricing": {"input": "0", "output": "3"},
        "cache": {"semantic": True, "threshold": 0.9},
    },
]


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with GatewayServer(cache_config(fake_openai, tmp_path_factory.mktemp("semantic"), SEMANTIC_MODELS)) as gw:
        yield gw


def ask(server: GatewayServer, system: str, question: str, key: str | None = None, **kw: Any) -> Any:
    sdk = openai.OpenAI(base_url=server.base_url, api_key=key or server.master_key, max_retries=0)
    return sdk.chat.completions.with_raw_response.create(
        model=kw.pop("model", "semantic-faq"),
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
        **kw,
    )


def test_a_paraphrase_is_a_semantic_hit_with_its_similarity(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    system = unique("system")
    first = ask(server, system, QUESTION)
    second = ask(server, system, PARAPHRASE)
    assert first.headers["x-inferplex-cache"] == "miss"
    assert second.headers["x-inferplex-cache"] == "semantic-hit"
    similarity = float(second.headers["x-inferplex-cache-similarity"])
    assert 0.9 <= similarity < 1.0
    assert second.headers["x-inferplex-cache-entry"] == first.headers["x-inferplex-cache-entry"]
    assert second.parse().choices[0].message.content == first.parse().choices[0].message.content
    assert upstream_calls(fake_openai, system) == 1
    assert orjson.loads(second.http_response.content)["timings"]["cache"] == "semantic-hit"
    # the same question again is an exact hit, no similarity
    third = ask(server, system, QUESTION)
    assert third.headers["x-inferplex-cache"] == "hit" and "x-inferplex-cache-similarity" not in third.headers


def test_an_unrelated_question_is_a_miss(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    system = unique("system")
    assert ask(server, system, QUESTION).headers["x-inferplex-cache"] == "miss"
    other = ask(server, system, UNRELATED)
    assert other.headers["x-inferplex-cache"] == "miss"
    assert other.parse().choices[0].message.content == f"echo: {UNRELATED}"
    assert upstream_calls(fake_openai, system) == 2


def test_another_system_prompt_is_another_partition(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    system = unique("system")
    ask(server, system, QUESTION)
    assert ask(server, system + " (and be brief)", PARAPHRASE).headers["x-inferplex-cache"] == "miss"


def test_another_account_never_hits_an_entry_by_meaning(
    server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI
) -> None:
    system = unique("system")
    one, two, three = (admin.create_key(credits_micros=100_000) for _ in range(3))
    assert ask(server, system, QUESTION, one["key"]).headers["x-inferplex-cache"] == "miss"
    other = ask(server, system, PARAPHRASE, two["key"])
    assert other.headers["x-inferplex-cache"] == "miss"
    assert other.parse().choices[0].message.content == f"echo: {PARAPHRASE}"  # its own upstream answer
    assert ask(server, system, QUESTION, three["key"]).headers["x-inferplex-cache"] == "miss"  # nor exactly
    assert upstream_calls(fake_openai, system) == 3
    # the first account's own paraphrase does hit its entry, through another of its keys too
    sibling = admin.create_key(account_id=one["account_id"])
    assert ask(server, system, PARAPHRASE, sibling["key"]).headers["x-inferplex-cache"] == "semantic-hit"


def test_a_request_threshold_above_the_similarity_is_a_miss(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    system = unique("system")
    ask(server, system, QUESTION)
    strict = ask(server, system, PARAPHRASE, extra_body={"cache": {"threshold": 0.99}})
    assert strict.headers["x-inferplex-cache"] == "miss"
    assert upstream_calls(fake_openai, system) == 2
    # and a lower one in the header finds it (the stored paraphrase or the question, whichever is nearer)
    sdk = openai.OpenAI(base_url=server.base_url, api_key=server.master_key, max_retries=0)
    loose = sdk.chat.completions.with_raw_response.create(
        model="semantic-faq",
        messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": "Which city is France's capital?"},
        ],
        extra_headers={"x-inferplex-cache": "threshold=0.85"},
    )
    assert loose.headers["x-inferplex-cache"] == "semantic-hit"
    assert float(loose.headers["x-inferplex-cache-similarity"]) >= 0.85


def test_a_request_asks_for_semantic_matching_on_a_model_without_it(
    server: GatewayServer, fake_openai: FakeOpenAI
) -> None:
    system = unique("system")
    # `priced` does not match by meaning unless asked; the vector is made (and filed) only when asked
    ask(server, system, QUESTION, model="priced", extra_headers={"x-inferplex-cache": "semantic"})
    plain = ask(server, system, PARAPHRASE, model="priced")
    assert plain.headers["x-inferplex-cache"] == "miss"
    asked = ask(server, system, "What's France's capital?", model="priced", extra_body={"cache": {"semantic": True}})
    assert asked.headers["x-inferplex-cache"] == "semantic-hit"  # 0.98, above the default 0.95
    assert upstream_calls(fake_openai, system) == 2


def test_a_streamed_paraphrase_is_replayed_from_a_stored_stream(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    system = unique("system")
    sdk = openai.OpenAI(base_url=server.base_url, api_key=server.master_key, max_retries=0)

    def stream(question: str) -> tuple[str, str]:
        with sdk.chat.completions.with_streaming_response.create(
            model="semantic-faq",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
            stream=True,
        ) as response:
            text = "".join(chunk.choices[0].delta.content or "" for chunk in response.parse() if chunk.choices)
            return response.headers["x-inferplex-cache"], text

    assert stream(QUESTION) == ("miss", f"echo: {QUESTION}")
    assert stream(PARAPHRASE) == ("semantic-hit", f"echo: {QUESTION}")
    # a buffered request is another partition than a stream: a miss
    assert ask(server, system, PARAPHRASE).headers["x-inferplex-cache"] == "miss"
    assert upstream_calls(fake_openai, system) == 2


def test_a_question_after_a_long_document_is_not_matched_by_meaning(
    server: GatewayServer, fake_openai: FakeOpenAI
) -> None:
    # past the model's 128 tokens the two would embed identically (the document is all it sees): no lookup
    system = unique("system")
    document = "The Treaty of Westphalia was signed in 1648 and ended the Thirty Years' War. " * 12
    assert ask(server, system, document + "Who signed it?").headers["x-inferplex-cache"] == "miss"
    other = ask(server, system, document + "What year was it signed?")
    assert other.headers["x-inferplex-cache"] == "miss"
    assert other.parse().choices[0].message.content.endswith("What year was it signed?")
    assert ask(server, system, document + "Who signed it?").headers["x-inferplex-cache"] == "hit"  # exact still
    assert upstream_calls(fake_openai, system) == 2
