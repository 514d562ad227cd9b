"""The Router driven directly with in-process fake adapters: 1,000-request splits per strategy, tiers,
cooldowns shared through Redis. HTTP wiring is proven in test_routing_http.py; here only decisions count."""

from __future__ import annotations

import asyncio
import random
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from inferplex.catalog import Catalog
from inferplex.config import CooldownConfig, parse_config
from inferplex.context import Context
from inferplex.errors import UpstreamError
from inferplex.routing.cooldown import Gate, RedisCooldowns
from inferplex.routing.options import RouteOptions
from inferplex.routing.router import Router
from inferplex.targets import Target

N = 1000


def catalog(deployments: list[dict[str, Any]], **routing: Any) -> Catalog:
    providers = sorted({d["provider"] for d in deployments})
    config = parse_config(
        {
            "providers": [{"name": p, "base_url": f"http://{p}.invalid/v1"} for p in providers],
            "models": [{"name": "m", "routing": routing, "deployments": deployments}],
        }
    )
    return Catalog(config)


def ctx(**route: Any) -> Context:
    c = Context()
    c.route = RouteOptions(**route)
    return c


async def served_by(router: Router, cat: Catalog, n: int, call: Any, **route: Any) -> Counter[str]:
    resolved = cat.resolve("m")
    seen: Counter[str] = Counter()
    for _ in range(n):
        c = ctx(**route)
        await router.run(c, resolved, call)
        seen[c.extra_headers["x-inferplex-deployment"]] += 1
    return seen


async def ok(target: Target) -> dict[str, Any]:
    return {"choices": [], "usage": {"total_tokens": 1}}


async def test_weighted_split_follows_weights() -> None:
    cat = catalog(
        [
            {"provider": "a", "model": "x", "weight": 1},
            {"provider": "b", "model": "x", "weight": 3},
            {"provider": "c", "model": "x", "weight": 0},
        ],
        strategy="weighted",
    )
    seen = await served_by(Router(cat, rng=random.Random(7)), cat, N, ok)
    assert seen["c/x"] == 0
    assert abs(seen["a/x"] / N - 0.25) < 0.05 and abs(seen["b/x"] / N - 0.75) < 0.05


async def test_priority_and_lowest_cost_send_everything_to_the_best() -> None:
    deps = [
        {"provider": "a", "model": "x", "priority": 1, "pricing": {"input": "1", "output": "1"}},
        {"provider": "b", "model": "x", "priority": 0, "pricing": {"input": "2", "output": "2"}},
    ]
    cat = catalog(deps, strategy="priority")
    assert await served_by(Router(cat), cat, N, ok) == Counter({"b/x": N})
    cat = catalog(deps, strategy="lowest_cost")
    assert await served_by(Router(cat), cat, N, ok) == Counter({"a/x": N})
    # a request's provider.sort=price overrides the configured strategy
    cat = catalog(deps, strategy="priority")
    from inferplex.routing.options import ProviderPrefs

    seen = await served_by(Router(cat), cat, 50, ok, prefs=ProviderPrefs(sort="price"))
    assert seen == Counter({"a/x": 50})


async def test_lowest_latency_moves_traffic_to_the_faster_deployment() -> None:
    cat = catalog([{"provider": "fast", "model": "x"}, {"provider": "slow", "model": "x"}], strategy="lowest_latency")
    delay = {"fast": 0.0005, "slow": 0.004}

    async def call(target: Target) -> dict[str, Any]:
        await asyncio.sleep(delay[target.provider.name])
        return {"choices": []}

    router = Router(cat, rng=random.Random(11))
    seen = await served_by(router, cat, N, call)
    assert seen["fast/x"] / N > 0.9
    assert seen["slow/x"] > 0  # explored, so a recovery would be noticed
    # the slow one gets fast: exploration measures it and traffic moves over
    delay["slow"], delay["fast"] = 0.0, 0.004
    seen = await served_by(router, cat, N, call)
    assert seen["slow/x"] / N > 0.7


