"""Redis reset and partitioned under concurrent load, through the HTTP API (the Redis half of the fault suite).

The gateway reaches Redis through a TCP proxy (tests/fakes/tcp_proxy.py) and runs on uvloop, as `inferplex
serve` does: uvloop reports a write on a transport the peer reset as a RuntimeError, not an OSError, which
is how a 500 once slipped past the failure policy. Twenty clients keep a key with `max_concurrent` and `rpm`
busy while Redis is flapped (connections closed), reset (connections aborted with RST) and silenced (a
partition: nothing crosses, no reset), then restored. Reconciled afterwards: every request answered, none
with a 500, each refusal in the caller's dialect, and no concurrency slot leaked: once Redis is back and the
pending releases have been sent, Redis holds no live slot and a burst of exactly `max_concurrent` requests
is admitted at once, without queueing.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio as aioredis
import uvloop

from inferplex.config import CooldownConfig
from inferplex.redis_script import DedicatedScript
from inferplex.routing.cooldown import Gate, RedisCooldowns
from tests.accounts.conftest import REDIS_URL, Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.fakes.tcp_proxy import TcpProxy
from tests.gateway_server import GatewayServer


def _redis_up() -> bool:
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis.exceptions.ConnectionError:
        return False


pytestmark = pytest.mark.skipif(not _redis_up(), reason="Redis is not running on 127.0.0.1:6379")

MAX_CONCURRENT = 5
CLIENTS = 20
BODY = {"model": "sleep-300", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 5}


class RedisProxy(TcpProxy):
    """The shared proxy, plus a reset that sends RST (SO_LINGER 0), so the gateway's transports are closed
    by the peer under them, as a crashed Redis or a middlebox would; `reset` closes them cleanly instead."""

    def __init__(self) -> None:
        super().__init__(6379)

    def reset_hard(self) -> None:
        async def abort() -> None:
            for writer in list(self._writers):
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
            self._writers.clear()

        self._run(abort())


@pytest.fixture
def proxy() -> Iterator[RedisProxy]:
    with RedisProxy() as p:
        yield p


def gateway(fake: FakeOpenAI, tmp: Path, proxy: RedisProxy, prefix: str, failure: str) -> GatewayServer:
    config = billing_config(
        fake,
        tmp,
        storage={
            "redis_url": f"redis://127.0.0.1:{proxy.port}/0",
            "redis_prefix": prefix,
            "redis_failure": failure,
            "redis_timeout_s": 0.25,
            "redis_lease_s": 120,  # far longer than the test: a slot that comes back was released, not expired
        },
        accounts={"max_queue_wait_s": 1},
        routing={"redis_prefix": prefix + "routing:"},
    )
    server = GatewayServer(config)
    server.server.config.loop = "uvloop"  # as `inferplex serve`
    return server.start()


def live_slots(prefix: str) -> int:
    """Slots Redis holds under `prefix` whose lease has not run out, read from the store itself."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        seconds, micros = client.time()
        now = seconds + micros / 1e6
        return sum(int(client.zcount(key, f"({now}", "+inf")) for key in client.scan_iter(prefix + "conc:*"))
    finally:
        client.close()


