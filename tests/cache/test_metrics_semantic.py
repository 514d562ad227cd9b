"""A semantic hit, as operators see it: `x-inferplex-cache: semantic-hit` on the answer, `semantic-hit` in its
usage row, `semantic_hits` in `/admin/cache`'s window, `outcome="semantic-hit"` in
`inferplex_cache_requests_total`, and its vector in `inferplex_cache_vectors`; purging the entry removes the
vector too, so the next paraphrase is a miss (the upstream is called again). The bundled MiniLM embeds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cache.support_ops import Operator, ask, cached_config, scrape, upstream_calls, value
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

pytest.importorskip("inferplex.cache.semantic", reason="the semantic cache (cache/semantic.py) is not there yet")

ASKED = "What is the capital city of France? ({tag})"
PARAPHRASE = "what's the capital of France? ({tag})"


@pytest.fixture
def gateway(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    config = cached_config(fake_openai)
    config["models"].append(
        {"name": "sem", "deployments": [{"provider": "fake", "model": "gpt-echo"}],
         "cache": {"semantic": True, "threshold": 0.85}}
    )  # fmt: skip
    with GatewayServer(config) as server:
        yield server


def test_a_semantic_hit_is_logged_counted_and_purged_with_its_vector(
    gateway: GatewayServer, fake_openai: FakeOpenAI
) -> None:
    operator = Operator(gateway)
    try:
        tag = "op-semantic"
        _, first = ask(gateway, ASKED.format(tag=tag), model="sem")
        _, paraphrased = ask(gateway, PARAPHRASE.format(tag=tag), model="sem")
        assert (first["x-inferplex-cache"], paraphrased["x-inferplex-cache"]) == ("miss", "semantic-hit")
        assert paraphrased["x-inferplex-cache-entry"] == first["x-inferplex-cache-entry"]
        assert operator.request_row(paraphrased["x-inferplex-request-id"])["cache"] == "semantic-hit"

        state = operator.cache()
        assert (state["entries"], state["vectors"]) == (1, 1)
        sem = next(m for m in state["window"]["by_model"] if m["model"] == "sem")
        assert (sem["semantic_hits"], sem["misses"], sem["hit_rate"]) == (1, 1, 0.5)
        samples = scrape(gateway)
        assert value(samples, "inferplex_cache_requests_total", model="sem", outcome="semantic-hit") == 1
        assert value(samples, "inferplex_cache_vectors", backend="memory") == 1

        assert operator.purge(entry=first["x-inferplex-cache-entry"]) == 1
        assert value(scrape(gateway), "inferplex_cache_vectors", backend="memory") == 0
        calls = upstream_calls(fake_openai, tag)
        _, again = ask(gateway, PARAPHRASE.format(tag=tag), model="sem")
        assert again["x-inferplex-cache"] == "miss" and upstream_calls(fake_openai, tag) == calls + 1
    finally:
        operator.close()
