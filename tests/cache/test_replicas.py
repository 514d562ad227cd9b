"""Two gateway replicas sharing Redis share the response cache: an answer stored through one is a hit on the
other, buffered or streamed, and a purge through one is seen by both.

Each replica is a gateway app with its own event loop, lifespan and cache client (tests.gateway_server), as
two processes would be; they share one PostgreSQL database (so one key and one account are valid on both)
and a Redis prefix of the module's own, deleted at the end. The same fake upstream answers both, and counts
what reached it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import redis

from tests.accounts.conftest import REDIS_URL, Admin, pg_url  # noqa: F401  (pg_url: a fixture)
from tests.cache.conftest import cache_config, unique, upstream_calls
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.replicas import forget_redis_prefix

PREFIX = f"inferplex_test:cache-replicas:{secrets.token_hex(6)}:"


@pytest.fixture(scope="module")
def replicas(
    fake_openai: FakeOpenAI,
    pg_url: str,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[GatewayServer]]:
    config = cache_config(
        fake_openai, tmp_path_factory.mktemp("cache-replicas"), backend="redis", redis_url=REDIS_URL,
        redis_prefix=PREFIX,
    )  # fmt: skip
    config["storage"] = {"database_url": pg_url}
    a = GatewayServer(config).start()  # one after the other: the first runs the migrations
    b = GatewayServer(config).start()
    try:
        yield [a, b]
    finally:
        a.stop()
        b.stop()
        forget_redis_prefix(PREFIX)


@pytest.fixture(scope="module")
def key(replicas: list[GatewayServer]) -> str:
    admin = Admin(replicas[0].url, replicas[0].master_key)
    created = admin.create_key(scopes=["chat"], credits_micros=10**7)
    admin.close()
    return str(created["key"])


def _sdk(server: GatewayServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)


def _stored(entry: str) -> None:
    """Until the entry is in Redis: a replica may store after its answer was sent (a stream's once it ends)."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        deadline = time.monotonic() + 5
        while not client.exists(f"{PREFIX}e:{entry}"):
            assert time.monotonic() < deadline, f"entry {entry} was never stored in Redis"
            time.sleep(0.01)
    finally:
        client.close()


def test_an_answer_stored_by_one_replica_is_a_hit_on_the_other(
    replicas: list[GatewayServer], key: str, fake_openai: FakeOpenAI
) -> None:
    a, b = (_sdk(r, key) for r in replicas)
    text = unique()
    messages = [{"role": "user", "content": text}]
    first = a.chat.completions.with_raw_response.create(model="priced", messages=messages)  # type: ignore[arg-type]
    assert first.headers["x-inferplex-cache"] == "miss"
    _stored(first.headers["x-inferplex-cache-entry"])
    second = b.chat.completions.with_raw_response.create(model="priced", messages=messages)  # type: ignore[arg-type]
    assert second.headers["x-inferplex-cache"] == "hit"
    assert second.headers["x-inferplex-cache-entry"] == first.headers["x-inferplex-cache-entry"]
    assert upstream_calls(fake_openai, text) == 1
    assert second.parse().choices[0].message.content == first.parse().choices[0].message.content == f"echo: {text}"


def test_a_stream_stored_by_one_replica_replays_on_the_other(
    replicas: list[GatewayServer], key: str, fake_openai: FakeOpenAI
) -> None:
    a, b = (_sdk(r, key) for r in replicas)
    text = unique("stream this")
    messages = [{"role": "user", "content": text}]
    streams = []
    for i, sdk in enumerate((a, b)):
        raw = sdk.chat.completions.with_raw_response.create(
            model="priced",
            messages=messages,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(raw.parse())
        streams.append((raw.headers, chunks))
        if i == 0:
            _stored(raw.headers["x-inferplex-cache-entry"])
    (headers_a, chunks_a), (headers_b, chunks_b) = streams
    assert (headers_a["x-inferplex-cache"], headers_b["x-inferplex-cache"]) == ("miss", "hit")
    assert upstream_calls(fake_openai, text) == 1
    assert len(chunks_b) == len(chunks_a)
    for replayed, original in zip(chunks_b, chunks_a, strict=True):
        assert _as_produced(replayed.model_dump()) == _as_produced(original.model_dump())
    assert "".join(c.choices[0].delta.content or "" for c in chunks_b if c.choices) == f"echo: {text}"
    assert [c.choices[0].finish_reason for c in chunks_b if c.choices][-1] == "stop"
    assert chunks_b[-1].usage is not None


def _as_produced(chunk: dict[str, Any]) -> dict[str, Any]:
    """A chunk as the model produced it, without what the gateway adds to the last one about this request:
    its `timings`, and its `cost` (a hit is free here)."""
    return {k: v for k, v in chunk.items() if k not in ("timings", "cost")}


def test_a_purge_through_one_replica_is_seen_by_the_other(
    replicas: list[GatewayServer], key: str, fake_openai: FakeOpenAI
) -> None:
    a = _sdk(replicas[0], key)
    text = unique()
    messages = [{"role": "user", "content": text}]
    entry = a.chat.completions.with_raw_response.create(model="priced", messages=messages).headers[  # type: ignore[arg-type]
        "x-inferplex-cache-entry"
    ]
    _stored(entry)
    purged = httpx.post(
        replicas[1].url + "/admin/cache/purge", json={"entry": entry}, headers=replicas[1].auth, timeout=30
    )
    assert purged.status_code == 200, purged.text
    again = a.chat.completions.with_raw_response.create(model="priced", messages=messages)  # type: ignore[arg-type]
    assert again.headers["x-inferplex-cache"] == "miss"
    assert upstream_calls(fake_openai, text) == 2
