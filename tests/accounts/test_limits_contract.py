"""The limit-store contract: in-memory and Redis (its own key prefix) pass the same tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis

from inferplex.limits import Hold, LimitStore, LimitsUnavailable, Rate, Verdict
from inferplex.limits.memory import MemoryLimits
from inferplex.limits.redis import RedisLimits
from inferplex.limits.slots import FairSlots
from inferplex.redis_script import DedicatedScript
from tests.accounts.conftest import REDIS_URL, restart_redis_scripts
from tests.gateway_server import free_port


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[LimitStore]:
    if request.param == "memory":
        s: LimitStore = MemoryLimits()
    else:
        s = RedisLimits(REDIS_URL, request.getfixturevalue("redis_prefix"))
    yield s
    await s.aclose()


def rate(key: str, amount: int, limit: int) -> list[Rate]:
    return [Rate(key, amount, limit, 60)]


async def take(store: LimitStore, rates: list[Rate]) -> tuple[float, int]:
    """The rate part of `admit` (no slots): (0.0, -1) if admitted, else (seconds to wait, binding rate)."""
    wait, worst, _, _ = await store.admit(rates, [])
    return wait, worst


async def test_a_rate_admits_exactly_its_limit_even_under_concurrency(store: LimitStore) -> None:
    results = await asyncio.gather(*(take(store, rate("k:rpm", 1, 10)) for _ in range(50)))
    waits = [w for w, _ in results]
    assert sum(w == 0 for w in waits) == 10
    assert all(0 < w <= 6.01 for w in waits if w)  # one slot comes back every 60/10 s
    assert await take(store, rate("other:rpm", 1, 10)) == (0.0, -1)  # keys are independent


async def test_token_amounts_and_charged_debt(store: LimitStore) -> None:
    assert (await take(store, rate("k:tpm", 600, 1000)))[0] == 0
    assert (await take(store, rate("k:tpm", 600, 1000)))[0] > 0  # 400 left: refused
    assert (await take(store, rate("k:tpm", 400, 1000)))[0] == 0
    await store.finish(rate("k2:tpm", 1500, 1000), [])  # output already produced: charged even past the limit
    wait, _ = await take(store, rate("k2:tpm", 1, 1000))
    assert 29 < wait <= 30.1  # 500 tokens of debt at 1000/min, plus one token


async def test_a_negative_charge_gives_back_at_most_to_a_full_bucket(store: LimitStore) -> None:
    """Settlement corrects an over-estimate with a negative charge: the room comes back at once, exactly,
    and a bucket that has already refilled is not made fuller than full (day windows: no refill here)."""
    day = 86_400
    assert (await store.admit([Rate("k:d", 600, 1000, day)], []))[0] == 0
    await store.finish([Rate("k:d", -500, 1000, day)], [])  # 100 were used, not 600
    assert (await store.admit([Rate("k:d", 900, 1000, day)], []))[0] == 0  # exactly 1000 now
    assert (await store.admit([Rate("k:d", 1, 1000, day)], []))[0] > 0
    await store.finish([Rate("full:d", -500, 1000, day)], [])  # a refund into an untouched bucket
    assert (await store.admit([Rate("full:d", 1000, 1000, day)], []))[0] == 0
    assert (await store.admit([Rate("full:d", 1, 1000, day)], []))[0] > 0


def window(key: str, amount: int, limit: int, window_s: float = 86_400, age_s: float = 0.0) -> Rate:
    return Rate(key, amount, limit, window_s, 60, age_s)


async def test_a_rolling_window_admits_its_limit_exactly_under_concurrency_and_says_what_it_holds(
    store: LimitStore,
) -> None:
    results = await asyncio.gather(*(store.admit([window("w:req", 1, 10)], []) for _ in range(40)))
    assert sum(r.wait == 0 for r in results) == 10
    refused = [r for r in results if r.wait]
    assert {r.used for r in refused} == {10} and {r.worst for r in refused} == {0}
    # Nothing comes back before the window has passed: the room of the day's first request returns a day
    # later (within one sub-window of 24 minutes), not after a tenth of the day as a bucket's would.
    assert all(86_400 - 1_440 - 1 <= r.wait <= 86_400 for r in refused)


async def test_a_rolling_window_is_corrected_in_place_and_never_below_empty(store: LimitStore) -> None:
    assert (await store.admit([window("w:tok", 600, 1000)], [])).wait == 0
    await store.finish([window("w:tok", -500, 1000, age_s=0.01)], [])  # 100 were used
    assert (await store.admit([window("w:tok", 900, 1000)], [])).wait == 0
    refused = await store.admit([window("w:tok", 1, 1000)], [])
    assert refused.wait > 0 and refused.used == 1000
    await store.finish([window("w:empty", -500, 1000)], [])  # nothing to give back: stays empty
    assert (await store.admit([window("w:empty", 1000, 1000)], [])).wait == 0
    assert (await store.admit([window("w:empty", 1, 1000)], [])).used == 1000
    # A request admitted longer ago than the window (a long stream on a minute window): its refund has
    # nothing left to correct, and its output counts from now.
    await store.finish([window("w:old", -700, 1000, window_s=60, age_s=120)], [])
    assert (await store.admit([window("w:old", 1000, 1000, window_s=60)], [])).wait == 0
    await store.finish([window("w:late", 700, 1000, window_s=60, age_s=120)], [])
    assert (await store.admit([window("w:late", 301, 1000, window_s=60)], [])).used == 700


async def test_a_short_window_rolls(store: LimitStore) -> None:
    """3 per 1.2 s in 60 sub-windows of 20 ms: full, then room again once the window has passed."""
    assert [(await store.admit([window("w:s", 1, 3, 1.2)], [])).wait == 0 for _ in range(4)] == [True] * 3 + [False]
    refused = await store.admit([window("w:s", 1, 3, 1.2)], [])
    await asyncio.sleep(refused.wait + 0.03)
    assert (await store.admit([window("w:s", 1, 3, 1.2)], [])).wait == 0


async def test_windows_and_buckets_are_all_or_nothing_together(store: LimitStore) -> None:
    both = [Rate("m:rpm", 1, 100, 60), window("m:day", 1, 2)]
    assert [(await store.admit(both, [])).wait == 0 for _ in range(3)] == [True, True, False]
    assert (await store.admit([Rate("m:rpm", 98, 100, 60)], [])).wait == 0  # the refused one took nothing


async def test_a_request_larger_than_the_bucket_passes_only_when_it_is_full(store: LimitStore) -> None:
    assert (await take(store, rate("k:tpm", 5000, 1000)))[0] == 0
    assert (await take(store, rate("k:tpm", 1, 1000)))[0] > 0


async def test_several_rates_are_all_or_nothing_and_name_the_binding_one(store: LimitStore) -> None:
    both = [Rate("key:rpm", 1, 100, 60), Rate("acct:rpm", 1, 2, 60)]
    assert (await take(store, both))[0] == 0 and (await take(store, both))[0] == 0
    wait, worst = await take(store, both)
    assert wait > 0 and worst == 1  # the account's limit binds
    # the refused request charged nothing to the key's bucket: 98 more fit in it
    assert (await take(store, [Rate("key:rpm", 98, 100, 60)]))[0] == 0


async def test_concurrency_slots(store: LimitStore) -> None:
    got = await asyncio.gather(*(store.try_acquire("c", 3, f"h{i}") for i in range(10)))
    assert sum(got) == 3 and await store.in_use("c") == 3
    holder = f"h{got.index(True)}"
    await store.release("c", holder)
    await store.release("c", holder)  # releasing twice frees one slot, not two
    assert await store.in_use("c") == 2
    assert await store.try_acquire("c", 3, "new") and not await store.try_acquire("c", 3, "newer")


async def test_admit_takes_the_rates_then_the_free_slots_in_one_call(store: LimitStore) -> None:
    rpm = [Rate("k:rpm", 1, 2, 60)]
    assert await store.admit(rpm, [Hold("a", 1, "r1"), Hold("b", 2, "r1")]) == (0.0, -1, (True, True), 0.0)
    assert await store.admit(rpm, [Hold("a", 1, "r2"), Hold("b", 2, "r2")]) == (0.0, -1, (False, True), 0.0)
    wait, worst, taken, _ = await store.admit(rpm, [Hold("b", 2, "r3")])  # third request: the rpm refuses
    assert wait > 0 and worst == 0 and taken == (False,)
    assert (await store.in_use("a"), await store.in_use("b")) == (1, 2)  # the refused request took no slot
    assert await store.admit([], []) == (0.0, -1, (), 0.0)


async def test_finish_charges_tokens_and_gives_slots_back_in_one_call(store: LimitStore) -> None:
    await store.admit([], [Hold("a", 2, "r1"), Hold("b", 2, "r1")])
    # An hour's window: one token comes back every 36 s, so a stalled machine cannot refill the bucket in time.
    await store.finish([Rate("k:tpm", 100, 100, 3600), Rate("skip:tpm", 0, 100, 60)], [("a", "r1"), ("b", "r1")])
    assert (await store.in_use("a"), await store.in_use("b")) == (0, 0)
    assert (await take(store, [Rate("k:tpm", 1, 100, 3600)]))[0] > 0  # the 100 tokens filled the bucket
    assert await take(store, [Rate("skip:tpm", 100, 100, 60)]) == (0.0, -1)  # a zero charge is no charge
    await store.finish([], [("a", "r1")])  # releasing again changes nothing


async def test_one_batch_of_operations_on_the_same_keys_acts_as_each_alone_in_turn(store: LimitStore) -> None:
    """Queued together, operations share one store call (on Redis, one script that reads and writes each key
    once): the outcome must still be that of applying them one by one in the order they were made."""
    rpm, tpm = Rate("b:rpm", 1, 4, 3600), Rate("b:tpm", 40, 100, 3600)
    first = await asyncio.gather(*(store.admit([rpm, tpm], [Hold("b:conc", 2, f"r{i}")]) for i in range(6)))
    # rpm allows 4 and tpm 2 (40 + 40, then 80 + 40 > 100): two admitted, each with one of the two slots; the
    # refusals charge nothing, so one more request of 20 tokens still fits.
    assert [(w == 0, taken) for w, _, taken, _ in first] == [(True, (True,))] * 2 + [(False, (False,))] * 4
    assert [worst for _, worst, _, _ in first[2:]] == [1] * 4
    # One batch (queued while an unrelated call is in flight): an admit that finds both slots held, a finish
    # that charges 10 output tokens and frees r0's slot, then three admits of 4 tokens, one with a new rpm
    # bucket. Alone in turn: 90 + 4 = 94, 98, then 102 > 100 refused; r0's slot goes to the first of them, and
    # the second finds both slots held again. (No sum lands on the limit itself: a bucket is floating point.)
    busy = asyncio.ensure_future(store.admit([Rate("other:rpm", 1, 10, 3600)], []))
    await asyncio.sleep(0)
    await asyncio.sleep(0)

    async def finish() -> Verdict:
        await store.finish([Rate("b:tpm", 10, 100, 3600)], [("b:conc", "r0")])
        return Verdict(0.0, -1, (), 0.0)

    later = await asyncio.gather(
        store.admit([], [Hold("b:conc", 2, "early")]),
        finish(),
        store.admit([Rate("b:tpm", 4, 100, 3600)], [Hold("b:conc", 2, "s0")]),
        store.admit([Rate("b:tpm", 4, 100, 3600), Rate("b2:rpm", 1, 1, 3600)], [Hold("b:conc", 2, "s1")]),
        store.admit([Rate("b:tpm", 4, 100, 3600)], []),
    )
    assert (await busy)[0] == 0
    assert [(w == 0, taken) for w, _, taken, _ in later] == [
        (True, (False,)),
        (True, ()),
        (True, (True,)),
        (True, (False,)),
        (False, ()),
    ]
    assert await store.in_use("b:conc") == 2
    assert (await take(store, [Rate("b2:rpm", 1, 1, 3600)]))[0] > 0  # the second admit charged its new bucket
    assert (await take(store, [Rate("b:tpm", 3, 100, 3600)]))[0] > 0  # 98 taken: 3 more do not fit
    assert await take(store, [Rate("b:tpm", 1, 100, 3600)]) == (0.0, -1)  # and 1 does


@pytest.mark.parametrize("now", [4088.671450099411, 1_764_000_000.25])
async def test_a_request_that_exactly_fills_its_bucket_is_admitted_whatever_the_clock(
    now: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At some clock values (now + 60) - 60 - now is a few ulps above zero: that rounding once refused the
    first request of a 1-per-minute key, and a prompt as large as its tpm, at random."""
    monkeypatch.setattr("inferplex.limits.memory.time.monotonic", lambda: now)
    store = MemoryLimits()
    assert await take(store, rate("one:rpm", 1, 1)) == (0.0, -1)
    assert await take(store, rate("full:tpm", 1000, 1000)) == (0.0, -1)
    assert (await take(store, rate("one:rpm", 1, 1)))[0] == pytest.approx(60)


