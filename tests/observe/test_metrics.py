"""`/metrics` after known traffic: exact counts, scraped over HTTP and parsed as Prometheus parses them.

The traffic goes through the official openai SDK against a real gateway on the fake upstream: a buffered
chat, a streamed chat, an embedding, a refused key (401), a bad request (400), a request whose first
deployment answers 500 and fails over to the second (whose breaker then opens: one failure opens it), and
one whose model answers 503 and falls back to another model.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer, free_port

HI = [{"role": "user", "content": "hello there metrics"}]
PRICE = {"input": "0.15", "output": "0.60"}


def metrics_config(fake: FakeOpenAI, **metrics: Any) -> dict[str, Any]:
    config = openai_config(fake)
    config["models"] += [
        {
            "name": "failover",
            "routing": {"strategy": "priority", "cooldown": {"failures": 1}},
            "deployments": [
                {"provider": "fake", "model": "error-500", "id": "fo-bad", "priority": 0},
                {"provider": "fake", "model": "gpt-echo", "id": "fo-good", "priority": 1},
            ],
            "pricing": PRICE,
        },
        {
            "name": "falls-back",
            "routing": {"retries": 0, "fallbacks": ["echo-model"]},
            "deployments": [{"provider": "fake", "model": "error-503"}],
            "pricing": PRICE,
        },
    ]
    config["observability"] = {"metrics": metrics}
    return config


def scrape(url: str, headers: dict[str, str] | None = None) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the exposition, by (name, labels)."""
    answer = httpx.get(url, headers=headers or {}, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(answer.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The one sample of `name` whose labels include `labels` (0 when none; two matching is a test error)."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else 0.0


def total(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls)


def make_key(server: GatewayServer, **fields: Any) -> dict[str, Any]:
    made = httpx.post(server.url + "/admin/keys", headers=server.auth, json={"name": "m", **fields}, timeout=10)
    assert made.status_code == 201, made.text
    return made.json()


@pytest.fixture(scope="module")
def served(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    with GatewayServer(metrics_config(fake_openai)) as server:
        yield server


def test_known_traffic_gives_exact_counts(served: GatewayServer) -> None:
    caller = make_key(served, credits_micros=10**9, scopes=["chat", "embeddings"])
    scraper = make_key(served, scopes=["metrics"])
    client = openai.OpenAI(api_key=caller["key"], base_url=served.base_url, max_retries=0)

    buffered = client.chat.completions.create(model="echo-model", messages=HI)  # type: ignore[arg-type]
    chunks = list(
        client.chat.completions.create(
            model="echo-model",
            messages=HI,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    streamed = next(c.usage for c in chunks if c.usage is not None)
    embedded = client.embeddings.create(model="embed-model", input="count me")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(api_key="sk-wrong", base_url=served.base_url, max_retries=0).chat.completions.create(
            model="echo-model",
            messages=HI,  # type: ignore[arg-type]
        )
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="echo-model", messages=[])
    failed_over = client.chat.completions.with_raw_response.create(model="failover", messages=HI)  # type: ignore[arg-type]
    assert failed_over.headers["x-inferplex-deployment"] == "fo-good"
    fell_back = client.chat.completions.with_raw_response.create(model="falls-back", messages=HI)  # type: ignore[arg-type]
    assert fell_back.headers["x-inferplex-attempts"] == "2"
    assert buffered.usage is not None and streamed is not None and embedded.usage is not None

    m = scrape(served.url + "/metrics", {"Authorization": f"Bearer {scraper['key']}"})

    chat = {"route": "/v1/chat/completions", "method": "POST", "dialect": "openai"}
    assert value(m, "inferplex_requests_total", **chat, status="200", error_type="") == 4
    assert value(m, "inferplex_requests_total", **chat, status="401", error_type="policy.unauthenticated") == 1
    assert value(m, "inferplex_requests_total", **chat, status="400", error_type="caller.invalid_request") == 1
    assert value(m, "inferplex_requests_total", route="/v1/embeddings", status="200") == 1
    api = sum(v for (n, ls), v in m.items() if n == "inferplex_requests_total" and dict(ls)["route"].startswith("/v1"))
    assert api == 7
    assert value(m, "inferplex_requests_total", route="/admin/keys", status="201") == 2
    assert value(m, "inferplex_requests_total", route="/metrics") == 0  # counted once it has ended
    assert value(m, "inferplex_request_duration_seconds_count", route="/v1/chat/completions") == 6
    assert value(m, "inferplex_active_requests") == 1  # the scrape itself
    assert value(m, "inferplex_active_streams") == 0

    # attempts: echo-model twice on its one deployment, the failover's two, the fallback's two
    assert value(m, "inferplex_upstream_attempts_total", deployment="fake/gpt-echo", outcome="ok") == 3
    assert value(m, "inferplex_upstream_attempts_total", deployment="fo-bad", outcome="error") == 1
    assert value(m, "inferplex_upstream_attempts_total", deployment="fo-good", outcome="ok") == 1
    assert value(m, "inferplex_upstream_attempts_total", deployment="fake/error-503", outcome="error") == 1
    assert value(m, "inferplex_upstream_attempts_total", deployment="fake/text-embedding-fake", outcome="ok") == 1
    assert total(m, "inferplex_upstream_attempts_total") == 7
    assert value(m, "inferplex_upstream_latency_seconds_count", deployment="fo-bad", outcome="error") == 1
    assert value(m, "inferplex_fallbacks_total", model="failover", kind="deployment") == 1
    assert value(m, "inferplex_fallbacks_total", model="falls-back", kind="model") == 1
    assert total(m, "inferplex_fallbacks_total") == 2

    # the failover's first deployment failed once with failures: 1, so its breaker is open
    assert value(m, "inferplex_breaker_opens_total", deployment="fo-bad") == 1
    assert value(m, "inferplex_breaker_state", deployment="fo-bad") == 1
    assert 0 < value(m, "inferplex_breaker_retry_in_seconds", deployment="fo-bad") <= 30
    assert value(m, "inferplex_breaker_state", deployment="fo-good") == 0
    assert value(m, "inferplex_deployment_in_flight", deployment="fake/gpt-echo") == 0

    # GenAI: the two echo-model chats (requested and answered by the same deployment), the embedding
    genai = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "openai", "gen_ai_request_model": "echo-model"}
    answered = {**genai, "gen_ai_response_model": "gpt-echo"}
    assert value(m, "gen_ai_server_request_duration_seconds_count", **answered, error_type="") == 2
    prompt = buffered.usage.prompt_tokens + streamed.prompt_tokens
    output = buffered.usage.completion_tokens + streamed.completion_tokens
    assert value(m, "gen_ai_client_token_usage_count", **answered, gen_ai_token_type="input") == 2
    assert value(m, "gen_ai_client_token_usage_sum", **answered, gen_ai_token_type="input") == prompt
    assert value(m, "gen_ai_client_token_usage_sum", **answered, gen_ai_token_type="output") == output
    assert value(m, "gen_ai_server_time_to_first_token_seconds_count", **answered) == 1  # the stream only
    if streamed.completion_tokens > 1:
        assert value(m, "gen_ai_server_time_per_output_token_seconds_count", **answered) == 1
    embeddings = {"gen_ai_operation_name": "embeddings", "gen_ai_request_model": "embed-model"}
    assert value(m, "gen_ai_client_token_usage_sum", **embeddings, gen_ai_token_type="input") == (
        embedded.usage.prompt_tokens
    )
    assert value(m, "gen_ai_client_token_usage_count", **embeddings, gen_ai_token_type="output") == 0
    refused = {"gen_ai_request_model": "echo-model", "error_type": "caller.invalid_request"}
    assert value(m, "gen_ai_server_request_duration_seconds_count", **refused) in (0, 1)  # refused before or after
    assert value(m, "gen_ai_server_request_duration_seconds_count", gen_ai_request_model="failover") == 1
    # tokens and cost, by the model that answered
    tokens = value(m, "inferplex_tokens_total", model="echo-model", provider="fake", token_type="input")
    assert tokens == prompt + fell_back.parse().usage.prompt_tokens  # type: ignore[union-attr]
    costs = [int(r.headers["x-inferplex-cost-micros"]) for r in (failed_over, fell_back)]
    assert value(m, "inferplex_cost_micros_total", model="failover", provider="fake") == costs[0]
    assert value(m, "inferplex_cost_micros_total", model="echo-model", provider="fake") >= costs[1]
    # the stores the requests used
    assert value(m, "inferplex_store_duration_seconds_count", store="ledger") > 0
    assert value(m, "inferplex_store_duration_seconds_count", store="keys") > 0
    assert total(m, "inferplex_store_errors_total") == 0
    assert value(m, "inferplex_build_info") == 1


def test_metrics_need_the_metrics_or_admin_scope(served: GatewayServer) -> None:
    url = served.url + "/metrics"
    missing = httpx.get(url, timeout=10)
    assert missing.status_code == 401
    assert missing.json()["error"]["type"]  # the OpenAI error object
    chat_only = make_key(served, scopes=["chat"])
    refused = httpx.get(url, headers={"Authorization": f"Bearer {chat_only['key']}"}, timeout=10)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "scope_not_allowed"
    default = make_key(served)  # a key made with the default scopes: everything but admin and metrics
    assert "metrics" not in default["scopes"]
    assert httpx.get(url, headers={"Authorization": f"Bearer {default['key']}"}, timeout=10).status_code == 403
    admin = make_key(served, scopes=["admin"])
    assert httpx.get(url, headers={"Authorization": f"Bearer {admin['key']}"}, timeout=10).status_code == 200
    assert httpx.get(url, headers=served.auth, timeout=10).status_code == 200


def test_separate_listener_serves_metrics_without_credentials(fake_openai: FakeOpenAI) -> None:
    port = free_port()
    config = metrics_config(fake_openai, listen=f"127.0.0.1:{port}", gateway_route=False)
    with GatewayServer(config) as server:
        client = openai.OpenAI(api_key=server.master_key, base_url=server.base_url, max_retries=0)
        client.chat.completions.create(model="echo-model", messages=HI)  # type: ignore[arg-type]
        m = scrape(f"http://127.0.0.1:{port}/metrics")
        assert value(m, "inferplex_requests_total", route="/v1/chat/completions", status="200") == 1
        assert value(m, "inferplex_active_requests") == 0  # the listener's scrape is not a gateway request
        not_here = httpx.get(server.url + "/metrics", headers=server.auth, timeout=10)
        assert not_here.status_code == 404
        assert not_here.json()["error"]["code"] == "metrics_not_served"
    with pytest.raises(httpx.ConnectError):  # stopped with the gateway
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_metrics_off_serve_nothing(fake_openai: FakeOpenAI) -> None:
    with GatewayServer(metrics_config(fake_openai, enabled=False)) as server:
        answer = httpx.get(server.url + "/metrics", headers=server.auth, timeout=10)
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "metrics_not_served"
        # with no sink listening, the usage row still says which route the request came in on
        client = openai.OpenAI(base_url=server.base_url, api_key=server.master_key, max_retries=0)
        made = client.chat.completions.with_raw_response.create(model="echo-model", messages=HI)  # type: ignore[arg-type]
        request_id = made.headers["x-inferplex-request-id"]
        for _ in range(100):
            found = httpx.get(f"{server.url}/admin/requests/{request_id}", headers=server.auth, timeout=10)
            if found.status_code == 200:
                break
            time.sleep(0.05)
        assert found.status_code == 200 and found.json()["route"] == "/v1/chat/completions"


def test_key_labels_only_when_turned_on(fake_openai: FakeOpenAI, served: GatewayServer) -> None:
    unlabelled = scrape(served.url + "/metrics", served.auth)
    assert not any("key_id" in dict(labels) for _, labels in unlabelled)
    with GatewayServer(metrics_config(fake_openai, key_labels=True)) as server:
        caller = make_key(server, credits_micros=10**9, scopes=["chat"])
        client = openai.OpenAI(api_key=caller["key"], base_url=server.base_url, max_retries=0)
        client.chat.completions.create(model="echo-model", messages=HI)  # type: ignore[arg-type]
        m = scrape(server.url + "/metrics", server.auth)
        assert value(m, "inferplex_requests_total", route="/v1/chat/completions", key_id=caller["id"]) == 1
        assert value(m, "inferplex_tokens_total", token_type="input", key_id=caller["id"]) > 0
