"""Routing and resilience through the real gateway, against fake upstreams a test can break and mend.

Three `FlipOpenAI` upstreams (p0, p1, p2) serve every test; each test builds the gateway config it needs.
What is asserted is what a caller sees: status, body, headers (`x-inferplex-deployment`,
`x-inferplex-attempts`, `x-inferplex-service-tier`), stream frames, and what each upstream received.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import UPSTREAM_KEY
from tests.fakes.flip_upstream import FlipOpenAI
from tests.gateway_server import GatewayServer

MSG = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def fakes() -> Iterator[list[FlipOpenAI]]:
    started = [FlipOpenAI(UPSTREAM_KEY) for _ in range(3)]
    for fake in started:
        fake.start()
    yield started
    for fake in started:
        fake.stop()


@pytest.fixture
def ups(fakes: list[FlipOpenAI]) -> list[FlipOpenAI]:
    for fake in fakes:
        fake.reset()
    return fakes


def dep(i: int, **extra: Any) -> dict[str, Any]:
    return {"provider": f"p{i}", "model": f"up-{i}", **extra}


def config(fakes: list[FlipOpenAI], models: list[dict[str, Any]], read: float = 5, **top: Any) -> dict[str, Any]:
    providers = [
        {
            "name": f"p{i}",
            "base_url": f.base_url,
            "api_key": "env:FAKE_UPSTREAM_KEY",
            "timeouts": {"connect": 2, "read": read},
        }
        for i, f in enumerate(fakes)
    ]
    return {"providers": providers, "models": models, **top}


def model(name: str, deployments: list[dict[str, Any]], **routing: Any) -> dict[str, Any]:
    routing.setdefault("backoff", 0.01)
    return {"name": name, "deployments": deployments, "routing": routing, "pricing": {"input": "1", "output": "2"}}


def chat(gw: GatewayServer, **body: Any) -> httpx.Response:
    return httpx.post(gw.base_url + "/chat/completions", headers=gw.auth, json={"messages": MSG, **body}, timeout=30)


def stream_frames(gw: GatewayServer, **body: Any) -> tuple[httpx.Response, list[str]]:
    with httpx.stream(
        "POST",
        gw.base_url + "/chat/completions",
        headers=gw.auth,
        json={"messages": MSG, "stream": True, **body},
        timeout=30,
    ) as resp:
        frames = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
    return resp, frames


def content_of(frames: list[str]) -> str:
    out = ""
    for f in frames:
        data = json.loads(f)
        for choice in data.get("choices") or ():
            out += choice["delta"].get("content") or ""
    return out


# ---- failover, retries, fallbacks ---------------------------------------------------------------------------


def test_a_failing_deployment_is_failed_over_without_the_caller_noticing(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("status:503")
    cfg = config(ups, [model("m", [dep(0, priority=0), dep(1, priority=1)], strategy="priority")])
    with GatewayServer(cfg) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key=gw.master_key, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)  # type: ignore[arg-type]
        assert raw.parse().choices[0].message.content == "echo: hello there"
        assert raw.headers["x-inferplex-deployment"] == "p1/up-1"
        assert raw.headers["x-inferplex-attempts"] == "2"
        assert raw.headers["x-inferplex-provider"] == "p1"
    assert ups[0].hits == 1  # a fresh deployment is tried before retrying the failed one


def test_connection_drop_is_retried_on_the_same_deployment(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("drop", times=2)
    with GatewayServer(config(ups, [model("m", [dep(0)], retries=2)])) as gw:
        r = chat(gw, model="m")
    assert r.status_code == 200 and r.headers["x-inferplex-attempts"] == "3"
    assert ups[0].hits == 3


def test_429_retry_after_is_honoured_before_retrying(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("status:429:1", times=1)
    with GatewayServer(config(ups, [model("m", [dep(0)], retries=1)])) as gw:
        started = time.monotonic()
        r = chat(gw, model="m")
        waited = time.monotonic() - started
    assert r.status_code == 200 and r.headers["x-inferplex-attempts"] == "2"
    assert waited >= 1.0  # the upstream asked for a second; asking sooner would only be refused again


def test_a_retry_after_longer_than_allowed_is_passed_to_the_caller_at_once(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("status:429:30")
    with GatewayServer(config(ups, [model("m", [dep(0)], retries=3, max_retry_wait=2)])) as gw:
        r = chat(gw, model="m")
    assert r.status_code == 429 and r.headers["retry-after"] == "30"
    assert ups[0].hits == 1


def test_a_request_error_is_never_retried_or_failed_over(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("status:400")
    cfg = config(ups, [model("m", [dep(0, priority=0), dep(1, priority=1)], strategy="priority")])
    with GatewayServer(cfg) as gw:
        r = chat(gw, model="m")
    assert r.status_code == 400 and r.json()["error"]["message"] == "fake upstream failure 400"
    assert (ups[0].hits, ups[1].hits) == (1, 0)


def test_fallback_models_configured_and_per_request(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("status:500")
    models = [
        model("primary", [dep(0)], retries=0, fallbacks=["backup"]),
        model("backup", [dep(1)]),
        model("other", [dep(2)]),
    ]
    with GatewayServer(config(ups, models)) as gw:
        r = chat(gw, model="primary")
        assert r.status_code == 200 and r.json()["model"] == "backup"
        assert r.headers["x-inferplex-deployment"] == "p1/up-1" and r.headers["x-inferplex-attempts"] == "2"
        # OpenRouter's `models` replaces the configured list for this request
        r = chat(gw, model="primary", models=["other"])
        assert r.status_code == 200 and r.json()["model"] == "other"
        r = chat(gw, model="primary", models=["missing"])
        assert r.status_code == 404 and r.json()["error"]["param"] == "models"
    assert ups[1].bodies[-1]["model"] == "up-1"  # gateway-only fields were not forwarded (the fake checks)


def test_everything_failing_returns_the_last_upstream_error(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("status:502")
    ups[1].flip("status:503")
    cfg = config(ups, [model("m", [dep(0), dep(1)], retries=3)])
    with GatewayServer(cfg) as gw:
        r = chat(gw, model="m")
    assert r.status_code == 502 and r.json()["error"]["message"].startswith("fake upstream failure")
    assert ups[0].hits + ups[1].hits == 4  # retries + 1 attempts in all


# ---- streams ------------------------------------------------------------------------------------------------


def test_stream_that_dies_before_its_first_byte_is_failed_over_invisibly(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("drop")
    cfg = config(ups, [model("m", [dep(0, priority=0), dep(1, priority=1)], strategy="priority")])
    with GatewayServer(cfg) as gw:
        resp, frames = stream_frames(gw, model="m")
    assert resp.status_code == 200 and resp.headers["x-inferplex-deployment"] == "p1/up-1"
    assert frames[-1] == "[DONE]" and not any('"error"' in f for f in frames)
    assert content_of(frames[:-1]) == "echo: hello there"


def test_stream_that_dies_after_its_first_byte_reports_in_stream_and_ends_with_done(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("die-after-first")
    cfg = config(ups, [model("m", [dep(0, priority=0), dep(1, priority=1)], strategy="priority")])
    with GatewayServer(cfg) as gw:
        resp, frames = stream_frames(gw, model="m")
    assert resp.status_code == 200
    assert frames[-1] == "[DONE]" and set(json.loads(frames[-2])) == {"error"}
    assert content_of(frames[:-2]) == "partial"
    assert ups[1].hits == 0  # the caller already had bytes: no silent switch mid-answer


def test_time_to_first_token_timeout_fails_over(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("delay:5")
    deps = [dep(0, priority=0, timeouts={"first_token": 0.3}), dep(1, priority=1)]
    with GatewayServer(config(ups, [model("m", deps, strategy="priority")])) as gw:
        started = time.monotonic()
        resp, frames = stream_frames(gw, model="m")
        elapsed = time.monotonic() - started
    assert resp.status_code == 200 and resp.headers["x-inferplex-deployment"] == "p1/up-1"
    assert content_of(frames[:-1]) == "echo: hello there"
    assert elapsed < 4  # did not wait for the slow first token


def test_a_slow_buffered_answer_hits_the_deployment_total_timeout_and_fails_over(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("delay:5")
    deps = [dep(0, priority=0, timeouts={"total": 0.3}, rpm=100), dep(1, priority=1)]
    with GatewayServer(config(ups, [model("m", deps, strategy="priority")])) as gw:
        r = chat(gw, model="m")
        assert r.status_code == 200 and r.headers["x-inferplex-deployment"] == "p1/up-1"
        assert r.headers["x-inferplex-attempts"] == "2"
        rows = httpx.get(gw.base_url + "/endpoints?provider=p0", headers=gw.auth).json()["data"]
        assert rows[0]["limits"]["rpm"] == 100


def test_a_stalled_stream_is_cut_with_an_error_and_the_upstream_released(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("stall")
    before = len(ups[0].state.disconnects)
    with GatewayServer(config(ups, [model("m", [dep(0, timeouts={"stall": 0.3})])])) as gw:
        resp, frames = stream_frames(gw, model="m")
    assert resp.status_code == 200 and frames[-1] == "[DONE]"
    error = json.loads(frames[-2])["error"]
    assert error["code"] == "upstream_timeout" and "stalled" in error["message"]
    deadline = time.monotonic() + 2
    while len(ups[0].state.disconnects) == before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(ups[0].state.disconnects) > before


def test_the_request_deadline_bounds_all_attempts(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("hang")
    ups[1].flip("hang")
    cfg = config(ups, [model("m", [dep(0), dep(1)], max_deadline=1.5)], read=30)
    with GatewayServer(cfg) as gw:
        started = time.monotonic()
        r = chat(gw, model="m", timeout=60)  # asks for 60 s, the model caps it at 1.5 s
        elapsed = time.monotonic() - started
        assert r.status_code == 504 and r.json()["error"]["code"] == "upstream_timeout"
        assert elapsed < 5
        started = time.monotonic()
        r = chat(gw, model="m", timeout=0.5)
        assert r.status_code == 504 and time.monotonic() - started < 3


# ---- cooldown -----------------------------------------------------------------------------------------------


def test_cooldown_takes_a_failing_deployment_out_and_probes_it_back(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("status:503")
    cooldown = {"failures": 2, "window": 30, "period": 1}
    cfg = config(ups, [model("m", [dep(0, priority=0), dep(1, priority=1)], strategy="priority", cooldown=cooldown)])
    with GatewayServer(cfg) as gw:
        for _ in range(2):
            assert chat(gw, model="m").headers["x-inferplex-attempts"] == "2"
        assert ups[0].hits == 2
        r = chat(gw, model="m")  # p0 is cooling down: straight to p1
        assert r.headers["x-inferplex-deployment"] == "p1/up-1" and "x-inferplex-attempts" not in r.headers
        assert ups[0].hits == 2
        ups[0].flip("ok")
        time.sleep(1.1)
        r = chat(gw, model="m")  # half-open: one probe, which succeeds and closes the breaker
        assert r.headers["x-inferplex-deployment"] == "p0/up-0"
        assert chat(gw, model="m").headers["x-inferplex-deployment"] == "p0/up-0"


def test_a_model_that_refuses_when_every_breaker_is_open_answers_503_with_retry_after(ups: list[FlipOpenAI]) -> None:
    """`when_all_open: refuse` (InferExchange's "no serving capacity answers 503"): no probe, a 503 naming the
    wait, in the dialect of the route (OpenAI's object; InferExchange's own shape under /api/v1)."""
    ups[0].flip("status:500")
    cooldown = {"failures": 2, "window": 30, "period": 30, "when_all_open": "refuse"}
    with GatewayServer(config(ups, [model("m", [dep(0)], cooldown=cooldown, retries=0)])) as gw:
        for _ in range(2):
            assert chat(gw, model="m").status_code == 502
        r = chat(gw, model="m")
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "model_unavailable" and "cooling down" in r.json()["error"]["message"]
        assert 1 <= int(r.headers["retry-after"]) <= 30
        ix = httpx.post(gw.url + "/api/v1/chat/completions", headers=gw.auth, json={"model": "m", "messages": MSG})
        assert ix.status_code == 503 and ix.json()["error"]["code"] == "MODEL_UNAVAILABLE"
        assert ups[0].hits == 2  # never probed while refusing


def test_inferexchange_refuses_with_every_breaker_open_whatever_the_model_says(ups: list[FlipOpenAI]) -> None:
    """Under /api/v1 a model with no serving capacity is a 503 at once (InferExchange publishes it), while
    the same model on /v1 keeps its configured `probe`: one more attempt at the deployment that reopens first."""
    ups[0].flip("status:500")
    cooldown = {"failures": 2, "window": 30, "period": 30}  # when_all_open: probe, the default
    with GatewayServer(config(ups, [model("m", [dep(0)], cooldown=cooldown, retries=0)])) as gw:
        for _ in range(2):
            assert chat(gw, model="m").status_code == 502
        ix = httpx.post(gw.url + "/api/v1/chat/completions", headers=gw.auth, json={"model": "m", "messages": MSG})
        assert ix.status_code == 503 and ix.json()["error"]["code"] == "MODEL_UNAVAILABLE", ix.text
        assert int(ix.headers["retry-after"]) >= 1 and ups[0].hits == 2
        assert chat(gw, model="m").status_code == 502 and ups[0].hits == 3  # /v1 probed once more


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    import redis

    prefix = f"test:inferplex:gw:{secrets.token_hex(6)}:"
    yield prefix
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    for key in client.scan_iter(match=prefix + "*"):
        client.delete(key)
    client.close()


def test_two_gateways_sharing_redis_agree_on_a_cooldown(ups: list[FlipOpenAI], redis_prefix: str) -> None:
    """The second gateway has been using the deployment (and so remembers its breaker as closed) when the
    first opens it: the opening reaches it before its next request."""
    cooldown = {"failures": 2, "window": 30, "period": 30}
    models = [model("m", [dep(0, priority=0), dep(1, priority=1)], strategy="priority", cooldown=cooldown)]
    store = {"redis_url": "redis://127.0.0.1:6379/0", "redis_prefix": redis_prefix}
    with (
        GatewayServer(config(ups, models, routing=store)) as one,
        GatewayServer(config(ups, models, routing=store)) as two,
    ):
        for _ in range(3):
            assert chat(two, model="m").headers["x-inferplex-deployment"] == "p0/up-0"
        ups[0].flip("status:500")
        for _ in range(2):
            assert chat(one, model="m").status_code == 200
        assert ups[0].hits == 5
        for _ in range(3):
            r = chat(two, model="m")
            assert r.status_code == 200 and r.headers["x-inferplex-deployment"] == "p1/up-1"
        assert ups[0].hits == 5  # the second gateway never sent a request to the deployment the first saw fail


# ---- request-level steering ---------------------------------------------------------------------------------


def test_endpoint_id_region_and_provider_preferences(ups: list[FlipOpenAI]) -> None:
    deps = [
        dep(0, region="eu", pricing={"input": "5", "output": "5"}),
        dep(1, region="us", pricing={"input": "1", "output": "1"}),
        dep(2, id="ep-acme", dedicated=True),
    ]
    with GatewayServer(config(ups, [model("m", deps, strategy="weighted")])) as gw:
        # a dedicated deployment is reached only by its id
        for _ in range(5):
            assert chat(gw, model="m").headers["x-inferplex-deployment"] != "ep-acme"
        r = chat(gw, model="m", endpoint_id="ep-acme")
        assert r.status_code == 200 and r.headers["x-inferplex-deployment"] == "ep-acme"
        assert ups[2].bodies[-1]["model"] == "up-2"
        r = chat(gw, model="m", endpoint_id="ep-nope")
        assert r.status_code == 404 and r.json()["error"]["param"] == "endpoint_id"
        # region
        assert chat(gw, model="m", region="eu").headers["x-inferplex-deployment"] == "p0/up-0@eu"
        r = chat(gw, model="m", region="ap")
        assert r.status_code == 400 and r.json()["error"]["param"] == "region" and "ap" in r.json()["error"]["message"]
        # OpenRouter's provider preferences
        assert chat(gw, model="m", provider={"sort": "price"}).headers["x-inferplex-provider"] == "p1"
        assert chat(gw, model="m", provider={"order": ["p0", "p1"]}).headers["x-inferplex-provider"] == "p0"
        assert chat(gw, model="m", provider={"ignore": ["p0"]}).headers["x-inferplex-provider"] == "p1"
        r = chat(gw, model="m", provider={"only": ["p9"]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "provider"
        r = chat(gw, model="m", provider={"sort": "fastest"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "provider.sort"
        # OneInfer's provider string still narrows as before
        assert chat(gw, model="m", provider="p1").headers["x-inferplex-provider"] == "p1"


def test_order_without_fallbacks_fails_instead_of_using_another_provider(ups: list[FlipOpenAI]) -> None:
    ups[0].flip("status:503")
    with GatewayServer(config(ups, [model("m", [dep(0), dep(1)], retries=1)])) as gw:
        r = chat(gw, model="m", provider={"order": ["p0"], "allow_fallbacks": False})
        assert r.status_code == 502 and ups[1].hits == 0
        r = chat(gw, model="m", provider={"order": ["p0"]})
        assert r.status_code == 200 and r.headers["x-inferplex-provider"] == "p1"


def test_service_tier_flex_is_reported_in_body_header_and_chunks(ups: list[FlipOpenAI]) -> None:
    with GatewayServer(config(ups, [model("m", [dep(0)])])) as gw:
        r = chat(gw, model="m", service_tier="flex")
        assert r.status_code == 200 and r.json()["service_tier"] == "flex"
        assert r.headers["x-inferplex-service-tier"] == "flex"
        assert ups[0].bodies[-1]["service_tier"] == "flex"  # an OpenAI upstream runs it on its own flex tier
        r = chat(gw, model="m")
        assert r.json()["service_tier"] == "default" and r.headers["x-inferplex-service-tier"] == "default"
        _, frames = stream_frames(gw, model="m", service_tier="flex")
        assert all(json.loads(f)["service_tier"] == "flex" for f in frames[:-1])
        r = chat(gw, model="m", service_tier="priority")
        assert r.status_code == 400 and r.json()["error"]["param"] == "service_tier"
        assert ups[0].hits == 3


def test_weighted_split_through_the_gateway(ups: list[FlipOpenAI]) -> None:
    cfg = config(ups, [model("m", [dep(0, weight=3), dep(1, weight=1)], strategy="weighted")])
    with GatewayServer(cfg) as gw, httpx.Client(timeout=10) as client:
        for _ in range(60):
            r = client.post(gw.base_url + "/chat/completions", headers=gw.auth, json={"model": "m", "messages": MSG})
            assert r.status_code == 200
    assert ups[0].hits + ups[1].hits == 60
    assert ups[0].hits > ups[1].hits > 0
