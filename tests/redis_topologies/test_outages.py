"""A Sentinel set-up or a Cluster that cannot be reached is an outage like a single server's: the limits follow
`storage.redis_failure` (admit unlimited, or refuse with LimitsUnavailable, the guard's 503) and the breakers
read as closed, each within a short bound, never a hang or an unexpected error."""

from __future__ import annotations

import time

import pytest

from inferplex.config import CooldownConfig
from inferplex.limits import Hold, LimitsUnavailable, Rate
from inferplex.limits.redis import RedisLimits
from inferplex.routing.cooldown import Gate, RedisCooldowns
from tests.redis_topologies.conftest import free_ports


def _unreachable() -> list[str]:
    a, b = free_ports(2)  # nothing listens on them
    return [f"redis+sentinel://127.0.0.1:{a},127.0.0.1:{b}/svc", f"redis+cluster://127.0.0.1:{a},127.0.0.1:{b}"]


@pytest.mark.parametrize("fail_open", [True, False])
@pytest.mark.parametrize("kind", [0, 1], ids=["sentinel", "cluster"])
async def test_an_unreachable_topology_follows_the_failure_policy_at_once(kind: int, fail_open: bool) -> None:
    store = RedisLimits(_unreachable()[kind], "x:", fail_open=fail_open, timeout_s=0.2)
    rate = Rate("k", 1, 1, 60.0)
    started = time.monotonic()
    try:
        if fail_open:
            assert await store.admit([rate], [Hold("c", 1, "h")]) == (0.0, -1, (True,), 0.0)
            assert await store.try_acquire("c", 1, "h")
        else:
            with pytest.raises(LimitsUnavailable):
                await store.admit([rate], [Hold("c", 1, "h")])
            with pytest.raises(LimitsUnavailable):
                await store.try_acquire("c", 1, "h")
        await store.release("c", "h")  # never raises
        await store.finish([rate], [("c", "h")])
    finally:
        await store.aclose()
    assert time.monotonic() - started < 5  # each call is bounded by the socket timeouts; a hang would be minutes


@pytest.mark.parametrize("kind", [0, 1], ids=["sentinel", "cluster"])
async def test_breakers_read_as_closed_when_the_topology_is_unreachable(kind: int) -> None:
    store = RedisCooldowns(_unreachable()[kind], "x:")
    policy = CooldownConfig()
    started = time.monotonic()
    try:
        assert (await store.check("dep", policy)).gate is Gate.CLOSED
        assert await store.failure("dep", policy) is False
        assert await store.states(["dep"]) == [("closed", 0.0)]
    finally:
        await store.aclose()
    assert time.monotonic() - started < 5  # a hang guard, as above