async def test_fair_slots_serve_waiters_in_arrival_order_and_time_out(store: LimitStore) -> None:
    slots = FairSlots(store, poll_s=0.01)
    assert await slots.acquire("q", 1, "first", 1.0) == 0.0
    order: list[str] = []

    async def wait(name: str) -> None:
        if await slots.acquire("q", 1, name, 5.0) is not None:
            order.append(name)
            await slots.release("q", name)

    waiters = [asyncio.create_task(wait(f"w{i}")) for i in range(5)]
    await asyncio.sleep(0.05)
    assert await slots.acquire("q", 1, "late", 0.05) is None  # queue is full of earlier arrivals: timed out
    await slots.release("q", "first")
    await asyncio.gather(*waiters)
    assert order == [f"w{i}" for i in range(5)]


@pytest.mark.parametrize("fail_open", [True, False])
async def test_redis_outage_follows_the_policy_without_hanging(fail_open: bool) -> None:
    store = RedisLimits(f"redis://127.0.0.1:{free_port()}/0", "x:", fail_open=fail_open, timeout_s=0.2)
    start = time.monotonic()
    try:
        if fail_open:
            assert await take(store, rate("k", 1, 1)) == (0.0, -1)
            assert await store.try_acquire("c", 1, "h")
            assert await store.admit(rate("k", 1, 1), [Hold("c", 1, "h")]) == (0.0, -1, (True,), 0.0)
        else:
            with pytest.raises(LimitsUnavailable):
                await take(store, rate("k", 1, 1))
            with pytest.raises(LimitsUnavailable):
                await store.try_acquire("c", 1, "h")
            with pytest.raises(LimitsUnavailable):
                await store.admit(rate("k", 1, 1), [Hold("c", 1, "h")])
        await store.release("c", "h")  # never raises
        await store.finish(rate("k", 1, 1), [("c", "h")])
    finally:
        await store.aclose()
    assert time.monotonic() - start < 5  # a hang would be minutes: this only guards against that


