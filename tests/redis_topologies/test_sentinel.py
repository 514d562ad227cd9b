"""The gateway behind Redis Sentinel (a master, a replica, one sentinel), through HTTP with the openai SDK: two
apps share exact limits and breakers, and after a failover (SENTINEL FAILOVER) mid-test the new master is used
within a bound and the limits are exact again."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from inferplex.redis_script import MASTER_CHECK_S
from tests.fakes.flip_upstream import FlipOpenAI
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.redis_topologies.conftest import SentinelSetup, eventually
from tests.redis_topologies.gateways import breaker_is_shared, burst, create_key, keyed_gateways

# How long after the master is killed its replica may take to serve the gateway: the sentinel's
# down-after-milliseconds (1 s here), its election and promotion, then the gateway's reconnect.
KILLED_BOUND_S = 20.0


@pytest.fixture(scope="module")
def gateways(
    sentinel: SentinelSetup, fake_openai: FakeOpenAI, pg_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[GatewayServer]]:
    with keyed_gateways(fake_openai, tmp_path_factory.mktemp("gw"), pg_url, sentinel.url(db=3)) as gws:
        yield gws


def test_a_rate_limit_admits_exactly_n_across_two_apps(gateways: list[GatewayServer], sentinel: SentinelSetup) -> None:
    key = create_key(gateways[0], rpm=7)
    statuses = burst(gateways, key, 20)
    assert (statuses.count(200), statuses.count(429)) == (7, 13)
    assert redis.Redis(port=sentinel.master(), db=3).keys("inferplex_test:*:limits:*")  # in the URL's database


def test_a_concurrency_limit_holds_across_two_apps(gateways: list[GatewayServer], fake_openai: FakeOpenAI) -> None:
    key = create_key(gateways[1], max_concurrent=2)
    fake_openai.state.max_in_flight = 0
    assert burst(gateways, key, 8, model="sleep-300") == [200] * 8
    assert fake_openai.state.max_in_flight == 2


def test_a_breaker_opened_through_one_app_is_open_in_the_other(sentinel: SentinelSetup, ups: list[FlipOpenAI]) -> None:
    breaker_is_shared(ups, sentinel.url())


def test_after_a_failover_the_new_master_is_used_and_limits_hold(
    gateways: list[GatewayServer], sentinel: SentinelSetup
) -> None:
    """SENTINEL FAILOVER leaves the old master up, and a master, for seconds more (until the sentinel
    reconfigures it): writes sent there would be lost. Each app asks the sentinels where the master is every
    MASTER_CHECK_S, so within about that long of the new master being named every write goes to it."""
    key = create_key(gateways[0], rpm=5)
    assert burst(gateways, key, 2) == [200, 200]
    old = sentinel.master()
    redis.Redis(port=sentinel.sentinel).execute_command("SENTINEL FAILOVER", "inferplex-test")
    eventually(lambda: sentinel.master() != old, 15, "the sentinel named a new master")
    new = sentinel.master()
    replicated = set(redis.Redis(port=new, db=3).keys("inferplex_test:*:limits:*"))
    time.sleep(MASTER_CHECK_S + 0.5)  # the bound, plus a sentinel round trip
    fresh = create_key(gateways[1], rpm=4)
    statuses = burst(gateways, fresh, 10)
    assert (statuses.count(200), statuses.count(429)) == (4, 6)
    # Written on the new master itself, not replicated to it from the old one.
    assert set(redis.Redis(port=new, db=3).keys("inferplex_test:*:limits:*")) - replicated
    # The key used before the failover: what the replica had of its window survived the promotion.
    statuses = burst(gateways, key, 10)
    assert (statuses.count(200), statuses.count(429)) == (3, 7)


def test_a_killed_master_is_replaced_and_limits_work_again_within_a_bound(
    gateways: list[GatewayServer], sentinel: SentinelSetup
) -> None:
    """SIGKILL the master (after the failover above the old one is its replica): the sentinel promotes the
    replica, and the gateway uses it within the bound, limits exact."""
    eventually(sentinel.has_replica, 30, "the sentinel has a replica to promote")
    old = sentinel.master()
    sentinel.servers.kill(old)
    killed = time.monotonic()
    fresh = create_key(gateways[0], rpm=4)
    eventually(lambda: burst(gateways, fresh, 1) == [200], KILLED_BOUND_S, "limits work on the promoted replica")
    print(f"killed -> served on the new master {time.monotonic() - killed:.1f}s")
    assert sentinel.master() != old
    statuses = burst(gateways, fresh, 10)
    assert (statuses.count(200), statuses.count(429)) == (3, 7)
