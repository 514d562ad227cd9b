"""Two gateway apps sharing one Redis topology (and one PostgreSQL database for keys and credits), and what a
caller does to them with the openai SDK: bursts that a rate limit cuts, concurrent calls a concurrency limit
queues, and a deployment whose breaker one app opens and the other then skips."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import openai

from tests.accounts.conftest import Admin, billing_config
from tests.fakes.flip_upstream import FlipOpenAI
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

MASTER = "ipx-redis-topologies-master"
MSG = [{"role": "user", "content": "a b c"}]


def new_prefix() -> str:
    return f"inferplex_test:{secrets.token_hex(4)}:"


@contextmanager
def keyed_gateways(fake: FakeOpenAI, tmp: Path, pg_url: str, redis_url: str) -> Iterator[list[GatewayServer]]:
    """Two apps whose limits and breakers live in `redis_url`, under a prefix of this test's own."""
    prefix = new_prefix()
    config = billing_config(
        fake,
        tmp,
        pg_url,
        storage={"redis_url": redis_url, "redis_prefix": prefix + "limits:", "redis_failure": "closed"},
    )
    config["routing"] = {"redis_url": redis_url, "redis_prefix": prefix + "routing:"}
    with ExitStack() as stack:
        yield [stack.enter_context(GatewayServer(config, MASTER)) for _ in range(2)]


def create_key(gw: GatewayServer, **limits: Any) -> str:
    admin = Admin(gw.url, MASTER)
    try:
        key: str = admin.create_key(credits_micros=10**6, **limits)["key"]
        return key
    finally:
        admin.close()


def burst(gws: list[GatewayServer], key: str, n: int, model: str = "priced") -> list[int]:
    """`n` chat calls at once, alternating between the apps: each call's HTTP status as the SDK saw it."""

    async def one(gw: GatewayServer) -> int:
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=key, max_retries=0, timeout=30) as client:
            try:
                await client.chat.completions.create(model=model, messages=MSG, max_tokens=2)  # type: ignore[arg-type]
            except openai.APIStatusError as refused:
                return refused.status_code
            return 200

    async def run() -> list[int]:
        return list(await asyncio.gather(*(one(gws[i % len(gws)]) for i in range(n))))

    return asyncio.run(run())


def breaker_config(ups: list[FlipOpenAI], redis_url: str) -> dict[str, Any]:
    """Model `m` on p0 (preferred) then p1, a breaker that opens after 2 failures, shared through `redis_url`."""
    providers = [
        {"name": f"p{i}", "base_url": f.base_url, "api_key": "env:FAKE_UPSTREAM_KEY", "timeouts": {"connect": 2}}
        for i, f in enumerate(ups)
    ]
    deployments = [
        {"provider": "p0", "model": "up-0", "priority": 0},
        {"provider": "p1", "model": "up-1", "priority": 1},
    ]
    routing = {"strategy": "priority", "backoff": 0.01, "cooldown": {"failures": 2, "window": 30, "period": 30}}
    model = {"name": "m", "deployments": deployments, "routing": routing, "pricing": {"input": "1", "output": "2"}}
    return {
        "providers": providers,
        "models": [model],
        "routing": {"redis_url": redis_url, "redis_prefix": new_prefix() + "routing:"},
    }


def deployment_used(gw: GatewayServer) -> str:
    client = openai.OpenAI(base_url=gw.base_url, api_key=gw.master_key, max_retries=0, timeout=30)
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)  # type: ignore[arg-type]
    client.close()
    return raw.headers["x-inferplex-deployment"]


def breaker_is_shared(ups: list[FlipOpenAI], redis_url: str) -> None:
    """App two has used p0 (and remembers its breaker closed) when app one's failures open it: two then goes
    to p1 without sending p0 another request."""
    for up in ups:
        up.reset()
    config = breaker_config(ups, redis_url)
    with GatewayServer(config) as one, GatewayServer(config) as two:
        assert [deployment_used(two) for _ in range(3)] == ["p0/up-0"] * 3
        ups[0].flip("status:500")
        assert [deployment_used(one) for _ in range(2)] == ["p1/up-1"] * 2  # failed over, and the breaker opened
        hits = ups[0].hits
        assert [deployment_used(two) for _ in range(3)] == ["p1/up-1"] * 3
        assert ups[0].hits == hits
