"""InferExchange's published API beyond its chat page (seed 003, ../shared/reference/seed-apis.md), through HTTP:
per-route rate limits with `X-RateLimit-*` headers and its 429 body, its 503 for a model nothing can serve,
and `GET /api/v1/models` with `pricing: {prompt, completion, unit}`; with raw httpx and the `openai` SDK
(which InferExchange's clients use), and across two gateway processes sharing Redis.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from inferplex.limits import LimitStore, Rate
from inferplex.limits.memory import MemoryLimits
from inferplex.limits.redis import RedisLimits
from tests.accounts.conftest import REDIS_URL, Admin
from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer, free_port
from tests.replicas import serve

CHAT = {"model": "echo-model", "messages": [{"role": "user", "content": "What is machine learning?"}]}
RETRY_MESSAGE = re.compile(r"^Rate limit exceeded\. Try again in (\d+) seconds\.$")


def _config(fake: FakeOpenAI, **inferexchange: Any) -> dict[str, Any]:
    config = openai_config(fake)
    # A model whose only deployment is dedicated: no deployment can serve a request that names no endpoint_id.
    config["models"].append(
        {
            "name": "reserved-model",
            "deployments": [{"provider": "fake", "model": "gpt-echo", "id": "ep-reserved", "dedicated": True}],
            "pricing": {"input": "1.25", "output": "10"},
        }
    )
    config["inferexchange"] = inferexchange
    return config


@pytest.fixture(scope="module")
def gw(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    with GatewayServer(_config(fake_openai, chat_rpm=3, models_rpm=2)) as server:
        yield server


@pytest.fixture
def key(gw: GatewayServer) -> Iterator[str]:
    """A fresh caller key for each test: the limits are per key, so each test starts with full buckets."""
    admin = Admin(gw.url, gw.master_key)
    created = admin.create_key(credits_micros=10_000_000)
    admin.close()
    yield created["key"]


def chat(gw: GatewayServer, key: str, body: Any = CHAT) -> httpx.Response:
    return httpx.post(gw.url + "/api/v1/chat/completions", json=body, headers=_auth(key), timeout=10)


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _limits(resp: httpx.Response) -> tuple[int, int, int]:
    h = resp.headers
    return int(h["x-ratelimit-limit"]), int(h["x-ratelimit-remaining"]), int(h["x-ratelimit-reset"])


def assert_rate_limited(resp: httpx.Response) -> int:
    """InferExchange's 429, exactly as published; returns the seconds it asks to wait."""
    assert resp.status_code == 429, resp.text
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == "RATE_LIMITED"
    found = RETRY_MESSAGE.match(body["error"]["message"])
    assert found is not None, body
    assert resp.headers["retry-after"] == found.group(1)
    return int(found.group(1))


def test_chat_counts_down_then_refuses_with_the_published_429(gw: GatewayServer, key: str) -> None:
    before = time.time()
    seen = [chat(gw, key) for _ in range(3)]
    assert [r.status_code for r in seen] == [200] * 3
    assert [_limits(r)[:2] for r in seen] == [(3, 2), (3, 1), (3, 0)]
    for r in seen:  # unix time at which the bucket is full again: one request back every 20 s, three in 60
        assert before < _limits(r)[2] <= math.ceil(time.time()) + 61
    assert _limits(seen[2])[2] >= _limits(seen[0])[2]
    refused = chat(gw, key)
    wait = assert_rate_limited(refused)
    assert 1 <= wait <= 20  # the next request comes back 60/3 s after the first
    assert _limits(refused)[:2] == (3, 0)


def test_a_stream_carries_the_headers_too(gw: GatewayServer, key: str) -> None:
    body = {**CHAT, "stream": True}
    with httpx.stream("POST", gw.url + "/api/v1/chat/completions", json=body, headers=_auth(key)) as resp:
        lines = [line for line in resp.iter_lines() if line]
    assert resp.headers["content-type"].startswith("text/event-stream") and lines[-1] == "data: [DONE]"
    assert _limits(resp)[:2] == (3, 2)


def test_models_have_their_own_bucket_shared_by_both_model_routes(gw: GatewayServer, key: str) -> None:
    assert chat(gw, key).status_code == 200
    listed = httpx.get(gw.url + "/api/v1/models", headers=_auth(key), timeout=10)
    assert listed.status_code == 200 and _limits(listed)[:2] == (2, 1)
    one = httpx.get(gw.url + "/api/v1/models/echo-model", headers=_auth(key), timeout=10)
    assert one.status_code == 200 and _limits(one)[:2] == (2, 0)
    assert_rate_limited(httpx.get(gw.url + "/api/v1/models", headers=_auth(key), timeout=10))
    assert _limits(chat(gw, key))[:2] == (3, 1)  # chat's bucket did not move


