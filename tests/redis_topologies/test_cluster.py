"""The gateway on a real Redis Cluster (3 masters with a replica each), through HTTP with the openai SDK: two
apps share exact limits and breakers, every store's keys sit on one slot, and a master that fails over (its
slot's MOVED replies) costs no limit its exactness."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from tests.fakes.flip_upstream import FlipOpenAI
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.redis_topologies.conftest import Cluster, cluster_ok, eventually
from tests.redis_topologies.gateways import breaker_is_shared, burst, create_key, keyed_gateways

LIMITS = b"{inferplex_test:*:limits:}*"  # the limit store's keys, under its hash tag
# How long after its replica is promoted the apps may take to use a killed master's successor: the next call
# after a lost connection reads the slot map afresh.
PROMOTED_BOUND_S = 5.0


@pytest.fixture(scope="module")
def gateways(
    cluster: Cluster, fake_openai: FakeOpenAI, pg_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[GatewayServer]]:
    with keyed_gateways(fake_openai, tmp_path_factory.mktemp("gw"), pg_url, cluster.url) as gws:
        yield gws


def _stored_keys(cluster: Cluster, pattern: bytes) -> dict[int, list[bytes]]:
    """Every key matching `pattern` on each master, by port."""
    out: dict[int, list[bytes]] = {}
    for port in cluster.live:
        node = redis.Redis(port=port)
        if node.info("replication")["role"] == "master":
            found = list(node.scan_iter(match=pattern))
            if found:
                out[port] = found
    return out


def test_a_rate_limit_admits_exactly_n_across_two_apps(gateways: list[GatewayServer], cluster: Cluster) -> None:
    key = create_key(gateways[0], rpm=7)
    statuses = burst(gateways, key, 20)
    assert (statuses.count(200), statuses.count(429)) == (7, 13)
    # Every key the limits wrote lives on one master, all on the slot of the store's hash tag.
    stored = _stored_keys(cluster, LIMITS)
    assert len(stored) == 1
    slots = {redis.Redis(port=port).cluster("keyslot", k) for port, keys in stored.items() for k in keys}
    assert len(slots) == 1


def test_a_concurrency_limit_holds_across_two_apps(gateways: list[GatewayServer], fake_openai: FakeOpenAI) -> None:
    key = create_key(gateways[1], max_concurrent=2)
    fake_openai.state.max_in_flight = 0
    assert burst(gateways, key, 8, model="sleep-300") == [200] * 8
    assert fake_openai.state.max_in_flight == 2


def test_a_breaker_opened_through_one_app_is_open_in_the_other(cluster: Cluster, ups: list[FlipOpenAI]) -> None:
    breaker_is_shared(ups, cluster.url)


def test_limits_stay_exact_after_the_slots_master_fails_over(gateways: list[GatewayServer], cluster: Cluster) -> None:
    """A manual failover promotes the replica of the master that holds the limits' slot: the apps' script
    connections get MOVED (or lose their connection) and follow the slot to its new master."""
    key = create_key(gateways[0], rpm=5)
    assert burst(gateways, key, 2) == [200, 200]
    stored = _stored_keys(cluster, LIMITS)
    (old_master,) = stored
    replica = cluster.replica_of(old_master)
    redis.Redis(port=replica).execute_command("CLUSTER FAILOVER")
    eventually(lambda: redis.Redis(port=replica).info("replication")["role"] == "master", 15, "the replica took over")
    eventually(
        lambda: all(cluster_ok(p) for p in cluster.live),
        15,
        "the cluster is ok again",
    )
    statuses = burst(gateways, key, 10)
    assert (statuses.count(200), statuses.count(429)) == (3, 7)  # the 2 before the failover still count
    fresh = create_key(gateways[1], rpm=4)
    statuses = burst(gateways, fresh, 10)
    assert (statuses.count(200), statuses.count(429)) == (4, 6)
    assert list(_stored_keys(cluster, LIMITS)) == [replica]


def test_a_killed_master_is_replaced_and_limits_work_again_within_a_bound(
    gateways: list[GatewayServer], cluster: Cluster
) -> None:
    """SIGKILL the master holding the limits' slot (last in this module: the cluster keeps 3 masters, one
    without a replica). Until its replica is promoted the limits fail closed (503, never admitted unlimited);
    once it is, the apps use the new master within the bound and the limits are exact."""
    key = create_key(gateways[0], rpm=5)
    assert burst(gateways, key, 1) == [200]
    (master,) = _stored_keys(cluster, LIMITS)
    replica = cluster.replica_of(master)
    cluster.servers.kill(master)
    killed = time.monotonic()
    assert set(burst(gateways, key, 2)) <= {200, 503}
    eventually(lambda: redis.Redis(port=replica).info("replication")["role"] == "master", 20, "promotion")
    promoted = time.monotonic()
    fresh = create_key(gateways[1], rpm=4)
    eventually(lambda: burst(gateways, fresh, 1) == [200], PROMOTED_BOUND_S, "limits work on the new master")
    print(f"killed -> promoted {promoted - killed:.1f}s, promoted -> served {time.monotonic() - promoted:.1f}s")
    statuses = burst(gateways, fresh, 10)
    assert (statuses.count(200), statuses.count(429)) == (3, 7)
    assert list(_stored_keys(cluster, LIMITS)) == [replica]