@pytest.mark.parametrize("fail_open", [True, False])
async def test_a_redis_that_stops_answering_is_given_up_on_within_the_socket_timeout(
    fail_open: bool, redis_prefix: str
) -> None:
    # A relay to the real Redis that, once `silent`, still takes every byte but passes none on (a hung Redis,
    # a black-holing proxy). Each call must then give up within the 0.2 s socket timeout and follow the
    # policy: on the connection it had, and again on the new one it opens (whose handshake gets no answer).
    silent = False
    swallowed = bytearray()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        redis_at = urlsplit(REDIS_URL)
        up_reader, up_writer = await asyncio.open_connection(redis_at.hostname, redis_at.port)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                if silent:
                    swallowed.extend(data)
                else:
                    dst.write(data)

        try:
            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        finally:
            up_writer.close()
            writer.close()

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = RedisLimits(f"redis://127.0.0.1:{port}/0", redis_prefix, fail_open=fail_open, timeout_s=0.2)
    try:
        assert await store.admit(rate("k", 1, 100), [Hold("c", 5, "h0")]) == (0.0, -1, (True,), 0.0)
        silent = True
        for holder in ("h1", "h2"):
            start = time.monotonic()
            if fail_open:
                assert await store.admit(rate("k", 1, 100), [Hold("c", 5, holder)]) == (0.0, -1, (True,), 0.0)
            else:
                with pytest.raises(LimitsUnavailable):
                    await store.admit(rate("k", 1, 100), [Hold("c", 5, holder)])
            assert time.monotonic() - start < 2  # a hang would be for ever
        assert b"EVALSHA" in swallowed and b"HELLO" in swallowed  # the call, then the new handshake
    finally:
        await store.aclose()
        server.close()


