"""Identical buffered requests that miss together make one upstream call: the first goes upstream, the others
wait for its answer (within `cache.coalesce_wait_s`) and are hits; when the first fails, each goes on its own,
and none waits past the bound."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.cache.conftest import cache_config, unique, upstream_calls
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

MODELS: list[dict[str, Any]] = [
    {"name": "slow-answer", "deployments": [{"provider": "fake", "model": "sleep-400"}]},
    {  # the upstream never answers; each attempt gives up after 0.5 s
        "name": "failing",
        "deployments": [{"provider": "fake", "model": "hang", "timeouts": {"total": 0.5}}],
        "routing": {"retries": 0},
    },
]


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with GatewayServer(cache_config(fake_openai, tmp_path_factory.mktemp("coalesce"), MODELS)) as gw:
        yield gw


async def _together(server: GatewayServer, body: dict[str, Any], n: int, **headers: str) -> list[httpx.Response]:
    auth = {"Authorization": f"Bearer {server.master_key}", **headers}
    async with httpx.AsyncClient(base_url=server.base_url, headers=auth, timeout=30) as client:
        return list(await asyncio.gather(*(client.post("/chat/completions", json=body) for _ in range(n))))


def test_identical_misses_at_once_make_one_upstream_call(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique("together")
    body = {"model": "slow-answer", "messages": [{"role": "user", "content": text}]}
    answers = asyncio.run(_together(server, body, 5))
    assert [r.status_code for r in answers] == [200] * 5
    assert sorted(r.headers["x-inferplex-cache"] for r in answers) == ["hit"] * 4 + ["miss"]
    assert {r.json()["choices"][0]["message"]["content"] for r in answers} == {f"echo: {text}"}
    assert upstream_calls(fake_openai, text) == 1


def test_no_cache_requests_do_not_wait_and_go_upstream_each(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique("fresh each")
    body = {"model": "slow-answer", "messages": [{"role": "user", "content": text}]}
    answers = asyncio.run(_together(server, body, 3, **{"Cache-Control": "no-cache"}))
    assert [r.headers["x-inferplex-cache"] for r in answers] == ["bypass"] * 3
    assert upstream_calls(fake_openai, text) == 3


def test_when_the_first_fails_the_others_go_upstream_themselves(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique("failing together")
    body = {"model": "failing", "messages": [{"role": "user", "content": text}]}
    started = time.monotonic()
    answers = asyncio.run(_together(server, body, 4))
    took = time.monotonic() - started
    assert [r.status_code for r in answers] == [504] * 4  # the timeout, in OpenAI's error shape
    assert all(r.json()["error"]["message"] for r in answers)
    assert upstream_calls(fake_openai, text) == 4  # nothing was stored: each tried in turn
    # the others waited for the first (0.5 s), then each tried itself (0.5 s): released with the failure, not
    # after the 30 s bound, and not all at once either
    assert 0.9 < took < 10, took
