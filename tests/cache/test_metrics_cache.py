"""The response cache in `/metrics`, scraped over HTTP and parsed as Prometheus parses it.

- `inferplex_cache_requests_total{model, outcome}` counts each request the cache applied to when it
  finishes (hit, miss, bypass), nothing for a model it does not serve;
- `inferplex_cache_entries` / `_bytes` / `_vectors{backend}` are the store's size, read at the scrape, equal
  to what `/admin/cache` says;
- a hit is not an upstream answer: no upstream attempt is counted for it, and what it is charged counts in
  `inferplex_cost_micros_total` under provider `cache`;
- under `inferplex serve --workers 2` the counters are the server's (summed over the workers), and with the
  in-process backend (each worker's own memory) the sizes are summed over the workers too, while a store
  the workers share (SQLite) is counted once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.cache.support_ops import (
    Operator,
    ask,
    cached_config,
    prompt,
    samples_of,
    scrape,
    total,
    upstream_calls,
    value,
)
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


@pytest.fixture
def gateway(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    config = cached_config(fake_openai)
    config["models"] += [
        {"name": "not-cached", "deployments": [{"provider": "fake", "model": "gpt-echo"}], "cache": {"enabled": False}},
        {
            "name": "priced-full",
            "deployments": [{"provider": "fake", "model": "gpt-echo"}],
            "pricing": {"input": "0", "output": "3"},
            "cache": {"billing": {"charge": "full"}},
        },
    ]
    with GatewayServer(config) as server:
        yield server


def test_each_outcome_is_counted_by_model(gateway: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = prompt("metrics")
    for _ in range(3):
        ask(gateway, text)
    ask(gateway, text, extra_headers={"x-inferplex-cache": "bypass"})
    ask(gateway, text, model="not-cached")
    assert upstream_calls(fake_openai, text) == 3  # the first, the bypass, the uncached model
    samples = scrape(gateway)
    name = "inferplex_cache_requests_total"
    assert value(samples, name, model="echo-model", outcome="miss") == 1
    assert value(samples, name, model="echo-model", outcome="hit") == 2
    assert value(samples, name, model="echo-model", outcome="bypass") == 1
    assert total(samples, name) == 4  # nothing for the model the cache does not serve
    assert total(samples, name, model="not-cached") == 0
    # the hits reached no deployment: three attempts for five answers
    assert total(samples, "inferplex_upstream_attempts_total") == 3
    assert total(samples, "inferplex_requests_total", route="/v1/chat/completions", status="200") == 5


def test_the_store_s_size_is_read_at_the_scrape(gateway: GatewayServer) -> None:
    operator = Operator(gateway)
    try:
        empty = scrape(gateway)
        assert value(empty, "inferplex_cache_entries", backend="memory") == 0
        assert value(empty, "inferplex_cache_bytes", backend="memory") == 0
        assert value(empty, "inferplex_cache_vectors", backend="memory") == 0
        for label in ("one", "two", "three"):
            ask(gateway, prompt(label))
        state = operator.cache()
        samples = scrape(gateway)
        assert value(samples, "inferplex_cache_entries", backend="memory") == state["entries"] == 3
        assert value(samples, "inferplex_cache_bytes", backend="memory") == state["bytes"] > 0
        operator.purge(all=True)
        assert value(scrape(gateway), "inferplex_cache_entries", backend="memory") == 0
    finally:
        operator.close()


def test_a_hit_s_charge_counts_under_provider_cache(gateway: GatewayServer) -> None:
    operator = Operator(gateway)
    try:
        _, secret, _ = operator.key("metrics-cost", scopes=["chat"])
        text = prompt("priced")
        _, first = ask(gateway, text, key=secret, model="priced-full")
        _, again = ask(gateway, text, key=secret, model="priced-full")
        assert (first["x-inferplex-cache"], again["x-inferplex-cache"]) == ("miss", "hit")
        charged = int(again["x-inferplex-cost-micros"])
        assert charged == int(first["x-inferplex-cost-micros"]) > 0  # charge: full
        samples = scrape(gateway)
        assert value(samples, "inferplex_cost_micros_total", model="priced-full", provider="cache") == charged
        assert value(samples, "inferplex_cost_micros_total", model="priced-full", provider="fake") == charged
        assert operator.request_row(again["x-inferplex-request-id"])["cost_micros"] == charged
    finally:
        operator.close()


# ---- serve --workers 2 --------------------------------------------------------------------------------------


def _served_config(upstream: Any, data: Path, backend: str) -> dict[str, Any]:
    from tests.serving.conftest import config

    cfg: dict[str, Any] = config(upstream, data, models=("ok",))
    cfg["cache"] = {"enabled": True, "backend": backend}
    cfg["observability"] = {"metrics": {"enabled": True}}
    return cfg


@pytest.mark.parametrize(("backend", "entries"), [("memory", 2), ("sqlite", 1)])
def test_workers_report_the_server_s_counts_and_sizes(tmp_path: Path, backend: str, entries: int) -> None:
    """The same prompt on each of two workers, twice on the first: 2 misses and 1 hit for the server. In
    memory each worker stored its own entry (2 in all); in the shared SQLite file, one."""
    from tests.observe.test_metrics_workers import on, workers
    from tests.serving.conftest import MASTER_KEY, Served
    from tests.serving.upstream import PacedUpstream

    upstream = PacedUpstream().start()
    served = Served(tmp_path, _served_config(upstream, tmp_path / "data", backend), 2)
    try:
        served.wait_ready()
        first, second = workers(served)
        text = prompt("workers")
        seen = []
        for pid, times in ((first, 2), (second, 1)):
            with on(served, pid) as client:
                sdk = openai.OpenAI(base_url=f"{served.url}/v1", api_key=MASTER_KEY, http_client=client, max_retries=0)
                for _ in range(times):
                    raw = sdk.chat.completions.with_raw_response.create(
                        model="ok", messages=[{"role": "user", "content": text}]
                    )
                    seen.append(raw.headers["x-inferplex-cache"])
        expected = ["miss", "hit", "hit"] if backend == "sqlite" else ["miss", "hit", "miss"]
        assert seen == expected
        misses, hits = expected.count("miss"), expected.count("hit")
        for pid in (first, second):  # either worker answers for the whole server
            with on(served, pid) as client:
                deadline = time.monotonic() + 5
                while True:
                    r = client.get("/metrics")
                    assert r.status_code == 200, r.text
                    samples = samples_of(r.text)
                    got = (
                        value(samples, "inferplex_cache_requests_total", model="ok", outcome="miss"),
                        value(samples, "inferplex_cache_requests_total", model="ok", outcome="hit"),
                        value(samples, "inferplex_cache_entries", backend=backend),
                    )
                    if got == (misses, hits, entries) or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)  # a sibling's in-process size is read each second
                assert got == (misses, hits, entries), (pid, got)
                assert len([k for k in samples if k[0] == "inferplex_cache_entries"]) == 1
    finally:
        served.kill()
        upstream.stop()