async def test_limits_hold_after_redis_drops_the_connection_and_forgets_the_script(redis_prefix: str) -> None:
    # Failing closed: had the store not reconnected and reloaded its script, admit would raise.
    store = RedisLimits(REDIS_URL, redis_prefix, fail_open=False)
    try:
        assert await take(store, rate("k", 1, 2)) == (0.0, -1)
        assert restart_redis_scripts()
        assert await take(store, rate("k", 1, 2)) == (0.0, -1)
        assert (await take(store, rate("k", 1, 2)))[0] > 0  # the bucket kept its count across the reconnect
    finally:
        await store.aclose()


async def test_a_script_call_cancelled_halfway_leaves_no_reply_for_the_next_call() -> None:
    # Holds Redis ~100 ms, then echoes its argument: the first call is cancelled while Redis is running it.
    client = aioredis.from_url(REDIS_URL)
    slow = DedicatedScript(
        client,
        "local t = redis.call('TIME') local stop = t[1] * 1000000 + t[2] + 100000 "
        "repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= stop return ARGV[1]",
    )
    try:
        assert await slow(keys=[], args=["warm"]) == b"warm"
        first = asyncio.create_task(slow(keys=[], args=["first"]))
        await asyncio.sleep(0.03)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert await slow(keys=[], args=["second"]) == b"second"
    finally:
        await slow.aclose()
        await client.aclose()