def test_limits_are_per_caller_key(gw: GatewayServer, key: str) -> None:
    for _ in range(3):
        assert chat(gw, key).status_code == 200
    assert_rate_limited(chat(gw, key))
    admin = Admin(gw.url, gw.master_key)
    other = admin.create_key(credits_micros=10_000_000)["key"]
    admin.close()
    assert _limits(chat(gw, other))[:2] == (3, 2)


def test_other_routes_carry_no_rate_limit_headers_and_are_not_counted(gw: GatewayServer, key: str) -> None:
    for _ in range(4):
        resp = httpx.post(gw.url + "/v1/chat/completions", json=CHAT, headers=_auth(key), timeout=10)
        assert resp.status_code == 200
        assert not any(h.startswith("x-ratelimit") for h in resp.headers)
    assert _limits(chat(gw, key))[:2] == (3, 2)


def test_every_failure_carries_the_headers_and_keeps_openais_object(gw: GatewayServer, key: str) -> None:
    bad = chat(gw, key, {"model": "echo-model"})  # no messages: counted, refused in OpenAI's shape
    assert bad.status_code == 400
    assert set(bad.json()["error"]) == {"message", "type", "param", "code"}
    assert _limits(bad)[:2] == (3, 2)
    missing = chat(gw, key, {**CHAT, "model": "no-such-model"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    assert _limits(missing)[:2] == (3, 1)
    unknown = httpx.get(gw.url + "/api/v1/models/no-such-model", headers=_auth(key), timeout=10)
    assert unknown.status_code == 404 and _limits(unknown)[:2] == (2, 1)


def test_an_unauthenticated_request_is_counted_nowhere(gw: GatewayServer) -> None:
    resp = chat(gw, "sk-infer-YOUR_KEY")
    assert resp.status_code == 401 and set(resp.json()["error"]) == {"message", "type", "param", "code"}
    assert "x-ratelimit-limit" not in resp.headers


def test_a_model_with_no_deployment_able_to_serve_is_a_503_in_its_shape(gw: GatewayServer, key: str) -> None:
    resp = chat(gw, key, {**CHAT, "model": "reserved-model"})
    assert resp.status_code == 503, resp.text
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == "MODEL_UNAVAILABLE" and "reserved-model" in body["error"]["message"]
    assert _limits(resp)[:2] == (3, 2)
    # The OpenAI dialect keeps its own object for the same failure.
    body = {**CHAT, "model": "reserved-model"}
    plain = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=_auth(key), timeout=10)
    assert plain.status_code == 503 and plain.json()["error"]["code"] == "model_unavailable"


def test_models_list_items_and_pricing(gw: GatewayServer, key: str) -> None:
    resp = httpx.get(gw.url + "/api/v1/models", headers=_auth(key), timeout=10)
    assert resp.status_code == 200
    body = resp.json()
    assert body["object"] == "list"
    cards = {m["id"]: m for m in body["data"]}
    assert set(cards["reserved-model"]) == {"id", "object", "created", "owned_by", "pricing"}
    assert cards["reserved-model"]["object"] == "model" and cards["reserved-model"]["owned_by"] == "fake"
    assert cards["reserved-model"]["pricing"] == {"prompt": "1.25", "completion": "10", "unit": "per_million_tokens"}
    assert cards["echo-model"]["pricing"] == {"prompt": "0.15", "completion": "0.60", "unit": "per_million_tokens"}


def test_the_openai_sdk_reads_the_headers_and_the_429(gw: GatewayServer, key: str) -> None:
    client = openai.OpenAI(base_url=gw.url + "/api/v1", api_key=key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model="echo-model", messages=CHAT["messages"])  # type: ignore[arg-type]
    assert raw.headers["X-RateLimit-Limit"] == "3" and raw.headers["X-RateLimit-Remaining"] == "2"
    assert int(raw.headers["X-RateLimit-Reset"]) > time.time()
    assert raw.parse().choices[0].message.content == "echo: What is machine learning?"
    models = client.models.with_raw_response.list()
    assert models.headers["X-RateLimit-Limit"] == "2" and models.headers["X-RateLimit-Remaining"] == "1"
    assert "echo-model" in [m.id for m in models.parse()]
    for _ in range(2):
        client.chat.completions.create(model="echo-model", messages=CHAT["messages"])  # type: ignore[arg-type]
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="echo-model", messages=CHAT["messages"])  # type: ignore[arg-type]
    err = caught.value
    assert err.status_code == 429 and err.code == "RATE_LIMITED"
    assert isinstance(err.body, dict) and RETRY_MESSAGE.match(err.body["message"])
    assert int(err.response.headers["Retry-After"]) >= 1
    assert err.response.headers["X-RateLimit-Remaining"] == "0"


