"""Two gateway workers on one machine, no Redis: limits and breakers are global through the coordinator;
keys, their revocation, tokens and the ledger through the one SQLite file. Everything is asserted through
HTTP, as a caller sees it, with real processes.

The control (`test_without_the_coordinator_each_worker_counts_alone`) shows what the coordinator prevents:
LiteLLM's documented failure, where a limit across N workers without Redis lets N times through.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.accounts.conftest import Admin, billing_config
from tests.conftest import UPSTREAM_KEY
from tests.fakes.flip_upstream import FlipOpenAI
from tests.fakes.openai_upstream import FakeOpenAI
from tests.shared_state.conftest import MASTER, Coordinator, statuses, stop, workers


def _chat(client: httpx.AsyncClient, url: str, key: str, model: str = "priced") -> Any:
    return client.post(
        url + "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 2},
        headers={"Authorization": f"Bearer {key}"},
    )


def _burst(urls: list[str], key: str, n: int, model: str = "priced") -> list[httpx.Response]:
    """`n` requests at once, alternating between the workers."""

    async def run() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=n)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            return list(await asyncio.gather(*(_chat(client, urls[i % len(urls)], key, model) for i in range(n))))

    return asyncio.run(run())


@pytest.fixture(scope="module")
def shared(
    fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[str], Coordinator]]:
    """Two workers and their coordinator, for the module's tests (each makes keys of its own)."""
    tmp = tmp_path_factory.mktemp("two")
    sockets = Path(tempfile.mkdtemp(prefix="ipx-ss-"))
    coordinator = Coordinator(str(sockets / "state.sock"))
    try:
        config = billing_config(fake_openai, tmp, accounts={"max_queue_wait_s": 20})
        with workers(config, tmp, 2, coordinator.path) as urls:
            yield urls, coordinator
    finally:
        stop(coordinator.proc)
        shutil.rmtree(sockets, ignore_errors=True)


@pytest.fixture
def two(shared: tuple[list[str], Coordinator]) -> list[str]:
    return shared[0]


def test_a_60_a_minute_key_admits_exactly_60_of_a_burst_of_200_across_two_workers(two: list[str]) -> None:
    admin = Admin(two[0], MASTER)
    rule = {"metric": "requests", "period": "minute", "max": 60}
    key = admin.create_key(credits_micros=10**6, limit_rules=[rule])["key"]
    rpm = admin.create_key(credits_micros=10**6, rpm=10)["key"]  # a GCRA bucket: one more every 6 s
    admin.close()
    got = statuses(_burst(two, key, 200))
    assert (got.count(200), got.count(429)) == (60, 140)
    got = statuses(_burst(two, rpm, 40))
    assert (got.count(200), got.count(429)) == (10, 30)