async def test_a_slot_is_renewed_while_its_request_runs_past_its_lease(redis_prefix: str) -> None:
    """Leases are short so that a dead replica's slots come back soon; a live request keeps its slot for as
    long as it runs (one renewal call per replica, every third of a lease)."""
    store = RedisLimits(REDIS_URL, redis_prefix, lease_s=1.5)
    other = RedisLimits(REDIS_URL, redis_prefix, lease_s=1.5)  # another replica
    try:
        assert await store.admit([], [Hold("c", 1, "long")]) == (0.0, -1, (True,), 0.0)
        await asyncio.sleep(3.2)  # over two leases (renewed every 0.5 s)
        assert await other.admit([], [Hold("c", 1, "newcomer")]) == (0.0, -1, (False,), 0.0)
        assert await other.in_use("c") == 1
        await store.finish([], [("c", "long")])
        assert await other.admit([], [Hold("c", 1, "newcomer")]) == (0.0, -1, (True,), 0.0)
    finally:
        await store.aclose()
        await other.aclose()


async def test_a_release_redis_could_not_get_is_sent_once_it_answers_and_frees_only_its_own_slot(
    redis_prefix: str,
) -> None:
    from tests.fakes.tcp_proxy import TcpProxy

    direct = aioredis.from_url(REDIS_URL)
    zset = redis_prefix + "conc:c"
    with TcpProxy(int(urlsplit(REDIS_URL).port or 6379)) as proxy:
        store = RedisLimits(f"redis://127.0.0.1:{proxy.port}/0", redis_prefix, timeout_s=0.2, lease_s=60)
        other = RedisLimits(REDIS_URL, redis_prefix, lease_s=60)  # another replica, still reaching Redis
        try:
            assert await store.admit([], [Hold("c", 2, "r1")]) == (0.0, -1, (True,), 0.0)
            proxy.cut()
            await store.finish([], [("c", "r1")])  # cannot be sent now
            await store.release("c", "r1")  # nor this second release of the same slot
            assert await direct.zrange(zset, 0, -1) == [b"r1"]
            proxy.restore()
            assert await other.admit([], [Hold("c", 2, "r2")]) == (0.0, -1, (True,), 0.0)
            for _ in range(100):  # up to 5 s: the pending release is retried every second
                if await direct.zrange(zset, 0, -1) == [b"r2"]:
                    break
                await asyncio.sleep(0.05)
            assert await direct.zrange(zset, 0, -1) == [b"r2"]  # r1 released, r2 not
            await store.release("c", "r1")  # once more, Redis reachable: still only r1's own entry
            await store.admit([], [])  # (and one round trip through the batch)
            assert await other.in_use("c") == 1
        finally:
            await store.aclose()
            await other.aclose()
            await direct.aclose()