def test_the_operator_sets_or_turns_off_each_limit(fake_openai: FakeOpenAI) -> None:
    with GatewayServer(_config(fake_openai, chat_rpm=None, models_rpm=1000)) as server:
        for _ in range(5):
            resp = chat(server, server.master_key)
            assert resp.status_code == 200 and "x-ratelimit-limit" not in resp.headers
        listed = httpx.get(server.url + "/api/v1/models", headers=server.auth, timeout=10)
        assert _limits(listed)[:2] == (1000, 999)


# ---- the store's `take`, which the headers come from -----------------------------------------------------


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[LimitStore]:
    s: LimitStore = (
        MemoryLimits() if request.param == "memory" else RedisLimits(REDIS_URL, "ix-test:" + os.urandom(6).hex())
    )
    yield s
    await s.aclose()


async def test_take_says_what_is_left_and_admits_exactly_the_limit_at_once(store: LimitStore) -> None:
    quotas = await asyncio.gather(*(store.take(Rate("ix", 1, 10, 60)) for _ in range(25)))
    admitted = [q for q in quotas if q.admitted]
    assert sorted(q.remaining for q in admitted) == list(range(10))
    assert all(q.retry_s == 0 and 0 < q.reset_s <= 60.01 for q in admitted)
    refused = [q for q in quotas if not q.admitted]
    assert len(refused) == 15 and all(q.remaining == 0 and 0 < q.retry_s <= 6.01 for q in refused)
    assert (await store.take(Rate("other", 1, 10, 60))).remaining == 9  # keys are independent


# ---- two gateway processes sharing Redis ----------------------------------------------------------------


@pytest.fixture(scope="module")
def replicas(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two `inferplex serve` processes, each with its own SQLite store, sharing one Redis for limits."""
    prefix = f"inferplex_test:{os.urandom(6).hex()}:"
    env = {**os.environ, "INFERPLEX_TEST_MASTER": "ipx-ix-replicas"}
    paths = []
    for _ in range(2):
        tmp = tmp_path_factory.mktemp("ix-replica")
        config = _config(fake_openai, chat_rpm=7)
        config["server"] |= {"master_key": "env:INFERPLEX_TEST_MASTER", "data_dir": str(tmp)}
        config["storage"] = {"redis_url": REDIS_URL, "redis_prefix": prefix}
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        paths.append(path)
    with serve(paths, env, prefix) as urls:
        yield urls


def test_a_burst_across_two_replicas_admits_exactly_the_limit(replicas: list[str]) -> None:
    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=100)) as client:
            calls = [
                client.post(replicas[i % 2] + "/api/v1/chat/completions", json=CHAT, headers=_auth("ipx-ix-replicas"))
                for i in range(30)
            ]
            return await asyncio.gather(*calls)

    responses = asyncio.run(burst())
    ok = [r for r in responses if r.status_code == 200]
    assert len(ok) == 7
    for r in responses:
        if r.status_code != 200:
            assert_rate_limited(r)
    # Each admitted request saw its own place in the one shared bucket.
    assert sorted(_limits(r)[1] for r in ok) == list(range(7))
    assert {_limits(r)[0] for r in responses} == {7}


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_with_redis_down_the_operators_policy_applies(fake_openai: FakeOpenAI, policy: str) -> None:
    config = _config(fake_openai, models_rpm=5)
    config["storage"] = {"redis_url": f"redis://127.0.0.1:{free_port()}/0", "redis_failure": policy}
    with GatewayServer(config) as server:
        resp = httpx.get(server.url + "/api/v1/models", headers=server.auth, timeout=10)
    if policy == "open":  # not enforced while Redis is down, and said so as a full bucket
        assert resp.status_code == 200 and _limits(resp)[:2] == (5, 4)
    else:
        assert resp.status_code == 503, resp.text
        assert resp.json() == {"error": {"code": "SERVICE_UNAVAILABLE", "message": resp.json()["error"]["message"]}}