def test_without_the_coordinator_each_worker_counts_alone(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    """The same burst without the coordinator: each worker admits its own 60 (what the coordinator is for)."""
    with workers(billing_config(fake_openai, tmp_path), tmp_path, 2, None) as urls:
        admin = Admin(urls[0], MASTER)
        rule = {"metric": "requests", "period": "minute", "max": 60}
        key = admin.create_key(credits_micros=10**6, limit_rules=[rule])["key"]
        admin.close()
        assert statuses(_burst(urls, key, 200)).count(200) == 120


def test_a_concurrency_limit_of_3_holds_across_two_workers(two: list[str], fake_openai: FakeOpenAI) -> None:
    admin = Admin(two[1], MASTER)
    created = admin.create_key(credits_micros=100_000, max_concurrent=3)
    fake_openai.state.max_in_flight = 0
    assert statuses(_burst(two, created["key"], 12, "sleep-300")) == [200] * 12  # the rest queued, in turn
    assert fake_openai.state.max_in_flight == 3
    admin.close()


def test_the_ledger_is_exact_after_concurrent_requests_over_both_workers_on_sqlite(two: list[str]) -> None:
    """Both workers reserve and settle against one account in one SQLite file at once: no "database is
    locked" reaches a caller, and exactly what the balance covers is admitted (`priced`, max_tokens=2: 6
    micro-USD each)."""
    admin = Admin(two[0], MASTER)
    created = admin.create_key(credits_micros=300)
    responses = _burst(two, created["key"], 200)
    assert statuses(responses).count(200) == 50
    assert {r.json()["error"]["code"] for r in responses if r.status_code != 200} == {"insufficient_credits"}
    entries = Admin(two[1], MASTER).ledger(created["account_id"])
    assert admin.account(created["account_id"])["balance_micros"] == 0 == sum(e["amount_micros"] for e in entries)
    kinds = [e["kind"] for e in entries]
    assert (kinds.count("reserve"), kinds.count("settle")) == (50, 50)
    admin.close()


def _models(url: str, bearer: str) -> int:
    return httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {bearer}"}).status_code


def test_keys_tokens_and_revocation_are_global_across_workers(two: list[str]) -> None:
    """A key created through one worker works on the other; tokens minted on one (by the master key, or
    traded for a key) are honoured by the other; a key revoked through one is refused by both at once, with
    its tokens."""
    admin = Admin(two[0], MASTER)
    created = admin.create_key(credits_micros=100_000)
    traded = httpx.post(two[0] + "/v1/auth/token", headers={"Authorization": f"Bearer {created['key']}"})
    minted = httpx.post(two[1] + "/v1/auth/token", headers={"Authorization": f"Bearer {MASTER}"})
    assert traded.status_code == 200 and minted.status_code == 200, (traded.text, minted.text)
    token, master_token = traded.json()["access_token"], minted.json()["access_token"]
    for url in two * 2:  # looked up, then served from what each worker keeps
        assert _models(url, created["key"]) == 200 and _models(url, token) == 200 and _models(url, master_token) == 200
    assert admin.client.post(f"/admin/keys/{created['id']}/revoke").status_code == 200
    assert [_models(url, created["key"]) for url in two] == [401, 401]
    assert [_models(url, token) for url in two] == [401, 401]
    assert [_models(url, master_token) for url in two] == [200, 200]
    admin.close()


def test_limits_come_back_when_the_coordinator_is_restarted(shared: tuple[list[str], Coordinator]) -> None:
    """The coordinator killed: requests go on (`storage.redis_failure: open`, the default: unlimited while it
    is down); started again by the supervisor, the workers reconnect on their next call and limits hold
    again (the counts started afresh)."""
    two, coordinator = shared
    admin = Admin(two[0], MASTER)
    key = admin.create_key(credits_micros=10**6, rpm=3)["key"]
    assert statuses(_burst(two, key, 6)).count(200) == 3
    coordinator.kill()
    assert statuses(_burst(two, key, 6)) == [200] * 6  # failing open
    coordinator.respawn()
    got = statuses(_burst(two, key, 6))
    assert (got.count(200), got.count(429)) == (3, 3)
    admin.close()


def test_with_limits_failing_closed_a_lost_coordinator_refuses_with_503(
    fake_openai: FakeOpenAI, tmp_path: Path, coordinator: Coordinator
) -> None:
    config = billing_config(fake_openai, tmp_path, storage={"redis_failure": "closed"})
    with workers(config, tmp_path, 2, coordinator.path) as urls:
        admin = Admin(urls[0], MASTER)
        key = admin.create_key(credits_micros=10**6, rpm=100)["key"]
        assert statuses(_burst(urls, key, 4)) == [200] * 4
        coordinator.kill()
        responses = _burst(urls, key, 4)
        assert statuses(responses) == [503] * 4, [r.text for r in responses]
        coordinator.respawn()
        assert statuses(_burst(urls, key, 4)) == [200] * 4
        admin.close()


# ---- breakers --------------------------------------------------------------------------------------------


@pytest.fixture
def flips() -> Iterator[list[FlipOpenAI]]:
    started = [FlipOpenAI(UPSTREAM_KEY) for _ in range(2)]
    for fake in started:
        fake.start()
    yield started
    for fake in started:
        fake.stop()


def _routed(url: str) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {MASTER}"})


def test_a_breaker_opened_by_failures_on_one_worker_is_open_on_the_other(
    flips: list[FlipOpenAI], tmp_path: Path, coordinator: Coordinator
) -> None:
    providers = [
        {"name": f"p{i}", "base_url": f.base_url, "api_key": "env:FAKE_UPSTREAM_KEY", "timeouts": {"read": 5}}
        for i, f in enumerate(flips)
    ]
    deployments = [
        {"provider": "p0", "model": "up-0", "priority": 0},
        {"provider": "p1", "model": "up-1", "priority": 1},
    ]
    routing = {"strategy": "priority", "backoff": 0.01, "cooldown": {"failures": 2, "window": 30, "period": 30}}
    config = {
        "server": {"data_dir": str(tmp_path)},
        "providers": providers,
        "models": [{"name": "m", "deployments": deployments, "routing": routing, "pricing": {"free": True}}],
    }
    with workers(config, tmp_path, 2, coordinator.path) as (one, two):
        for _ in range(3):  # the second worker has found p0's breaker closed, and remembers it
            assert _routed(two).headers["x-inferplex-deployment"] == "p0/up-0"
        flips[0].flip("status:500")
        for _ in range(2):
            assert _routed(one).status_code == 200  # failed over to p1; the second failure opens p0
        assert flips[0].hits == 5
        for _ in range(3):
            r = _routed(two)
            assert r.status_code == 200 and r.headers["x-inferplex-deployment"] == "p1/up-1"
        assert flips[0].hits == 5  # the second worker never sent p0 a request after the first saw it fail