@pytest.mark.parametrize("fail_open", [True, False])
@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("unable to perform operation on <TCPTransport closed=True>; the handler is closed"),
        ConnectionResetError(104, "Connection reset by peer"),
        AttributeError("'NoneType' object has no attribute 'readline'"),
        EOFError(),
    ],
    ids=type,
)
async def test_every_client_error_follows_the_failure_policy(
    fail_open: bool, error: Exception, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the Redis client raises (uvloop's RuntimeError for a closed transport once reached a caller
    as a 500) is an outage: admitted unlimited when failing open, LimitsUnavailable when failing closed."""
    store = RedisLimits(REDIS_URL, redis_prefix, fail_open=fail_open)

    async def broken(*_: object, **__: object) -> None:
        raise error

    monkeypatch.setattr(store, "_script", broken)
    monkeypatch.setattr(store, "_acquire", broken)
    monkeypatch.setattr(store.redis, "zrem", broken)
    try:
        if fail_open:
            assert await store.admit(rate("k", 1, 1), [Hold("c", 1, "h")]) == (0.0, -1, (True,), 0.0)
            assert await store.try_acquire("c", 1, "h2")
        else:
            with pytest.raises(LimitsUnavailable):
                await store.admit(rate("k", 1, 1), [Hold("c", 1, "h")])
            with pytest.raises(LimitsUnavailable):
                await store.try_acquire("c", 1, "h2")
        await store.release("c", "h2")  # never raises
        await store.finish(rate("k", 1, 1), [("c", "h")])
    finally:
        monkeypatch.undo()
        await store.aclose()


async def test_an_admission_cancelled_before_or_during_its_call_leaves_no_slot_taken(redis_prefix: str) -> None:
    store = RedisLimits(REDIS_URL, redis_prefix)
    try:
        for turns in range(6):  # cancelled while queued, while its batch is in flight, or after
            task = asyncio.create_task(store.admit([], [Hold("c", 1, f"r{turns}")]))
            for _ in range(turns):
                await asyncio.sleep(0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            else:
                await store.finish([], [("c", f"r{turns}")])  # it finished first: its caller gives it back
            await store.finish([], [("other", "x")])  # queued after the give-back: resolved once it is applied
            assert await store.in_use("c") == 0
    finally:
        await store.aclose()


async def test_a_slot_never_given_back_is_renewed_no_longer_than_a_request_may_run(redis_prefix: str) -> None:
    """Renewal must not turn a slot that some path forgot to give back into one taken for ever."""
    store = RedisLimits(REDIS_URL, redis_prefix, lease_s=0.6, max_hold_s=0.5)
    try:
        assert await store.admit([], [Hold("c", 1, "forgotten")]) == (0.0, -1, (True,), 0.0)
        await asyncio.sleep(0.4)
        assert await store.in_use("c") == 1  # renewed within its bound
        for _ in range(60):  # up to 3 s; it goes within about max_hold_s + a lease
            if await store.in_use("c") == 0:
                break
            await asyncio.sleep(0.05)
        assert await store.in_use("c") == 0
    finally:
        await store.aclose()
