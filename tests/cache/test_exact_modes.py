"""The cache's modes and settings through HTTP, each on a gateway of its own: default_off, the key scope,
the SQLite backend, the replay's pace, and a backend that is down (a miss, never an error)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.accounts.conftest import Admin
from tests.cache.conftest import cache_config, chat, sse_frames, unique, upstream_calls
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


@pytest.fixture
def gateway(fake_openai: FakeOpenAI, tmp_path: Path) -> Iterator[Any]:
    """`gateway(**cache)`: a gateway with these cache settings, stopped after the test."""
    started: list[GatewayServer] = []

    def start(**cache: Any) -> GatewayServer:
        server = GatewayServer(cache_config(fake_openai, tmp_path / str(len(started)), **cache)).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_default_off_looks_up_only_requests_that_ask(gateway: Any, fake_openai: FakeOpenAI) -> None:
    server = gateway(mode="default_off")
    text = unique()
    plain = [chat(server, text) for _ in range(2)]
    assert [r.headers["x-inferplex-cache"] for r in plain] == ["bypass", "bypass"]
    asked = [chat(server, text, headers={"x-inferplex-cache": "use"}), chat(server, text, cache={"use-cache": True})]
    assert [r.headers["x-inferplex-cache"] for r in asked] == ["miss", "hit"]
    assert chat(server, text).headers["x-inferplex-cache"] == "bypass"  # still not read without asking
    assert upstream_calls(fake_openai, text) == 4


def test_the_key_scope_keeps_two_keys_of_one_account_apart(gateway: Any, fake_openai: FakeOpenAI) -> None:
    server = gateway(scope="key")
    admin = Admin(server.url, server.master_key)
    try:
        one = admin.create_key(credits_micros=100_000)
        sibling = admin.create_key(account_id=one["account_id"])
    finally:
        admin.close()
    text = unique()
    assert chat(server, text, one["key"]).headers["x-inferplex-cache"] == "miss"
    assert chat(server, text, sibling["key"]).headers["x-inferplex-cache"] == "miss"
    assert chat(server, text, one["key"]).headers["x-inferplex-cache"] == "hit"
    assert upstream_calls(fake_openai, text) == 2


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_hit_on_each_embedded_backend(gateway: Any, fake_openai: FakeOpenAI, backend: str) -> None:
    server = gateway(backend=backend)
    text = unique()
    assert [chat(server, text).headers["x-inferplex-cache"] for _ in range(2)] == ["miss", "hit"]
    _, miss = sse_frames(server, text)
    r, hit = sse_frames(server, text)
    assert r.headers["x-inferplex-cache"] == "hit" and len(miss) == len(hit)
    assert upstream_calls(fake_openai, text) == 2


def test_the_sqlite_backend_is_the_embedded_default(gateway: Any, fake_openai: FakeOpenAI) -> None:
    server = gateway(backend="auto")
    assert (Path(server.config.server.data_dir) / "cache.sqlite3").exists()
    text = unique()
    assert [chat(server, text).headers["x-inferplex-cache"] for _ in range(2)] == ["miss", "hit"]


def test_a_replay_at_a_fixed_pace(gateway: Any) -> None:
    server = gateway(replay={"pace": "fixed", "interval_ms": 40})
    text = unique("one two three four five")
    _, miss = sse_frames(server, text)
    started = time.perf_counter()
    r, hit = sse_frames(server, text)
    elapsed = time.perf_counter() - started
    assert r.headers["x-inferplex-cache"] == "hit" and len(hit) == len(miss)
    chunks = len(hit) - 1  # without [DONE]; the first is sent at once, each of the others after 40 ms
    assert elapsed >= (chunks - 1) * 0.04 * 0.9


def test_a_replay_at_the_original_pace(gateway: Any) -> None:
    server = gateway(replay={"pace": "original"})
    text = unique()
    _, miss = sse_frames(server, text)
    started = time.perf_counter()
    r, hit = sse_frames(server, text)
    assert r.headers["x-inferplex-cache"] == "hit" and len(hit) == len(miss)
    assert time.perf_counter() - started < 1  # the upstream's own pace (the fake streams at once): no delay


def test_a_backend_that_is_down_is_a_miss_not_an_error(gateway: Any, fake_openai: FakeOpenAI) -> None:
    server = gateway(backend="redis", redis_url="redis://127.0.0.1:1/0")  # nothing listens on port 1
    text = unique()
    buffered = [chat(server, text) for _ in range(2)]
    assert [(r.status_code, r.headers["x-inferplex-cache"]) for r in buffered] == [(200, "miss"), (200, "miss")]
    r, frames = sse_frames(server, text)
    assert r.status_code == 200 and r.headers["x-inferplex-cache"] == "miss" and frames[-1] == "[DONE]"
    assert upstream_calls(fake_openai, text) == 3