async def test_least_busy_balances_in_flight_requests() -> None:
    cat = catalog(
        [{"provider": "a", "model": "x"}, {"provider": "b", "model": "x"}, {"provider": "c", "model": "x"}],
        strategy="least_busy",
    )
    router = Router(cat, rng=random.Random(5))
    resolved = cat.resolve("m")
    in_flight: Counter[str] = Counter()
    worst_gap = 0
    rng = random.Random(2)

    async def call(target: Target) -> dict[str, Any]:
        nonlocal worst_gap
        # how many more were in flight on the chosen deployment than on the least busy one, at dispatch
        worst_gap = max(worst_gap, in_flight[target.provider.name] - min(in_flight[p] for p in "abc"))
        in_flight[target.provider.name] += 1
        # provider a is slower, so it holds requests longer: least-busy must send it fewer
        await asyncio.sleep(rng.uniform(0, 0.004) * (3 if target.provider.name == "a" else 1))
        in_flight[target.provider.name] -= 1
        return {"choices": []}

    seen: Counter[str] = Counter()

    async def worker() -> None:  # 10 callers, each sending its next request as soon as one returns
        for _ in range(N // 10):
            c = ctx()
            await router.run(c, resolved, call)
            seen[c.extra_headers["x-inferplex-deployment"]] += 1

    await asyncio.gather(*(worker() for _ in range(10)))
    assert sum(seen.values()) == N
    assert worst_gap == 0  # every request went to a deployment with the fewest in flight
    assert seen["a/x"] < 0.8 * seen["b/x"] and seen["a/x"] < 0.8 * seen["c/x"]


async def test_flex_yields_to_default_on_a_saturated_deployment() -> None:
    cat = catalog([{"provider": "a", "model": "x", "max_concurrent": 1}])
    router = Router(cat)
    resolved = cat.resolve("m")
    release = asyncio.Event()
    order: list[str] = []

    def call_as(name: str) -> Any:
        async def call(target: Target) -> dict[str, Any]:
            order.append(name)
            if name == "holder":
                await release.wait()
            return {"choices": []}

        return call

    holder = asyncio.create_task(router.run(ctx(), resolved, call_as("holder")))
    await asyncio.sleep(0.01)
    flex_ctx = ctx(service_tier="flex")
    flex = asyncio.create_task(router.run(flex_ctx, resolved, call_as("flex")))
    await asyncio.sleep(0.01)
    default = asyncio.create_task(router.run(ctx(), resolved, call_as("default")))
    await asyncio.sleep(0.01)
    assert order == ["holder"]  # both wait for the one slot
    release.set()
    results = await asyncio.gather(holder, flex, default)
    assert order == ["holder", "default", "flex"]  # the later default request went first
    assert results[1]["service_tier"] == "flex" and flex_ctx.service_tier == "flex"
    assert results[2]["service_tier"] == "default"


async def test_attempts_are_logged_and_a_failure_is_not_the_last_word() -> None:
    cat = catalog(
        [{"provider": "a", "model": "x", "priority": 0}, {"provider": "b", "model": "x", "priority": 1}],
        strategy="priority",
    )

    async def call(target: Target) -> dict[str, Any]:
        if target.provider.name == "a":
            raise UpstreamError("down", upstream_status=503)
        return {"choices": []}

    c = ctx()
    await Router(cat).run(c, cat.resolve("m"), call)
    assert [(a.deployment, a.outcome, a.status) for a in c.attempt_log] == [("a/x", "error", 503), ("b/x", "ok", 200)]
    assert c.attempts == 2 and c.target is not None and c.target.provider.name == "b"


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    import redis

    prefix = f"test:inferplex:routing:{secrets.token_hex(6)}:"
    yield prefix
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    for key in client.scan_iter(match=prefix + "*"):
        client.delete(key)
    client.close()


async def test_two_replicas_sharing_redis_agree_on_a_cooldown(redis_prefix: str) -> None:
    policy = CooldownConfig(failures=2, window=30, period=0.5)
    one = RedisCooldowns("redis://127.0.0.1:6379/0", redis_prefix)
    two = RedisCooldowns("redis://127.0.0.1:6379/0", redis_prefix)
    try:
        assert (await two.check("dep", policy)).gate is Gate.CLOSED
        assert not await one.failure("dep", policy)
        assert await two.failure("dep", policy)  # failures from both replicas add up
        seen = await one.check("dep", policy)
        assert seen.gate is Gate.OPEN and 0 < seen.retry_in <= 0.5
        assert (await two.check("dep", policy)).gate is Gate.OPEN
        await asyncio.sleep(0.6)
        probes = [(await r.check("dep", policy)).gate for r in (one, two, one)]
        assert probes == [Gate.PROBE, Gate.OPEN, Gate.OPEN]  # exactly one replica probes
        await one.success("dep")
        assert (await two.check("dep", policy)).gate is Gate.CLOSED
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_replica_that_lost_its_subscription_asks_redis_again(redis_prefix: str) -> None:
    """A replica remembers breakers it found closed only while it hears of openings: when Redis drops its
    subscription (a restart, say), an opening published meanwhile must not leave it using the deployment."""
    import redis.asyncio as aioredis

    policy = CooldownConfig(failures=1, window=30, period=30)
    url = "redis://127.0.0.1:6379/0"
    one, two, admin = RedisCooldowns(url, redis_prefix), RedisCooldowns(url, redis_prefix), aioredis.from_url(url)
    try:
        for _ in range(3):
            assert (await two.check("dep", policy)).gate is Gate.CLOSED
            await asyncio.sleep(0.05)  # the subscription is confirmed meanwhile
        await admin.client_kill_filter(_type="pubsub")
        assert await one.failure("dep", policy)  # opened while nobody listened
        await asyncio.sleep(0.5)  # listening again, and nothing said what happened meanwhile
        assert (await two.check("dep", policy)).gate is Gate.OPEN
    finally:
        await one.aclose()
        await two.aclose()
        await admin.aclose()


async def test_two_routers_on_one_redis_route_around_a_deployment_the_other_saw_fail(redis_prefix: str) -> None:
    cat = catalog(
        [{"provider": "a", "model": "x", "priority": 0}, {"provider": "b", "model": "x", "priority": 1}],
        strategy="priority",
        cooldown={"failures": 2, "window": 30, "period": 30},
    )
    url = "redis://127.0.0.1:6379/0"
    first, second = Router(cat, RedisCooldowns(url, redis_prefix)), Router(cat, RedisCooldowns(url, redis_prefix))
    calls: Counter[str] = Counter()

    async def call(target: Target) -> dict[str, Any]:
        calls[target.provider.name] += 1
        if target.provider.name == "a":
            raise UpstreamError("down", upstream_status=500)
        return {"choices": []}

    try:
        for _ in range(2):
            await first.run(ctx(), cat.resolve("m"), call)
        assert calls == Counter({"a": 2, "b": 2})
        c = ctx()
        await second.run(c, cat.resolve("m"), call)
        assert calls["a"] == 2 and c.attempts == 1  # the second replica never touched the cooling deployment
    finally:
        await first.aclose()
        await second.aclose()


async def test_stream_wrapper_releases_capacity_even_when_closed_before_its_first_pull() -> None:
    cat = catalog([{"provider": "a", "model": "x", "max_concurrent": 1}])
    router = Router(cat)
    closed: list[bool] = []

    async def rest() -> AsyncIterator[dict[str, Any]]:
        try:
            yield {"choices": [{"delta": {"content": "x"}}]}
        finally:
            closed.append(True)

    async def call(target: Target) -> tuple[dict[str, Any], AsyncIterator[dict[str, Any]]]:
        gen = rest()
        return await gen.__anext__(), gen

    first, watched = await router.run(ctx(stream=True), cat.resolve("m"), call)
    gate = router.gate(cat.resolve("m").targets[0])
    assert gate.in_use == 1 and first["service_tier"] == "default"
    await watched.aclose()  # type: ignore[attr-defined]
    assert gate.in_use == 0 and closed == [True]


async def test_rpm_limit_moves_traffic_then_refuses_with_retry_after() -> None:
    from inferplex.errors import RateLimited

    cat = catalog(
        [{"provider": "a", "model": "x", "priority": 0, "rpm": 2}, {"provider": "b", "model": "x", "priority": 1}],
        strategy="priority",
    )
    seen = await served_by(Router(cat), cat, 5, ok)
    assert seen == Counter({"a/x": 2, "b/x": 3})
    cat = catalog([{"provider": "a", "model": "x", "rpm": 1}])
    router = Router(cat)
    await router.run(ctx(), cat.resolve("m"), ok)
    with pytest.raises(RateLimited) as info:
        await router.run(ctx(), cat.resolve("m"), ok)
    assert info.value.code == "deployment_rate_limited" and 59 < (info.value.retry_after or 0) <= 60


async def test_when_every_deployment_is_cooling_down_the_soonest_is_still_tried() -> None:
    cat = catalog([{"provider": "a", "model": "x"}], retries=0, cooldown={"failures": 1, "period": 60})
    router = Router(cat)
    outcomes = ["fail", "ok"]

    async def call(target: Target) -> dict[str, Any]:
        if outcomes.pop(0) == "fail":
            raise UpstreamError("down", upstream_status=503)
        return {"choices": []}

    with pytest.raises(UpstreamError):
        await router.run(ctx(), cat.resolve("m"), call)
    c = ctx()
    await router.run(c, cat.resolve("m"), call)  # the breaker is open, but nothing else could serve
    assert c.attempts == 1 and not outcomes


async def test_an_unreachable_redis_leaves_routing_working() -> None:
    from tests.gateway_server import free_port

    store = RedisCooldowns(f"redis://127.0.0.1:{free_port()}/0", "x:")
    policy = CooldownConfig()
    try:
        assert (await store.check("dep", policy)).gate is Gate.CLOSED
        assert not await store.failure("dep", policy)
        await store.success("dep")
    finally:
        await store.aclose()