def eventually(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class Load:
    """`CLIENTS` callers, half OpenAI and half Anthropic, each sending one request after another until stopped."""

    def __init__(self, server: GatewayServer, key: str) -> None:
        self.server, self.key = server, key
        self.answers: list[tuple[str, int, dict[str, Any]]] = []
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(CLIENTS)
        self._lock = threading.Lock()

    def __enter__(self) -> Load:
        self._futures = [self._pool.submit(self._client, i % 2 == 0) for i in range(CLIENTS)]
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for future in self._futures:
            future.result(60)
        self._pool.shutdown()

    def _client(self, openai: bool) -> None:
        dialect = "openai" if openai else "anthropic"
        path = "/v1/chat/completions" if openai else "/v1/messages"
        headers = {"Authorization": f"Bearer {self.key}", "anthropic-version": "2023-06-01"}
        with httpx.Client(base_url=self.server.url, headers=headers, timeout=30) as client:
            while not self._stop.is_set():
                try:
                    r = client.post(path, json=BODY)
                    answer = (dialect, r.status_code, r.json())
                except Exception as exc:  # an unanswered request: the test fails on it
                    with self._lock:
                        self.failures.append(exc)
                    continue
                with self._lock:
                    self.answers.append(answer)


def assert_answered_in_dialect(load: Load, failure: str) -> Counter[tuple[str, int]]:
    assert not load.failures, load.failures[:3]
    seen = Counter((dialect, status) for dialect, status, _ in load.answers)
    allowed = {200, 429} | ({503} if failure == "closed" else set())
    assert {status for _, status in seen} <= allowed, seen
    for dialect, status, body in load.answers:
        if status == 503:  # failing closed: the limits could not be checked, said in the caller's dialect
            if dialect == "openai":
                assert body["error"]["code"] == "limits_unavailable", body
            else:
                assert body["type"] == "error" and body["error"]["type"] == "api_error", body
        elif status == 429:  # the rpm, or no slot within max_queue_wait_s
            if dialect == "openai":
                assert body["error"]["code"] == "rate_limit_exceeded", body
            else:
                assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error", body
    assert seen[("openai", 200)] and seen[("anthropic", 200)], seen
    return seen


def burst_is_admitted_at_once(server: GatewayServer, key: str) -> list[httpx.Response]:
    """Exactly `MAX_CONCURRENT` requests at once: each must get a slot without waiting for one."""
    headers = {"Authorization": f"Bearer {key}"}
    with ThreadPoolExecutor(MAX_CONCURRENT) as pool:
        return list(
            pool.map(
                lambda _: httpx.post(f"{server.base_url}/chat/completions", json=BODY, headers=headers, timeout=30),
                range(MAX_CONCURRENT),
            )
        )


@pytest.mark.parametrize("failure", ["open", "closed"])
def test_redis_reset_and_partitioned_under_load_answers_every_request_and_leaks_no_slot(
    failure: str, fake_openai: FakeOpenAI, tmp_path: Path, proxy: RedisProxy, redis_prefix: str
) -> None:
    server = gateway(fake_openai, tmp_path, proxy, redis_prefix, failure)
    try:
        admin = Admin(server.url, server.master_key)
        key = admin.create_key(credits_micros=10**9, max_concurrent=MAX_CONCURRENT, rpm=600)["key"]
        admin.close()
        with Load(server, key) as load:
            time.sleep(1.0)
            proxy.reset()  # a flap: every connection closed, new ones accepted
            time.sleep(1.0)
            proxy.reset_hard()  # connections aborted with RST under the gateway's transports
            time.sleep(1.0)
            proxy.silence()  # a partition: nothing crosses, nothing is reset
            time.sleep(2.0)
            proxy.restore()  # what was held is delivered, as TCP would after the partition heals
            time.sleep(1.0)
        seen = assert_answered_in_dialect(load, failure)
        if failure == "closed":
            assert seen[("openai", 503)] + seen[("anthropic", 503)], seen  # the outage was felt

        # The bound: the releases Redis could not be sent go once it answers (retried every second).
        assert eventually(lambda: live_slots(redis_prefix) == 0, 5), live_slots(redis_prefix)
        answers = burst_is_admitted_at_once(server, key)
        assert [r.status_code for r in answers] == [200] * MAX_CONCURRENT, [r.text for r in answers]
        assert [r.headers.get("x-inferplex-queued-ms") for r in answers] == [None] * MAX_CONCURRENT
        assert eventually(lambda: live_slots(redis_prefix) == 0, 5)
    finally:
        server.stop()


def test_a_reset_redis_connection_is_reconnected_not_a_500(
    fake_openai: FakeOpenAI, tmp_path: Path, proxy: RedisProxy, redis_prefix: str
) -> None:
    """Failing closed, so that a Redis error that escaped the policy and one that took it both show: the
    request after an RST on the idle connections must be served (the script reconnects), not a 500 or 503."""
    server = gateway(fake_openai, tmp_path, proxy, redis_prefix, "closed")
    try:
        admin = Admin(server.url, server.master_key)
        key = admin.create_key(credits_micros=10**9, max_concurrent=MAX_CONCURRENT)["key"]
        admin.close()
        headers = {"Authorization": f"Bearer {key}"}
        for _ in range(3):
            r = httpx.post(f"{server.base_url}/chat/completions", json=BODY, headers=headers, timeout=30)
            assert r.status_code == 200, r.text
            time.sleep(0.3)  # its finish (queued after the answer) has gone: every connection is idle
            proxy.reset_hard()
            time.sleep(0.2)  # the gateway's loop sees the RST and closes its transports
        r = httpx.post(f"{server.base_url}/chat/completions", json=BODY, headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        assert eventually(lambda: live_slots(redis_prefix) == 0, 5)
    finally:
        server.stop()


def test_a_script_connection_reset_while_idle_reconnects_on_uvloop(proxy: RedisProxy) -> None:
    async def run() -> list[bytes]:
        client = aioredis.from_url(f"redis://127.0.0.1:{proxy.port}/0", socket_timeout=0.5)
        script = DedicatedScript(client, "return ARGV[1]")
        try:
            out = [await script(keys=[], args=["before"])]
            proxy.reset_hard()
            await asyncio.sleep(0.1)
            out.append(await script(keys=[], args=["after"]))  # uvloop: RuntimeError, had it not reconnected
            return out
        finally:
            await script.aclose()
            await client.aclose()

    assert uvloop.run(run()) == [b"before", b"after"]


async def test_a_silently_partitioned_breaker_subscription_is_given_up(redis_prefix: str, proxy: RedisProxy) -> None:
    """A replica trusts the breakers it remembers closed only while it hears of openings. A partition that
    drops packets (a NAT forgetting an idle connection) leaves its subscription open but deaf: it must find
    that out from an unanswered ping and go back to asking Redis, so an opening made meanwhile is seen."""
    policy = CooldownConfig(failures=1, window=60, period=60)
    deaf = RedisCooldowns(f"redis://127.0.0.1:{proxy.port}/0", redis_prefix, check_s=0.2)
    other = RedisCooldowns(REDIS_URL, redis_prefix, check_s=0.2)
    try:
        assert (await deaf.check("d", policy)).gate is Gate.CLOSED
        await asyncio.sleep(0.3)  # subscribed
        assert (await deaf.check("d", policy)).gate is Gate.CLOSED  # now remembered
        proxy.silence()
        assert await other.failure("d", policy)  # opened on another replica; the deaf one cannot hear it
        await asyncio.sleep(0.8)  # a ping unanswered for check_s
        proxy.restore()
        assert (await deaf.check("d", policy)).gate is Gate.OPEN
    finally:
        await deaf.aclose()
        await other.aclose()


def test_the_gateway_shuts_down_promptly_and_cleanly_while_redis_is_partitioned(
    fake_openai: FakeOpenAI, tmp_path: Path, proxy: RedisProxy, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = gateway(fake_openai, tmp_path, proxy, redis_prefix, "open")
    stopped = False
    try:
        admin = Admin(server.url, server.master_key)
        key = admin.create_key(credits_micros=10**9, max_concurrent=MAX_CONCURRENT)["key"]
        admin.close()
        headers = {"Authorization": f"Bearer {key}"}
        assert httpx.post(f"{server.base_url}/chat/completions", json=BODY, headers=headers).status_code == 200
        proxy.silence()
        r = httpx.post(f"{server.base_url}/chat/completions", json=BODY, headers=headers, timeout=30)
        assert r.status_code == 200, r.text  # failing open; its release is pending
        caplog.clear()
        start = time.monotonic()
        server.stop()
        stopped = True
        assert server._thread is not None and not server._thread.is_alive()
        assert time.monotonic() - start < 10
        assert "Traceback" not in caplog.text and "ERROR" not in [r.levelname for r in caplog.records]
    finally:
        proxy.restore()
        if not stopped:
            server.stop()
