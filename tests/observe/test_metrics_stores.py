"""`/metrics` for what a request waits on: the limits' fair queue, and the stores in Redis (limits, breakers).

The breakers here live in Redis, so their state in `/metrics` is read there (without taking a probe).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import redis

from tests.accounts.conftest import REDIS_URL
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.observe.test_metrics import HI, make_key, metrics_config, scrape, total, value


def wait_for(server: GatewayServer, check: Any, what: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Scrape until `check(samples)` holds (a state the gateway reaches on its own, not a duration)."""
    deadline = time.monotonic() + 20
    while True:
        samples = scrape(server.url + "/metrics", server.auth)
        if check(samples):
            return samples
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.02)


def test_a_request_queued_for_a_concurrency_slot_is_seen_waiting_then_counted(fake_openai: FakeOpenAI) -> None:
    with GatewayServer(metrics_config(fake_openai)) as server:
        caller = make_key(server, credits_micros=10**9, scopes=["chat"], max_concurrent=1)
        client = openai.OpenAI(api_key=caller["key"], base_url=server.base_url, max_retries=0)
        stream = client.chat.completions.create(model="slow-stream", messages=HI, stream=True)  # type: ignore[arg-type]
        next(iter(stream))  # it holds the key's one slot now
        answers: list[Any] = []
        second = threading.Thread(
            target=lambda: answers.append(client.chat.completions.create(model="echo-model", messages=HI))  # type: ignore[arg-type]
        )
        second.start()
        during = wait_for(server, lambda m: value(m, "inferplex_queue_depth") == 1, "the second request queued")
        assert value(during, "inferplex_active_streams") == 1
        assert value(during, "inferplex_active_requests") == 3  # the stream, the queued one, this scrape
        stream.close()  # the caller leaves: the slot comes back and the queued request takes it
        second.join(20)
        assert answers and answers[0].choices[0].message.content
        after = wait_for(server, lambda m: value(m, "inferplex_active_streams") == 0, "the stream end")
        assert value(after, "inferplex_queue_depth") == 0
        assert value(after, "inferplex_queue_wait_seconds_count", outcome="acquired") == 1
        assert value(after, "inferplex_queue_wait_seconds_count", outcome="timed_out") == 0
        chat = {"route": "/v1/chat/completions"}
        assert value(after, "inferplex_requests_total", **chat, status="499", error_type="caller.disconnected") == 1
        assert value(after, "inferplex_requests_total", **chat, status="200") == 1
        assert total(after, "inferplex_upstream_attempts_total", deployment="fake/slow-stream") == 1


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    prefix = f"inferplex_test:{secrets.token_hex(6)}:"
    yield prefix
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(prefix + "*"))
    if keys:
        client.delete(*keys)
    client.close()


def test_redis_stores_and_shared_breakers(fake_openai: FakeOpenAI, redis_prefix: str) -> None:
    config = metrics_config(fake_openai)
    config["storage"] = {"redis_url": REDIS_URL, "redis_prefix": redis_prefix}
    config["routing"] = {"redis_prefix": redis_prefix + "routing:"}
    with GatewayServer(config) as server:
        caller = make_key(server, credits_micros=10**9, scopes=["chat"], rpm=1000)
        client = openai.OpenAI(api_key=caller["key"], base_url=server.base_url, max_retries=0)
        client.chat.completions.create(model="echo-model", messages=HI)  # type: ignore[arg-type]
        client.chat.completions.create(model="failover", messages=HI)  # type: ignore[arg-type]
        m = scrape(server.url + "/metrics", server.auth)
        assert value(m, "inferplex_breaker_opens_total", deployment="fo-bad") == 1
        assert value(m, "inferplex_breaker_state", deployment="fo-bad") == 1  # read from Redis
        assert value(m, "inferplex_breaker_state", deployment="fo-good") == 0
        assert value(m, "inferplex_store_duration_seconds_count", store="limits") > 0
        assert value(m, "inferplex_store_duration_seconds_count", store="breakers") > 0
        assert total(m, "inferplex_store_errors_total") == 0
        # looking took no probe: the breaker reads the same again
        again = scrape(server.url + "/metrics", server.auth)
        assert value(again, "inferplex_breaker_state", deployment="fo-bad") == 1
